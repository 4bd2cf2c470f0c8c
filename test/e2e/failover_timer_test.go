package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// The failover guard's timer starts when the leader first sees an app's pod
// on the unreachable node, and runs while the pod still tolerates the taint
// (--move-after): the two overlap instead of adding up, which is what
// brings the failover budget under EVE's figures (agent.FailoverBudget).
// With a toleration as long as the timer, the force-delete follows the
// eviction within a probe, not a whole timer later; and the pod is not
// force-deleted before the taint evicted it.
func TestFailoverTimerRunsWhileThePodToleratesTheTaint(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs, dyn := clientset(t, site), dynClient(t, site)
	appsDir, logDir := t.TempDir(), t.TempDir()
	b := sitebox.NodeUUID("node-b")
	vol := apps.VolumeConfig{UUID: "e5000000-0000-4000-8000-00000000000a", Name: "ot-data", DesignatedNodeID: b, Size: "1Gi", ReplicaCount: 3}
	appConfigs := map[string]apps.AppConfig{
		"ot-web": {UUID: "e5000000-0000-4000-8000-000000000001", DisplayName: "ot-web", Activate: true, Kind: apps.KindContainer,
			Image: "registry.local/web:1", DesignatedNodeID: b, Affinity: apps.AffinityPreferred, VolumeRefs: []string{vol.UUID}},
	}
	writeJSON(t, filepath.Join(appsDir, "volumes", vol.Name+".json"), vol)
	writeJSON(t, filepath.Join(appsDir, "apps", "ot-web.json"), appConfigs["ot-web"])
	const window = 12 * time.Second // both the toleration and the timer
	tune := func(o *agent.Options) {
		startSiteAgentTimings(o)
		o.Apps.Placement = apps.PlacementOptions{MoveAfter: window}
		o.Apps.FailoverTimeout = window
	}
	agents := map[string]*siteAgent{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		agents[n] = startAgentWith(t, site, n, appsDir, logDir, tune)
	}
	t.Cleanup(func() {
		logAgentsOnFailure(t, logDir, "node-a", "node-b", "node-c")
		cleanupApps(t, cs, dyn, agents, appsDir, appConfigs)
		_ = cs.CoreV1().PersistentVolumeClaims(kube.AppNamespace).Delete(context.Background(), apps.ClaimName(vol), metav1.DeleteOptions{})
	})
	all := []*siteAgent{agents["node-a"], agents["node-b"], agents["node-c"]}
	waitAgents(t, all, "ot-web", 60*time.Second, "running on node-b", runningOn("node-b"))

	agents["node-b"].lose()
	site.RecoverOnCleanup(t, "node-b")
	if err := site.Fail("node-b"); err != nil {
		t.Fatal(err)
	}
	live := []*siteAgent{agents["node-a"], agents["node-c"]}
	sel := metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + appConfigs["ot-web"].UUID}
	evictedOnB := func(p corev1.Pod) bool { return p.Spec.NodeName == "node-b" && p.DeletionTimestamp != nil }
	waitPods(t, cs, kube.AppNamespace, sel, 90*time.Second, "ot-web's pod on node-b evicted", func(pods []corev1.Pod) bool {
		return slices.ContainsFunc(pods, evictedOnB)
	})
	evicted := time.Now()
	forced := waitAnyTimeline(t, live, 2*window+30*time.Second, "ot-web's pod force-deleted", func(e apps.TimelineEvent) bool {
		return e.App == "ot-web" && e.Kind == apps.EventFailover && strings.Contains(e.Message, "force-deleting")
	})
	after := forced.Time.Sub(evicted)
	t.Logf("force-deleted %.1fs after the eviction was seen (toleration and timer %s each)", after.Seconds(), window)
	// A timer started at the eviction would run out a whole window after
	// it; started at the first sighting on the lost node, it ran out with
	// the toleration, and the force-delete waits for the probe alone.
	if after > window/2 {
		t.Errorf("force-deleted %.1fs after the eviction: the guard's timer started at the eviction, not while the pod tolerated the taint", after.Seconds())
	}
	waitAgents(t, live, "ot-web", 60*time.Second, "running off node-b", func(v agentView) bool {
		return v["node-a"].Node != "node-b" && (runningOn("node-a")(v) || runningOn("node-c")(v))
	})
}
