package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// requestCounter counts an agent's requests to the API server that are not
// watches, by "VERB resource".
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
	// lost: the device is gone, every request fails (see siteAgent.lose).
	lost atomic.Bool
}

func (c *requestCounter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if c.lost.Load() {
				return nil, errors.New("the device is lost: nothing it sends arrives")
			}
			if req.URL.Query().Get("watch") != "true" {
				c.mu.Lock()
				what := resourceOf(req.URL.Path)
				if what == "leases" {
					what += "/" + path.Base(req.URL.Path)
				}
				c.counts[req.Method+" "+what]++
				c.mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

func (c *requestCounter) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	c.counts = map[string]int{}
	return out
}

// leaseRenewal is the one request an idle agent makes: the stats-leader
// election reading and renewing its Lease.
func leaseRenewal(req string) bool {
	return req == "GET leases/"+kube.StatsLeaderLeaseName || req == "PUT leases/"+kube.StatsLeaderLeaseName
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// resourceOf turns /apis/apps/v1/namespaces/x/deployments/y into "deployments".
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			return parts[i+2]
		}
	}
	if len(parts) >= 3 && parts[0] == "api" {
		return parts[2]
	}
	if len(parts) >= 4 && parts[0] == "apis" {
		return parts[3]
	}
	return path
}

// siteAgent is one node's agent, run in-process with --no-bootstrap.
type siteAgent struct {
	node    string
	agent   *agent.Agent
	counter *requestCounter
	cancel  context.CancelFunc
	done    chan struct{}
	socket  string // its local API
}

