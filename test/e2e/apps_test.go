package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// getSocket reads path from an agent's local API into v.
func getSocket(t *testing.T, socket, path string, v any) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
	resp, err := client.Get("http://agent" + path)
	if err != nil {
		t.Fatalf("GET %s on %s: %v", path, socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %s, %s", path, resp.Status, resp.Header.Get("Content-Type"))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

const (
	appWeb    = "e2e-web"
	appVM     = "e2e-vm"
	appPinned = "e2e-pinned"
	appLocal  = "e2e-local"
	appMoved  = "e2e-moved"
)

// localDataVolume is e2e-local's one-replica volume. Longhorn places a
// replica where its scheduler likes (sitecon asks for no data locality):
// TestAppsAgents puts it on node-b itself, see placeOnlyReplica.
func localDataVolume() apps.VolumeConfig {
	return apps.VolumeConfig{UUID: "e2e00000-0000-4000-8000-00000000000c", Name: "local-data", DesignatedNodeID: sitebox.NodeUUID("node-b"), Size: "1Gi", ReplicaCount: 1}
}

// writeTestApps writes the apps of TestAppsAgents: four on node-b (an auto
// container and an auto VM with three-replica volumes, a pinned VM, an auto
// container whose only replica lives on node-b) and one on node-c.
func writeTestApps(t *testing.T, dir string) map[string]apps.AppConfig {
	b, c := sitebox.NodeUUID("node-b"), sitebox.NodeUUID("node-c")
	vols := []apps.VolumeConfig{
		{UUID: "e2e00000-0000-4000-8000-00000000000a", Name: "web-data", DesignatedNodeID: b, Size: "1Gi", ReplicaCount: 3},
		{UUID: "e2e00000-0000-4000-8000-00000000000b", Name: "vm-disk", DesignatedNodeID: b, Size: "2Gi", ReplicaCount: 3},
		localDataVolume(),
	}
	appConfigs := map[string]apps.AppConfig{
		appWeb: {UUID: "e2e00000-0000-4000-8000-000000000001", DisplayName: appWeb, Activate: true, Kind: apps.KindContainer,
			Image: "registry.local/web:1", DesignatedNodeID: b, Affinity: apps.AffinityPreferred, VolumeRefs: []string{vols[0].UUID}},
		appVM: {UUID: "e2e00000-0000-4000-8000-000000000002", DisplayName: appVM, Activate: true, Kind: apps.KindVM,
			Image: "registry.local/vm:1", DesignatedNodeID: b, Affinity: apps.AffinityPreferred, VolumeRefs: []string{vols[1].UUID},
			Resources: apps.AppResources{CPU: "1", Memory: "512Mi"}},
		appPinned: {UUID: "e2e00000-0000-4000-8000-000000000003", DisplayName: appPinned, Activate: true, Kind: apps.KindVM,
			Image: "registry.local/pinned:1", DesignatedNodeID: b, Affinity: apps.AffinityRequired,
			Resources: apps.AppResources{Memory: "1Gi"}},
		appLocal: {UUID: "e2e00000-0000-4000-8000-000000000004", DisplayName: appLocal, Activate: true, Kind: apps.KindContainer,
			Image: "registry.local/local:1", DesignatedNodeID: b, Affinity: apps.AffinityPreferred, VolumeRefs: []string{vols[2].UUID}},
		appMoved: {UUID: "e2e00000-0000-4000-8000-000000000005", DisplayName: appMoved, Activate: true, Kind: apps.KindContainer,
			Image: "registry.local/moved:1", DesignatedNodeID: c, Affinity: apps.AffinityPreferred},
	}
	for _, v := range vols {
		writeJSON(t, filepath.Join(dir, "volumes", v.Name+".json"), v)
	}
	for name, a := range appConfigs {
		writeJSON(t, filepath.Join(dir, "apps", name+".json"), a)
	}
	return appConfigs
}

// Three agents on sitebox run the apps: each on its designated node; a node
// lost moves the auto apps and the agents agree where they run; the pinned
// app is reported, not moved; the leader force-deletes a stuck pod only when
// its volumes are safe; an on-site override moves an app and the old node's
// agent coming back leaves it alone; an idle agent sends nothing but watches
// and lease renewals.
func TestAppsAgents(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs, err := kubernetes.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	appsDir, logDir := t.TempDir(), t.TempDir()
	t.Cleanup(func() { logAgentsOnFailure(t, logDir, "node-a", "node-b", "node-c") })
	dyn, err := dynamic.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	// The only replica of e2e-local's volume on node-b, arranged by the
	// test before any agent lays the claim out.
	placeOnlyReplica(t, dyn, localDataVolume(), "node-b")
	appConfigs := writeTestApps(t, appsDir)
	agents := map[string]*siteAgent{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		agents[n] = startSiteAgent(t, site, n, appsDir, logDir)
	}
	all := func() []*siteAgent { return []*siteAgent{agents["node-a"], agents["node-b"], agents["node-c"]} }
	t.Cleanup(func() { cleanupApps(t, cs, dyn, agents, appsDir, appConfigs) })

	// Each app runs on its designated node, laid out by that node's agent.
	for _, name := range []string{appWeb, appVM, appPinned, appLocal} {
		view := waitAgents(t, all(), name, 60*time.Second, "running on node-b", runningOn("node-b"))
		if !view["node-b"].IsDNIdNode || view["node-a"].IsDNIdNode || !view["node-b"].Activate || view["node-a"].Activate {
			t.Fatalf("%s: gating wrong: %+v", name, view)
		}
	}
	waitAgents(t, all(), appMoved, 30*time.Second, "running on node-c", runningOn("node-c"))
	dep, err := cs.AppsV1().Deployments(kube.AppNamespace).Get(ctx, apps.WorkloadName(appConfigs[appWeb]), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Annotations[apps.AnnotationDNId] != sitebox.NodeUUID("node-b") || !managedBySitecon(dep.ManagedFields) {
		t.Fatalf("deployment not applied by sitecon from node-b: %v %v", dep.Annotations, dep.ManagedFields)
	}

	// Volumes: node-b creates all three (its agent says is_dnid_node), the
	// others record them as replicated, and all see Longhorn's robustness.
	type volumesSeen map[string][]apps.VolumeState // by node
	until(t, 30*time.Second, "the agents agree on the volumes: node-b creates all three, the others see them replicated, all healthy", func() (volumesSeen, bool) {
		seen, agree := volumesSeen{}, true
		for _, a := range all() {
			vols := a.agent.Apps().Volumes()
			seen[a.node] = vols
			if len(vols) != 3 {
				agree = false
			}
			for _, v := range vols {
				if v.IsDNIdNode != (a.node == "node-b") || v.Replicated == v.IsDNIdNode || v.DNIdNode != "node-b" || v.Robustness != "healthy" {
					agree = false
				}
			}
		}
		return seen, agree
	}, func(seen volumesSeen) string { return fmt.Sprintf("the agents see: %+v", seen) })
	// The same, as another service on the device reads it: the socket.
	var overSocket []apps.PublishedApp
	getSocket(t, agents["node-b"].socket, "/v1/apps", &overSocket)
	var pinnedSeen bool
	for _, st := range overSocket {
		if st.Name == appPinned {
			pinnedSeen = st.IsDNIdNode && st.ClusterAppRunning && st.Node == "node-b" && st.KubeStatus == apps.KubeRunning
		}
	}
	if len(overSocket) != len(appConfigs) || !pinnedSeen {
		t.Fatalf("/v1/apps on node-b's socket: %+v", overSocket)
	}
	var volsOverSocket []apps.VolumeState
	getSocket(t, agents["node-a"].socket, "/v1/volumes", &volsOverSocket)
	if len(volsOverSocket) != 3 || volsOverSocket[0].IsDNIdNode || !volsOverSocket[0].Replicated {
		t.Fatalf("/v1/volumes on node-a's socket: %+v", volsOverSocket)
	}

	// Idle: after everything settled, the agents send no LIST or GET and no
	// writes, only watches and their stats-leader lease renewals.
	// No GET or LIST but the leases' and the fence's readiness check.
	t.Run("idle agents make no requests", func(t *testing.T) {
		waitSettled(t, agents)
		window := 60 * time.Second
		if testing.Short() {
			window = 10 * time.Second
		}
		for _, a := range agents {
			a.counter.reset()
		}
		time.Sleep(window) // the measurement window itself, not a synchronisation
		for _, a := range agents {
			for req, n := range a.counter.reset() {
				// The fence's contact check: at most once a second.
				if fenceContactCheck(req) && n <= int(window/time.Second)+2 {
					continue
				}
				if !leaseRenewal(req) {
					t.Errorf("%s sent %d × %s while idle for %s", a.node, n, req, window)
				}
			}
		}
	})

	// An on-site override moves appMoved to node-a: every agent agrees on
	// the new DNId; node-c's agent, restarted, does not touch it.
	t.Run("override moves an app", func(t *testing.T) {
		override := apps.PlacementOverride{Node: "node-a", NodeUUID: sitebox.NodeUUID("node-a"), By: "e2e", At: time.Now().UTC(),
			Reason: "test", ConfigDNId: sitebox.NodeUUID("node-c")}
		raw, _ := json.Marshal(override)
		_, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: apps.PlacementConfigMapName, Namespace: kube.AppNamespace},
			Data:       map[string]string{appConfigs[appMoved].UUID: string(raw)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		view := waitAgents(t, all(), appMoved, 60*time.Second, "moved to node-a", runningOn("node-a"))
		for n, st := range view {
			if st.EffectiveDNId != sitebox.NodeUUID("node-a") || st.IsDNIdNode != (n == "node-a") || st.Override == nil {
				t.Fatalf("%s disagrees on the effective DNId: %+v", n, st)
			}
		}
		before, err := cs.AppsV1().Deployments(kube.AppNamespace).Get(ctx, apps.WorkloadName(appConfigs[appMoved]), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		agents["node-c"].stop()
		agents["node-c"] = startSiteAgent(t, site, "node-c", appsDir, logDir)
		waitAgents(t, all(), appMoved, 30*time.Second, "seen running on node-a by the restarted agent", runningOn("node-a"))
		waitSettled(t, agents)
		after, err := cs.AppsV1().Deployments(kube.AppNamespace).Get(ctx, before.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The resource version is no witness: the deployment controller
		// still writes the rollout's status (the old pod going, counts).
		// An agent's write is a new object, a spec change (generation)
		// or a new apply by sitecon.
		if after.UID != before.UID || after.Generation != before.Generation || siteconApply(after) != siteconApply(before) {
			t.Fatalf("the old DNId node's agent touched the moved app: uid %s → %s, generation %d → %d, sitecon's apply %s → %s",
				before.UID, after.UID, before.Generation, after.Generation, siteconApply(before), siteconApply(after))
		}
		if after.ResourceVersion != before.ResourceVersion {
			t.Logf("%s: resource version %s → %s from status writes only", after.Name, before.ResourceVersion, after.ResourceVersion)
		}
	})

	// node-b is lost (its agent with it): the auto apps come up elsewhere,
	// the pinned one stays and is reported, the stuck pods are dealt with.
	t.Run("node lost", func(t *testing.T) {
		agents["node-b"].lose() // as a dead device: nothing released, its lease expires
		// At first node-b's device still answers on the cluster network (a
		// partition, not a loss): its stuck pods are held, whatever the
		// replicas elsewhere, and the leader says why.
		stillAnswers := answerForPartitioned(t, site, "node-b")
		site.RecoverOnCleanup(t, "node-b")
		if err := site.Fail("node-b"); err != nil {
			t.Fatal(err)
		}
		live := []*siteAgent{agents["node-a"], agents["node-c"]}
		held := waitAnyTimeline(t, live, 90*time.Second, "the web pod held while node-b answers", func(e apps.TimelineEvent) bool {
			return e.App == appWeb && (e.Kind == apps.EventFailover || e.Kind == apps.EventRefusal && strings.Contains(e.Message, "shows a sign of life"))
		})
		if held.Kind != apps.EventRefusal {
			t.Fatalf("the web pod was force-deleted while node-b still answered: %q", held.Message)
		}
		webPods, listErr := cs.CoreV1().Pods(kube.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + appConfigs[appWeb].UUID})
		if listErr != nil {
			t.Fatal(listErr)
		}
		stuckWeb := 0
		for _, p := range webPods.Items {
			if p.Spec.NodeName == "node-b" && p.DeletionTimestamp != nil {
				stuckWeb++
			}
		}
		if stuckWeb != 1 {
			t.Fatalf("the web pod on node-b is gone while node-b still answers (held: %q)", held.Message)
		}
		stillAnswers() // now node-b is silent: the evidence is complete
		for _, name := range []string{appWeb, appVM} {
			view := waitAgents(t, live, name, 90*time.Second, "running on node-a or node-c", func(v agentView) bool {
				st := v["node-a"]
				return st.Node != "node-b" && (runningOn("node-a")(v) || runningOn("node-c")(v))
			})
			t.Logf("%s now runs on %s", name, view["node-a"].Node)
		}
		// Longhorn attaches the web app's volume where its pod runs now.
		webNode, _ := agents["node-a"].app(appWeb)
		webClaim := apps.ClaimName(apps.VolumeConfig{UUID: "e2e00000-0000-4000-8000-00000000000a", Name: "web-data"})
		lh := longhornClient(t, site)
		until(t, 30*time.Second, fmt.Sprintf("volume %s attached on %s, where %s runs", webClaim, webNode.Node, appWeb), func() (string, bool) {
			vols, err := lh.LonghornV1beta2().Volumes(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return "listing the volumes: " + err.Error(), false
			}
			for _, v := range vols.Items {
				if v.Status.KubernetesStatus.PVCName == webClaim {
					return fmt.Sprintf("attached on %q (%s)", v.Status.CurrentNodeID, v.Status.State), v.Status.CurrentNodeID == webNode.Node
				}
			}
			return "no Longhorn volume for the claim", false
		}, func(last string) string { return "last seen: " + last })
		view := waitAgents(t, live, appPinned, 60*time.Second, "reported lost on node-b", func(v agentView) bool {
			for _, st := range v {
				if st.Lost == nil || st.Lost.Node != "node-b" || st.Lost.Since.IsZero() || st.KubeStatus == apps.KubeRunning {
					return false
				}
			}
			return true
		})
		t.Logf("pinned app: lost on %s since %s", view["node-a"].Lost.Node, view["node-a"].Lost.Since)
		// Exactly one live agent leads, and it judged the stuck pods.
		leader := until(t, 15*time.Second, "one stats leader among the live agents", func() (*siteAgent, bool) {
			var leader *siteAgent
			for _, a := range live {
				if a.agent.LeaderState().IsLeader {
					if leader != nil {
						t.Fatalf("two leaders among the live agents: %s and %s", leader.node, a.node)
					}
					leader = a
				}
			}
			return leader, leader != nil
		}, func(*siteAgent) string {
			var b strings.Builder
			for _, a := range live {
				fmt.Fprintf(&b, " %s: %+v", a.node, a.agent.LeaderState())
			}
			return "leader states:" + b.String()
		})
		waitTimeline(t, leader, 60*time.Second, "force-deleted the web pod", func(e apps.TimelineEvent) bool {
			return e.Kind == apps.EventFailover && e.App == appWeb
		})
		refusal := waitTimeline(t, leader, 30*time.Second, "refused the local pod", func(e apps.TimelineEvent) bool {
			return e.Kind == apps.EventRefusal && e.App == appLocal && !strings.Contains(e.Message, "shows a sign of life")
		})
		if !strings.Contains(refusal.Message, "no up-to-date replica off node-b") {
			t.Fatalf("refusal does not say why: %q", refusal.Message)
		}
		pods, err := cs.CoreV1().Pods(kube.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + appConfigs[appLocal].UUID})
		if err != nil {
			t.Fatal(err)
		}
		stuck := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil && p.Spec.NodeName == "node-b" {
				stuck++
			}
		}
		if stuck != 1 {
			t.Fatalf("the pod holding the only replica's app on node-b must be left alone: %d stuck pods", stuck)
		}
		pods, err = cs.CoreV1().Pods(kube.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + appConfigs[appWeb].UUID})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == "node-b" {
				t.Fatalf("web pod %s still on node-b after failover", p.Name)
			}
		}
		// The event recorder sends its Events in the background.
		waitEvent(t, cs, kube.AppNamespace, metav1.ListOptions{FieldSelector: "reason=FailoverRefused"}, 15*time.Second,
			"a Kubernetes Event for the refusal", func(corev1.Event) bool { return true })
		if err := site.Recover("node-b"); err != nil {
			t.Fatal(err)
		}
		agents["node-b"] = startSiteAgent(t, site, "node-b", appsDir, logDir)
		// The pinned VM failed with its node; back, its agent lays it out again.
		waitAgents(t, all(), appPinned, 90*time.Second, "running on node-b again", runningOn("node-b"))
	})

	// A broken app file is reported per file; every other app is still
	// served, and the broken app keeps its last good version.
	t.Run("bad app file", func(t *testing.T) {
		path := filepath.Join(appsDir, "apps", appMoved+".json")
		if err := os.WriteFile(path, []byte(`{"uuid": "not-a-uuid", "displayname": "x"`), 0o644); err != nil {
			t.Fatal(err)
		}
		a := agents["node-a"]
		until(t, 10*time.Second, "a per-file error for "+path, func() (apps.PublishedNode, bool) {
			node := a.agent.Apps().Node()
			return node, node.ConfigErrors[path] != ""
		}, func(node apps.PublishedNode) string { return fmt.Sprintf("node-a's node state: %+v", node) })
		if len(a.agent.Apps().Apps()) != len(appConfigs) {
			t.Fatalf("a broken file dropped apps: %d of %d served", len(a.agent.Apps().Apps()), len(appConfigs))
		}
		if st, ok := a.app(appMoved); !ok || st.KubeStatus != apps.KubeRunning {
			t.Fatalf("the broken app lost its last good version: %+v", st)
		}

		// The agent placing it restarts with the file still broken: it has
		// no last good version now, so the app is unknown to it, and its
		// running workload must not be taken for a removed app.
		before, err := cs.AppsV1().Deployments(kube.AppNamespace).Get(ctx, apps.WorkloadName(appConfigs[appMoved]), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		placer := ""
		for n := range agents {
			if sitebox.NodeUUID(n) == before.Annotations[apps.AnnotationDNId] {
				placer = n
			}
		}
		if placer == "" {
			t.Fatalf("no agent's node is the DNId %q of %s", before.Annotations[apps.AnnotationDNId], before.Name)
		}
		agents[placer].stop()
		agents[placer] = startSiteAgent(t, site, placer, appsDir, logDir)
		waitTimeline(t, agents[placer], 30*time.Second, "removals held", func(e apps.TimelineEvent) bool {
			return strings.Contains(e.Message, "removals held") && strings.Contains(e.Message, path)
		})
		waitSettled(t, agents)
		after, err := cs.AppsV1().Deployments(kube.AppNamespace).Get(ctx, before.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the restarted agent removed the app its broken file describes: %v", err)
		}
		if after.UID != before.UID || after.DeletionTimestamp != nil {
			t.Fatalf("deployment %s replaced or deleting after the restart (uid %s -> %s)", before.Name, before.UID, after.UID)
		}
		// Mended, the file is the app again and removals resume.
		writeJSON(t, path, appConfigs[appMoved])
		waitApp(t, agents[placer], appMoved, 20*time.Second, "the mended file taken up, the app running", func(st apps.PublishedApp) bool {
			return len(agents[placer].agent.Apps().Node().ConfigErrors) == 0 && st.KubeStatus == apps.KubeRunning
		})
	})
}

func managedBySitecon(fields []metav1.ManagedFieldsEntry) bool {
	for _, f := range fields {
		if f.Manager == apps.FieldManager && f.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}

// The controller moved an app (version 2: designated node-c) and node-b has
// not heard yet (version 1: designated node-b). node-b's agent must not lay
// its old version over the new one: it says it waits for the newer config,
// and the Deployment stays as node-c laid it out until node-b catches up.
func TestStaleConfigDoesNotFight(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	v2 := apps.AppConfig{UUID: "e3000000-0000-4000-8000-000000000001", Version: 2, DisplayName: "stale-web", Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/web:2", DesignatedNodeID: sitebox.NodeUUID("node-c"), Affinity: apps.AffinityPreferred}
	v1 := v2
	v1.Version, v1.Image, v1.DesignatedNodeID = 1, "registry.local/web:1", sitebox.NodeUUID("node-b")
	agents, all, oldFile := startOlderConfigAgents(t, site, v2, v1)

	waitAgents(t, all, "stale-web", 60*time.Second, "running on node-c", runningOn("node-c"))
	waitApp(t, agents["node-b"], "stale-web", 30*time.Second, "node-b says it holds an older config", func(st apps.PublishedApp) bool {
		return strings.Contains(st.Error, "waiting for the newer config")
	})
	// The Deployment as node-c laid it out, read as soon as node-b holds
	// back: node-b's apply from then on, at once or after any timer, is
	// the fight. Its watch wakes it on every change node-c makes.
	before, err := cs.AppsV1().Deployments(kube.AppNamespace).Get(ctx, apps.WorkloadName(v2), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if before.Annotations[apps.AnnotationConfigVersion] != "2" || before.Annotations[apps.AnnotationDNId] != sitebox.NodeUUID("node-c") {
		t.Fatalf("the Deployment is not version 2 from node-c: %v", before.Annotations)
	}
	waitSettled(t, agents)
	after, err := cs.AppsV1().Deployments(kube.AppNamespace).Get(ctx, before.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Generation != before.Generation || siteconApply(after) != siteconApply(before) {
		t.Fatalf("the Deployment was rewritten: generation %d → %d, apply %s → %s", before.Generation, after.Generation, siteconApply(before), siteconApply(after))
	}

	// node-b catches up: the error goes, and the app stays on node-c.
	writeJSON(t, oldFile, v2)
	waitApp(t, agents["node-b"], "stale-web", 30*time.Second, "node-b takes up the newer config (no error, not the DNId node)", func(st apps.PublishedApp) bool {
		return st.Error == "" && !st.IsDNIdNode
	})
	waitAgents(t, all, "stale-web", 30*time.Second, "still on node-c", runningOn("node-c"))
}

// startSiteboxAgents starts sitebox's own agents (`sitecon agent`, as the
// demo runs them) on the settled shared site, with an empty apps
// directory, and stops them when the test ends.
func startSiteboxAgents(t *testing.T) *sitebox.TestSite {
	t.Helper()
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	appsDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(appsDir, "apps"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := site.StartAgents(sitecon, appsDir, sitebox.QuickAgentTimings(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := site.StopAgents(); err != nil {
			t.Error(err)
		}
	})
	return site
}

// sitebox's own agents, as the demo runs them: a failed node takes its agent
// with it (the stats leader moves), and recovery starts it again.
func TestSiteboxFailTakesTheAgent(t *testing.T) {
	site := startSiteboxAgents(t)
	nodeStatus := func(node string) (apps.PublishedNode, error) {
		var st apps.PublishedNode
		client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", site.AgentSocket(node))
			}}}
		resp, err := client.Get("http://agent/v1/node")
		if err != nil {
			return st, err
		}
		defer resp.Body.Close()
		return st, json.NewDecoder(resp.Body).Decode(&st)
	}
	waitReady := func(node string) {
		t.Helper()
		until(t, 60*time.Second, node+"'s agent reports READY", func() (string, bool) {
			st, err := nodeStatus(node)
			if err != nil {
				return err.Error(), false
			}
			return fmt.Sprintf("%+v", st), st.Status == apps.PublishedReady
		}, func(last string) string { return "its /v1/node: " + last })
	}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		waitReady(n)
	}
	// Each agent proves its life at its node's address, as the guards of
	// the others probe it; a failed node's is silent.
	probe := lifeProber(t, site)
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		probe(n, apps.LifeProven, 15*time.Second)
	}
	// The stats leader's node is the one lost: a dead device never gives
	// its lease up, so another node may take it only once it expires.
	leases := clientset(t, site).CoordinationV1().Leases(kube.AppNamespace)
	lease := func() (*coordinationv1.Lease, error) {
		return leases.Get(t.Context(), kube.StatsLeaderLeaseName, metav1.GetOptions{})
	}
	describeLease := func(l *coordinationv1.Lease) string {
		if l == nil {
			return "no stats-leader Lease"
		}
		return fmt.Sprintf("the Lease: %+v", l.Spec)
	}
	held := until(t, 60*time.Second, "a stats leader among the site's agents", func() (*coordinationv1.Lease, bool) {
		l, err := lease()
		return l, err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" && l.Spec.RenewTime != nil
	}, describeLease)
	lost := *held.Spec.HolderIdentity
	site.RecoverOnCleanup(t, lost)
	if err := site.Fail(lost); err != nil {
		t.Fatal(err)
	}
	failedAt := time.Now()
	if _, err := nodeStatus(lost); err == nil {
		t.Fatalf("%s failed, but its agent still answers", lost)
	}
	probe(lost, apps.LifeSilent, 15*time.Second)
	taken := until(t, 90*time.Second, "the stats leader moves off failed "+lost, func() (*coordinationv1.Lease, bool) {
		l, err := lease()
		return l, err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" && *l.Spec.HolderIdentity != lost
	}, describeLease)
	// The lease ran out rather than being handed over: the last renewal
	// the dead node made, plus the lease's duration, came first.
	expiry := held.Spec.RenewTime.Add(time.Duration(*held.Spec.LeaseDurationSeconds) * time.Second)
	if taken.Spec.AcquireTime == nil || taken.Spec.AcquireTime.Add(time.Second).Before(expiry) {
		t.Errorf("%s took the lease at %v, before %s's lease expired at %v: it was released, not lost", *taken.Spec.HolderIdentity, taken.Spec.AcquireTime, lost, expiry)
	}
	t.Logf("stats leader moved from %s to %s %s after the failure", lost, *taken.Spec.HolderIdentity, time.Since(failedAt).Round(time.Second))
	if err := site.Recover(lost); err != nil {
		t.Fatal(err)
	}
	waitReady(lost)
	probe(lost, apps.LifeProven, 15*time.Second)
}

// waitApp waits until agent a sees app and its state satisfies cond, and
// returns the state.
func waitApp(t *testing.T, a *siteAgent, app string, within time.Duration, what string, cond func(apps.PublishedApp) bool) apps.PublishedApp {
	t.Helper()
	type seen struct {
		st apps.PublishedApp
		ok bool
	}
	return until(t, within, a.node+": "+app+": "+what, func() (seen, bool) {
		st, ok := a.app(app)
		return seen{st, ok}, ok && cond(st)
	}, func(s seen) string {
		if !s.ok {
			return "the agent does not know the app"
		}
		return fmt.Sprintf("the agent sees: %+v", s.st)
	}).st
}
