package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/test/sitebox"
)

// Two nodes hold different unversioned configs for the same two apps, each
// naming itself the designated node: a container app (a Deployment) and a
// pinned VM (a VMI). Neither config is newer, so neither node may take the
// apps from the other on every change: the node that finds the other's
// fresh layout holds back and reports the conflict (its app state, its
// timeline, a Kubernetes Event on the workload), and the workloads stay as
// the first node laid them out: no Deployment rolled again and again, no
// VMI deleted again and again. The window (--conflict-window, minutes by
// default) outlasts the test.
func TestAppsConflictingConfigsBackOff(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	dirB, dirC, logDir := t.TempDir(), t.TempDir(), t.TempDir()
	web := apps.AppConfig{UUID: "e6000000-0000-4000-8000-000000000001", DisplayName: "conflict-web", Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/conflict-web:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), Affinity: apps.AffinityPreferred}
	vm := apps.AppConfig{UUID: "e6000000-0000-4000-8000-000000000002", DisplayName: "conflict-vm", Activate: true, Kind: apps.KindVM,
		Image: "registry.local/conflict-vm:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), Affinity: apps.AffinityRequired,
		Resources: apps.AppResources{Memory: "512Mi"}}
	appConfigs := map[string]apps.AppConfig{web.DisplayName: web, vm.DisplayName: vm}
	for name, app := range appConfigs {
		writeJSON(t, filepath.Join(dirB, "apps", name+".json"), app)
		app.DesignatedNodeID = sitebox.NodeUUID("node-c")
		writeJSON(t, filepath.Join(dirC, "apps", name+".json"), app)
	}
	agents := map[string]*siteAgent{
		"node-b": startSiteAgent(t, site, "node-b", dirB, logDir),
		"node-c": startSiteAgent(t, site, "node-c", dirC, logDir),
	}
	t.Cleanup(func() {
		logAgentsOnFailure(t, logDir, "node-b", "node-c")
		for name := range appConfigs {
			_ = os.Remove(filepath.Join(dirC, "apps", name+".json")) // first: node-c would lay them out again
		}
		cleanupApps(t, cs, dynClient(t, site), agents, dirB, appConfigs)
	})
	deployments := cs.AppsV1().Deployments(kube.AppNamespace)
	vmis := site.Clients(t).KubeVirt.KubevirtV1().VirtualMachineInstances(kube.AppNamespace)

	// Every VMI of the pinned VM and every generation of the Deployment
	// seen while the agents settle: a fight shows as more of them.
	vmiUIDs := map[types.UID]bool{}
	var lastGeneration int64
	look := func() {
		if v, err := vmis.Get(ctx, apps.WorkloadName(vm), metav1.GetOptions{}); err == nil {
			vmiUIDs[v.UID] = true
		}
		if d, err := deployments.Get(ctx, apps.WorkloadName(web), metav1.GetOptions{}); err == nil {
			lastGeneration = d.Generation
		}
	}
	until(t, 60*time.Second, "the apps laid out (a VMI, a Deployment)", func() (struct{}, bool) {
		look()
		return struct{}{}, len(vmiUIDs) > 0 && lastGeneration > 0
	}, func(struct{}) string {
		return fmt.Sprintf("VMIs %d, Deployment generation %d", len(vmiUIDs), lastGeneration)
	})
	if last, ok := waitSettledFor(agents, 60*time.Second, 2*time.Minute, look); !ok {
		t.Fatalf("the agents fight over the apps: %d VMIs of %s created, the Deployment of %s at generation %d; not settled within 60s, %s",
			len(vmiUIDs), vm.DisplayName, web.DisplayName, lastGeneration, last)
	}
	if len(vmiUIDs) != 1 {
		t.Fatalf("the pinned VM's VMI was deleted and made again: %d VMIs", len(vmiUIDs))
	}

	// Per app, one node laid it out and the other holds back and says so.
	placers := map[string]string{}
	for _, app := range []apps.AppConfig{web, vm} {
		placer, holder := "", ""
		for n, a := range agents {
			st, _ := a.app(app.DisplayName)
			if strings.Contains(st.Error, "conflict") {
				holder = n
			} else {
				placer = n
			}
		}
		if holder == "" || placer == "" {
			var b strings.Builder
			for n, a := range agents {
				st, _ := a.app(app.DisplayName)
				fmt.Fprintf(&b, "\n  %s: is_dnid=%v node=%s error=%q", n, st.IsDNIdNode, st.Node, st.Error)
			}
			t.Fatalf("%s: want one node holding back with a conflict, the other placing; agents see:%s", app.DisplayName, b.String())
		}
		placers[app.DisplayName] = placer
		st, _ := agents[holder].app(app.DisplayName)
		t.Logf("%s laid out by %s; %s says: %s", app.DisplayName, placer, holder, st.Error)
		waitTimeline(t, agents[holder], 10*time.Second, "the conflict on the timeline", func(e apps.TimelineEvent) bool {
			return e.App == app.DisplayName && e.Warning && strings.Contains(e.Message, "conflict") && strings.Contains(e.Message, placer)
		})
		waitEvent(t, cs, kube.AppNamespace, metav1.ListOptions{FieldSelector: "involvedObject.name=" + apps.WorkloadName(app)}, 10*time.Second,
			app.DisplayName+": a LayoutConflict Event from "+holder+" on its workload", func(e corev1.Event) bool {
				return e.Reason == "LayoutConflict" && e.Type == corev1.EventTypeWarning && e.Source.Host == holder
			})
	}

	// Settled, the workloads stay as they are: the holder's next passes
	// (a config re-read, a status change) write nothing, and neither do
	// the agents restarted: a restarted holder has lost its sightings and
	// counts the window afresh from its first look, it does not write at
	// once.
	dep, err := deployments.Get(ctx, apps.WorkloadName(web), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vmi, err := vmis.Get(ctx, apps.WorkloadName(vm), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, obj := range map[string]metav1.Object{web.DisplayName: dep, vm.DisplayName: vmi} {
		ann := obj.GetAnnotations()
		if ann[apps.AnnotationLaidOutBy] != placers[name] || ann[apps.AnnotationLaidOutAt] == "" || ann[apps.AnnotationConfigHash] == "" {
			t.Errorf("%s does not record its layout by %s: %v", name, placers[name], ann)
		}
	}
	for _, n := range []string{"node-b", "node-c"} {
		agents[n].stop()
		agents[n] = startSiteAgent(t, site, n, map[string]string{"node-b": dirB, "node-c": dirC}[n], logDir)
	}
	if last, ok := waitSettledFor(agents, 60*time.Second, 2*time.Minute, nil); !ok {
		t.Fatalf("the restarted agents settled: not within 60s; %s", last)
	}
	for _, app := range []apps.AppConfig{web, vm} {
		conflicts := 0
		for _, a := range agents {
			if st, _ := a.app(app.DisplayName); strings.Contains(st.Error, "conflict") {
				conflicts++
			}
		}
		if conflicts != 1 {
			t.Errorf("%s: after the restarts, %d nodes report the conflict, want 1", app.DisplayName, conflicts)
		}
	}
	depAfter, err := deployments.Get(ctx, dep.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vmiAfter, err := vmis.Get(ctx, vmi.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if depAfter.Generation != dep.Generation || siteconApply(depAfter) != siteconApply(dep) {
		t.Errorf("the Deployment was rewritten: generation %d → %d, apply %s → %s", dep.Generation, depAfter.Generation, siteconApply(dep), siteconApply(depAfter))
	}
	if vmiAfter.UID != vmi.UID || siteconApply(vmiAfter) != siteconApply(vmi) {
		t.Errorf("the VMI was replaced or rewritten: uid %s → %s, apply %s → %s", vmi.UID, vmiAfter.UID, siteconApply(vmi), siteconApply(vmiAfter))
	}
}

// The controller moved an app to node-c (version 2), and a technician then
// moved it on site to node-a, against version 2. node-b has not heard of
// version 2 (its version 1 names node-b): it must neither clear the
// technician's move nor lay the app out. Version 3 reaching node-b does
// clear it: the controller has spoken since.
func TestAppsOverrideKeptByOlderConfig(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	v2 := apps.AppConfig{UUID: "e6000000-0000-4000-8000-000000000003", Version: 2, DisplayName: "kept-move", Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/kept-move:2", DesignatedNodeID: sitebox.NodeUUID("node-c"), Affinity: apps.AffinityPreferred}
	v1 := v2
	v1.Version, v1.Image, v1.DesignatedNodeID = 1, "registry.local/kept-move:1", sitebox.NodeUUID("node-b")
	agents, all, oldFile := startOlderConfigAgents(t, site, v2, v1)
	waitAgents(t, all, v2.DisplayName, 60*time.Second, "running on node-c", runningOn("node-c"))

	if err := change.WriteOverride(ctx, cs, v2.UUID, kube.PlacementOverride{Node: "node-a", NodeUUID: sitebox.NodeUUID("node-a"),
		By: "e2e", At: time.Now().UTC(), ConfigDNId: v2.DesignatedNodeID, ConfigVersion: 2, Reason: "on-site move"}); err != nil {
		t.Fatal(err)
	}
	overrideKept := func() bool {
		cm, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, apps.PlacementConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, ok := cm.Data[v2.UUID]
		return ok
	}
	waitAgents(t, all, v2.DisplayName, 60*time.Second, "moved to node-a", func(v agentView) bool {
		return overrideKept() && runningOn("node-a")(v)
	})
	waitSettled(t, agents)
	if !overrideKept() {
		t.Fatal("the on-site move was cleared by a node holding an older config")
	}
	waitAgents(t, all, v2.DisplayName, 10*time.Second, "still on node-a", runningOn("node-a"))

	// Version 3 names node-b: node-b clears the move and takes the app; the
	// others, holding version 2, leave it to node-b.
	v3 := v1
	v3.Version, v3.Image = 3, "registry.local/kept-move:3"
	writeJSON(t, oldFile, v3)
	waitAgents(t, all, v2.DisplayName, 60*time.Second, "moved to node-b by version 3", func(v agentView) bool {
		return !overrideKept() && runningOn("node-b")(v)
	})
}

// The same two disagreeing unversioned configs, with a short conflict
// window: one config wins (the one whose designated node UUID sorts
// first, on every node alike), its node takes the apps over at most once,
// and the other node holds for good, saying the other config wins the
// tie. Watched over four windows: the pinned VM's VMI is made at most
// twice (the first layout, one takeover), the Deployment changes hands at
// most once, and ends laid out by the winner; no restart every window.
func TestAppsConflictingConfigsOneWinner(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	dirB, dirC, logDir := t.TempDir(), t.TempDir(), t.TempDir()
	web := apps.AppConfig{UUID: "e6000000-0000-4000-8000-000000000011", DisplayName: "tie-web", Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/tie-web:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), Affinity: apps.AffinityPreferred}
	vm := apps.AppConfig{UUID: "e6000000-0000-4000-8000-000000000012", DisplayName: "tie-vm", Activate: true, Kind: apps.KindVM,
		Image: "registry.local/tie-vm:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), Affinity: apps.AffinityRequired,
		Resources: apps.AppResources{Memory: "512Mi"}}
	appConfigs := map[string]apps.AppConfig{web.DisplayName: web, vm.DisplayName: vm}
	for name, app := range appConfigs {
		writeJSON(t, filepath.Join(dirB, "apps", name+".json"), app)
		app.DesignatedNodeID = sitebox.NodeUUID("node-c")
		writeJSON(t, filepath.Join(dirC, "apps", name+".json"), app)
	}
	winner, loser := "node-b", "node-c"
	if sitebox.NodeUUID("node-c") < sitebox.NodeUUID("node-b") {
		winner, loser = loser, winner
	}
	const window = 4 * time.Second
	tune := func(o *agent.Options) { o.Apps.ConflictWindow = window }
	agents := map[string]*siteAgent{}
	// The loser first, so that the winner finds its layout and takes over.
	for _, n := range []string{loser, winner} {
		dir := map[string]string{"node-b": dirB, "node-c": dirC}[n]
		agents[n] = startAgentWith(t, site, n, dir, logDir, func(o *agent.Options) {
			startSiteAgentTimings(o)
			tune(o)
		})
		if n == loser {
			until(t, 60*time.Second, "the loser's layout of both apps", func() (struct{}, bool) {
				d, errD := cs.AppsV1().Deployments(kube.AppNamespace).Get(ctx, apps.WorkloadName(web), metav1.GetOptions{})
				v, errV := site.Clients(t).KubeVirt.KubevirtV1().VirtualMachineInstances(kube.AppNamespace).Get(ctx, apps.WorkloadName(vm), metav1.GetOptions{})
				return struct{}{}, errD == nil && errV == nil && d.Annotations[apps.AnnotationLaidOutBy] == loser && v.Annotations[apps.AnnotationLaidOutBy] == loser
			}, func(struct{}) string { return "not yet" })
		}
	}
	t.Cleanup(func() {
		logAgentsOnFailure(t, logDir, "node-b", "node-c")
		for name := range appConfigs {
			_ = os.Remove(filepath.Join(dirC, "apps", name+".json"))
		}
		cleanupApps(t, cs, dynClient(t, site), agents, dirB, appConfigs)
	})
	deployments := cs.AppsV1().Deployments(kube.AppNamespace)
	vmis := site.Clients(t).KubeVirt.KubevirtV1().VirtualMachineInstances(kube.AppNamespace)
	vmiUIDs := map[types.UID]bool{}
	var writers []string // the Deployment's laid-out-by, each change
	holds(t, 4*window+2*time.Second, "at most one takeover", func() error {
		if v, err := vmis.Get(ctx, apps.WorkloadName(vm), metav1.GetOptions{}); err == nil {
			vmiUIDs[v.UID] = true
		}
		if d, err := deployments.Get(ctx, apps.WorkloadName(web), metav1.GetOptions{}); err == nil {
			if by := d.Annotations[apps.AnnotationLaidOutBy]; len(writers) == 0 || writers[len(writers)-1] != by {
				writers = append(writers, by)
			}
		}
		if len(vmiUIDs) > 2 || len(writers) > 2 {
			return fmt.Errorf("the apps change hands again and again: %d VMIs of %s, the Deployment of %s laid out by %v in turn",
				len(vmiUIDs), vm.DisplayName, web.DisplayName, writers)
		}
		return nil
	})
	if writers[len(writers)-1] != winner {
		t.Fatalf("the Deployment ends laid out by %v, want the winner %s last", writers, winner)
	}
	for _, app := range []apps.AppConfig{web, vm} {
		st, _ := agents[loser].app(app.DisplayName)
		if !strings.Contains(st.Error, "wins the tie") || !strings.Contains(st.Error, winner) {
			t.Errorf("%s: the loser %s does not say the other config wins: %q", app.DisplayName, loser, st.Error)
		}
		if st, _ := agents[winner].app(app.DisplayName); st.Error != "" {
			t.Errorf("%s: the winner %s reports %q", app.DisplayName, winner, st.Error)
		}
	}
	waitTimeline(t, agents[loser], 10*time.Second, "the tie on the loser's timeline", func(e apps.TimelineEvent) bool {
		return e.App == vm.DisplayName && e.Kind == apps.EventConflict && strings.Contains(e.Message, "wins the tie")
	})
}