func startSiteAgent(t testing.TB, site *sitebox.TestSite, node, appsDir, logDir string) *siteAgent {
	t.Helper()
	return startAgentWith(t, site, node, appsDir, logDir, func(o *agent.Options) {
		// The tests' speed-ups over the shipped defaults (see the README).
		o.LeaderDurations = apps.LeaderDurations{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
		o.Apps.Placement = apps.PlacementOptions{MoveAfter: 3 * time.Second}
		o.Apps.FailoverTimeout = 3 * time.Second
	})
}

// startAgentWith runs an apps agent for node on sitebox, logging to
// logDir, with sitecon's shipped timings unless tune changes them.
func startAgentWith(t testing.TB, site *sitebox.TestSite, node, appsDir, logDir string, tune func(*agent.Options)) *siteAgent {
	t.Helper()
	logFile, err := os.OpenFile(filepath.Join(logDir, node+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	counter := &requestCounter{counts: map[string]int{}}
	opts := agent.Options{
		NoBootstrap: true, NodeName: node, RESTConfig: counter.wrap(site.Config),
		SocketPath: filepath.Join(logDir, node+".sock"),
		Apps: apps.Options{
			AppsDir: appsDir, StateDir: filepath.Join(logDir, node+"-state"),
			NodeProbe: siteStatus.probe,
		},
		Log: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if tune != nil {
		tune(&opts)
	}
	return runSiteAgent(t, node, logDir, logFile, counter, opts)
}

// runSiteAgent runs an in-process agent until the test stops or loses it.
func runSiteAgent(t testing.TB, node, logDir string, logFile *os.File, counter *requestCounter, opts agent.Options) *siteAgent {
	a := agent.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	sa := &siteAgent{node: node, agent: a, counter: counter, cancel: cancel, done: make(chan struct{}), socket: filepath.Join(logDir, node+".sock")}
	go func() {
		defer close(sa.done)
		defer logFile.Close()
		if err := a.Run(ctx); err != nil {
			t.Errorf("agent %s: %v", node, err)
		}
	}()
	return sa
}

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

func (s *siteAgent) stop() {
	s.cancel()
	<-s.done
}

// lose takes the agent away as a dead device goes: from now on nothing it
// sends reaches the API server, so it releases nothing (its stats-leader
// lease stays until it expires), then it stops.
func (s *siteAgent) lose() {
	s.counter.lost.Store(true)
	s.stop()
}

func (s *siteAgent) app(name string) (apps.AppState, bool) {
	appsPart := s.agent.Apps()
	if appsPart == nil {
		return apps.AppState{}, false
	}
	for _, st := range appsPart.Apps() {
		if st.Name == name {
			return st, true
		}
	}
	return apps.AppState{}, false
}

type agentView map[string]apps.AppState // by node

func waitAgents(t *testing.T, agents []*siteAgent, app string, within time.Duration, what string, cond func(agentView) bool) agentView {
	t.Helper()
	return until(t, within, app+": "+what, func() (agentView, bool) {
		view := agentView{}
		for _, a := range agents {
			if st, ok := a.app(app); ok {
				view[a.node] = st
			}
		}
		return view, len(view) == len(agents) && cond(view)
	}, func(view agentView) string {
		var b strings.Builder
		b.WriteString("agents see:")
		for node, st := range view {
			fmt.Fprintf(&b, "\n  %s: dnid=%s is_dnid=%v sched=%v running=%v status=%s node=%s lost=%v err=%q",
				node, st.DNIdNode, st.IsDNIdNode, st.ScheduledOnThisNode, st.ClusterAppRunning, st.KubeStatus, st.Node, st.Lost, st.Error)
		}
		return b.String()
	})
}

// runningOn: every agent agrees the app runs on node, and only node's agent
// reports cluster_app_running.
func runningOn(node string) func(agentView) bool {
	return func(v agentView) bool {
		for n, st := range v {
			if st.KubeStatus != apps.KubeRunning || st.Node != node || st.ClusterAppRunning != (n == node) {
				return false
			}
		}
		return true
	}
}

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := config.WriteFileAtomic(path, data, 0o644); err != nil {
		t.Fatal(err)
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

// placeOnlyReplica creates a volume's claim as the agents lay it out, with
// the Longhorn simulator's test-side knob naming the node for its replica
// (as an administrator would pin it with Longhorn node tags); the agents
// then apply their layout over it and leave the knob alone.
func placeOnlyReplica(t *testing.T, dyn dynamic.Interface, v apps.VolumeConfig, node string) {
	t.Helper()
	l, err := apps.LayoutVolume(v)
	if err != nil {
		t.Fatal(err)
	}
	obj := l.Object.DeepCopy()
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[sitebox.AnnotationReplicaNode] = node
	obj.SetAnnotations(ann)
	if _, err := dyn.Resource(l.GVR).Namespace(l.Namespace()).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
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
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range []string{"node-a", "node-b", "node-c"} {
				if data, err := os.ReadFile(filepath.Join(logDir, n+".log")); err == nil {
					t.Logf("agent %s log (last 3000 bytes):\n%s", n, tail(string(data), 3000))
				}
			}
		}
	})
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
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, a := range all() {
			vols := a.agent.Apps().Volumes()
			if len(vols) != 3 {
				return false, nil
			}
			for _, v := range vols {
				if v.IsDNIdNode != (a.node == "node-b") || v.Replicated == v.IsDNIdNode || v.DNIdNode != "node-b" || v.Robustness != "healthy" {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		for _, a := range all() {
			t.Logf("%s: %+v", a.node, a.agent.Apps().Volumes())
		}
		t.Fatal("the agents do not agree on the volumes")
	}
	// The same, as another service on the device reads it: the socket.
	var overSocket []apps.AppState
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
		stillAnswers := siteStatus.answer(t, "node-b")
		site.RecoverOnCleanup(t, "node-b")
		if err := site.Fail("node-b"); err != nil {
			t.Fatal(err)
		}
		live := []*siteAgent{agents["node-a"], agents["node-c"]}
		held := waitAnyTimeline(t, live, 90*time.Second, "the web pod held while node-b answers", func(e apps.TimelineEvent) bool {
			return e.App == appWeb && (e.Kind == apps.EventFailover || e.Kind == apps.EventRefusal && strings.Contains(e.Message, "still answers"))
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
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			vols, err := lh.LonghornV1beta2().Volumes(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, v := range vols.Items {
				if v.Status.KubernetesStatus.PVCName == webClaim {
					return v.Status.CurrentNodeID == webNode.Node, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("volume %s is not attached on %s, where %s runs", webClaim, webNode.Node, appWeb)
		}
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
		var leader *siteAgent
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
			leader = nil
			for _, a := range live {
				if a.agent.LeaderState().IsLeader {
					if leader != nil {
						return false, fmt.Errorf("two leaders: %s and %s", leader.node, a.node)
					}
					leader = a
				}
			}
			return leader != nil, nil
		})
		if err != nil {
			t.Fatalf("no single stats leader among the live agents: %v", err)
		}
		waitTimeline(t, leader, 60*time.Second, "force-deleted the web pod", func(e apps.TimelineEvent) bool {
			return e.Kind == apps.EventFailover && e.App == appWeb
		})
		refusal := waitTimeline(t, leader, 30*time.Second, "refused the local pod", func(e apps.TimelineEvent) bool {
			return e.Kind == apps.EventRefusal && e.App == appLocal && !strings.Contains(e.Message, "still answers")
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
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
			events, err := cs.CoreV1().Events(kube.AppNamespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailoverRefused"})
			return err == nil && len(events.Items) > 0, nil
		})
		if err != nil {
			t.Fatalf("no Kubernetes Event for the refusal: %v", err)
		}
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
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return a.agent.Apps().Node().ConfigErrors[path] != "", nil
		})
		if err != nil {
			t.Fatalf("no per-file error for %s: %+v", path, a.agent.Apps().Node())
		}
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
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			st, ok := agents[placer].app(appMoved)
			return ok && len(agents[placer].agent.Apps().Node().ConfigErrors) == 0 && st.KubeStatus == apps.KubeRunning, nil
		})
		if err != nil {
			t.Fatalf("the mended file was not taken up: %+v", agents[placer].agent.Apps().Node())
		}
	})
}

// siteconApply is sitecon's server-side apply entry on obj: when it was
// made and the fields it owns. Another apply that changes anything changes it.
func siteconApply(obj metav1.Object) string {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == apps.FieldManager && f.Operation == metav1.ManagedFieldsOperationApply {
			fields := ""
			if f.FieldsV1 != nil {
				fields = string(f.FieldsV1.Raw)
			}
			return f.Time.UTC().Format(time.RFC3339) + " " + fields
		}
	}
	return "(none)"
}

func managedBySitecon(fields []metav1.ManagedFieldsEntry) bool {
	for _, f := range fields {
		if f.Manager == apps.FieldManager && f.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}

// waitSettled waits until every agent says it has nothing pending (no pass
// running, no retry or failover timer armed, no change queued: see
// apps.Pending), five looks in a row, with no request by any agent but
// its lease renewals and events between them. Quiet alone is no witness:
// a write held back by a timer (a failed apply retried after 5 s, a
// failover timer) comes after any quiet spell shorter than the timer; an
// armed timer shows here. The looks in a row only cover a write still in
// flight to another agent's watch.
func waitSettled(t *testing.T, agents map[string]*siteAgent) {
	t.Helper()
	if last, err := waitSettledFor(agents, 120*time.Second, 0, nil); err != nil {
		t.Fatalf("the agents did not settle: %+v", last)
	}
}

// waitSettledFor is waitSettled within a time, with look called at every
// look. A timer armed to fire more than beyond from now counts as settled:
// a hold that lapses later (a conflict's window) is no work in hand for a
// test that ends before it.
func waitSettledFor(agents map[string]*siteAgent, within, beyond time.Duration, look func()) (map[string]apps.Pending, error) {
	idleLooks := 0
	var last map[string]apps.Pending
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, within, true, func(context.Context) (bool, error) {
		if look != nil {
			look()
		}
		settled := true
		last = map[string]apps.Pending{}
		for n, a := range agents {
			appsPart := a.agent.Apps()
			if appsPart == nil {
				settled = false // a restarted agent has not reached the cluster yet
				continue
			}
			p := appsPart.Pending()
			last[n] = p
			if beyond > 0 && p.RetryAt.After(time.Now().Add(beyond)) {
				p.RetryAt = time.Time{}
			}
			if !p.Idle() || p.Passes == 0 {
				settled = false
			}
			for req := range a.counter.reset() {
				// Events trail the writes they report: not a sign of work.
				if !leaseRenewal(req) && !strings.HasSuffix(req, " events") {
					settled = false
				}
			}
		}
		if !settled {
			idleLooks = 0
			return false, nil
		}
		idleLooks++
		return idleLooks >= 5, nil
	})
	return last, err
}

func waitTimeline(t *testing.T, a *siteAgent, within time.Duration, what string, match func(apps.TimelineEvent) bool) apps.TimelineEvent {
	t.Helper()
	return waitAnyTimeline(t, []*siteAgent{a}, within, a.node+": "+what, match)
}

// cleanupApps removes the test's apps through the agents (the config goes,
// the DNId agents delete their workloads), then what is left of them.
func cleanupApps(t *testing.T, cs kubernetes.Interface, dyn dynamic.Interface, agents map[string]*siteAgent, appsDir string, appConfigs map[string]apps.AppConfig) {
	ctx := context.Background()
	for name := range appConfigs {
		_ = os.Remove(filepath.Join(appsDir, "apps", name+".json"))
	}
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		deps, err := cs.AppsV1().Deployments(kube.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: apps.LabelManagedBy + "=" + apps.FieldManager})
		return err == nil && len(deps.Items) == 0, nil
	})
	for _, a := range agents {
		a.stop()
	}
	_ = cs.CoreV1().ConfigMaps(kube.AppNamespace).Delete(ctx, apps.PlacementConfigMapName, metav1.DeleteOptions{})
	for _, a := range appConfigs {
		sel := metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + a.UUID}
		for _, gvr := range apps.WorkloadGVRs {
			_ = dyn.Resource(gvr).Namespace(kube.AppNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
		}
		pods, _ := cs.CoreV1().Pods(kube.AppNamespace).List(ctx, sel)
		for _, p := range pods.Items {
			err := cs.CoreV1().Pods(kube.AppNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Logf("cleanup pod %s: %v", p.Name, err)
			}
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
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
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		st, ok := agents["node-b"].app("stale-web")
		return ok && strings.Contains(st.Error, "waiting for the newer config"), nil
	})
	if err != nil {
		st, _ := agents["node-b"].app("stale-web")
		t.Fatalf("node-b does not say it holds an older config: %+v", st)
	}
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
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		st, ok := agents["node-b"].app("stale-web")
		return ok && st.Error == "" && !st.IsDNIdNode, nil
	})
	if err != nil {
		st, _ := agents["node-b"].app("stale-web")
		t.Fatalf("node-b did not take up the newer config: %+v", st)
	}
	waitAgents(t, all, "stale-web", 30*time.Second, "still on node-c", runningOn("node-c"))
}

// sitebox's own agents, as the demo runs them: a failed node takes its agent
// with it (the stats leader moves), and recovery starts it again.
func TestSiteboxFailTakesTheAgent(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	appsDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(appsDir, "apps"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := site.StartAgents(sitecon, appsDir, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := site.StopAgents(); err != nil {
			t.Error(err)
		}
	})
	nodeStatus := func(node string) (apps.NodeState, error) {
		var st apps.NodeState
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
		err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			st, err := nodeStatus(node)
			return err == nil && st.Status == apps.NodeReady, nil
		})
		if err != nil {
			t.Fatalf("%s's agent never reported READY", node)
		}
	}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		waitReady(n)
	}
	// The stats leader's node is the one lost: a dead device never gives
	// its lease up, so another node may take it only once it expires.
	leases := clientset(t, site).CoordinationV1().Leases(kube.AppNamespace)
	var held *coordinationv1.Lease
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, kube.StatsLeaderLeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.RenewTime == nil {
			return false, nil
		}
		held = l
		return true, nil
	}); err != nil {
		t.Fatal("no stats leader among the site's agents")
	}
	lost := *held.Spec.HolderIdentity
	site.RecoverOnCleanup(t, lost)
	if err := site.Fail(lost); err != nil {
		t.Fatal(err)
	}
	failedAt := time.Now()
	if _, err := nodeStatus(lost); err == nil {
		t.Fatalf("%s failed, but its agent still answers", lost)
	}
	var taken *coordinationv1.Lease
	if err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, kube.StatsLeaderLeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || *l.Spec.HolderIdentity == lost {
			return false, nil
		}
		taken = l
		return true, nil
	}); err != nil {
		t.Fatalf("the stats leader did not move off failed %s", lost)
	}
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
}

// startOlderConfigAgents runs three agents where node-b holds an older
// version of one app (older) than node-a and node-c (newer); it returns
// the agents and node-b's config file. The app and its agents are cleaned
// up after the test, node-b's file first (with it, node-b would lay the
// app out again).
func startOlderConfigAgents(t *testing.T, site *sitebox.TestSite, newer, older apps.AppConfig) (map[string]*siteAgent, []*siteAgent, string) {
	t.Helper()
	newDir, oldDir, logDir := t.TempDir(), t.TempDir(), t.TempDir()
	oldFile := filepath.Join(oldDir, "apps", older.DisplayName+".json")
	writeJSON(t, filepath.Join(newDir, "apps", newer.DisplayName+".json"), newer)
	writeJSON(t, oldFile, older)
	agents := map[string]*siteAgent{
		"node-a": startSiteAgent(t, site, "node-a", newDir, logDir),
		"node-b": startSiteAgent(t, site, "node-b", oldDir, logDir),
		"node-c": startSiteAgent(t, site, "node-c", newDir, logDir),
	}
	t.Cleanup(func() {
		_ = os.Remove(oldFile)
		cleanupApps(t, clientset(t, site), dynClient(t, site), agents, newDir, map[string]apps.AppConfig{newer.DisplayName: newer})
	})
	return agents, []*siteAgent{agents["node-a"], agents["node-b"], agents["node-c"]}, oldFile
}
