package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// podWorkload stands in for a pod's containers: a process in a cgroup
// named after the pod's UID, as the kubelet makes them.
func podWorkload(t *testing.T, podUID string) *exec.Cmd {
	t.Helper()
	base := "/sys/fs/cgroup/pids"
	if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
		t.Skipf("no cgroup v1 pids hierarchy for the stand-in workloads: %v", err)
	}
	dir := filepath.Join(base, "sitecon-e2e-"+strconv.Itoa(os.Getpid()), "kubepods", "besteffort", "pod"+podUID, "c1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for d := dir; d != base; d = filepath.Dir(d) {
			_ = os.Remove(d)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// Issue 19 §3: a node cut off from the others (its API server gone, no
// peer's agent answering) fences itself once the fence bound has passed:
// the auto app's workload on it is stopped, the pinned app's runs on. A
// cut shorter than the bound stops nothing.
func TestFenceStopsAutoAppsWhenCutOff(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	dyn := dynClient(t, site)
	appsDir, logDir := t.TempDir(), t.TempDir()
	c := sitebox.NodeUUID("node-c")
	appConfigs := map[string]apps.AppConfig{
		"fence-auto": {UUID: "e2e00000-0000-4000-8000-0000000000f1", DisplayName: "fence-auto", Activate: true, Kind: apps.KindContainer,
			Image: "registry.local/auto:1", DesignatedNodeID: c, Affinity: apps.AffinityPreferred},
		"fence-pinned": {UUID: "e2e00000-0000-4000-8000-0000000000f2", DisplayName: "fence-pinned", Activate: true, Kind: apps.KindContainer,
			Image: "registry.local/pinned:1", DesignatedNodeID: c, Affinity: apps.AffinityRequired},
	}
	for name, a := range appConfigs {
		writeJSON(t, filepath.Join(appsDir, "apps", name+".json"), a)
	}
	const failoverTimeout = 16 * time.Second
	bound := apps.DeriveFenceTimings(failoverTimeout).FenceAfter
	nodeC := startAgentWith(t, site, "node-c", appsDir, logDir, func(o *agent.Options) {
		o.Apps.FailoverTimeout = failoverTimeout
		o.Apps.Fence.Disabled = false
	})
	agents := map[string]*siteAgent{"node-c": nodeC}
	defer logAgentsOnFailure(t, logDir, "node-c")
	t.Cleanup(func() {
		nodeC.counter.lost.Store(false)
		cleanupApps(t, cs, dyn, agents, appsDir, appConfigs)
		nodeC.stop()
	})
	podOf := func(name string) corev1.Pod {
		sel := metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + appConfigs[name].UUID}
		return waitPods(t, cs, kube.AppNamespace, sel, 60*time.Second, name+" Ready on node-c", onlyPodReadyOn("node-c"))[0]
	}
	auto := podWorkload(t, string(podOf("fence-auto").UID))
	pinned := podWorkload(t, string(podOf("fence-pinned").UID))
	// The fence record keeps what node-c's Node says of its fence, which
	// the leader judges its silence by: a restart cut off with other
	// settings fences by the stricter (TestFenceWatchRestartedCutOffFencesByWhatItsNodeSays).
	want := kube.FenceSettings{Fencing: true, FailoverTimeout: failoverTimeout}.String()
	record := filepath.Join(logDir, "node-c-state", apps.FenceRecordFile)
	until(t, 30*time.Second, "node-c's fence record keeps what its Node says", func() (string, bool) {
		data, _ := os.ReadFile(record)
		var rec struct {
			NodeSays string `json:"node_says"`
		}
		_ = json.Unmarshal(data, &rec)
		return rec.NodeSays, rec.NodeSays == want
	}, func(says string) string { return fmt.Sprintf("the record says %q, want %q", says, want) })
	bothRun := func() error {
		for name, cmd := range map[string]*exec.Cmd{"the auto app's": auto, "the pinned app's": pinned} {
			if !running(cmd.Process.Pid) {
				return &stopped{what: name}
			}
		}
		return nil
	}

	// Cut off for less than the bound: nothing stopped, then or later.
	nodeC.counter.lost.Store(true)
	time.Sleep(bound / 3) // the length of the cut itself, not a wait for a condition
	nodeC.counter.lost.Store(false)
	holds(t, bound+3*time.Second, "a cut shorter than the fence bound stops nothing", bothRun)

	// Cut off for good: the auto app's workload stops within the bound
	// (and the check, the probes and the stop after it); the pinned runs.
	cut := time.Now()
	nodeC.counter.lost.Store(true)
	until(t, bound+15*time.Second, "the auto app's workload stopped by the fence", func() (bool, bool) {
		return true, !running(auto.Process.Pid)
	}, func(bool) string { return "still running; node state: " + nodeC.agent.Apps().Node().Fence })
	// The bound counts from the last check that got through, up to one
	// check period (1 s) before the cut.
	if took := time.Since(cut); took < bound-1500*time.Millisecond {
		t.Errorf("fenced %s after the cut, before the %s bound (less a check period)", took, bound)
	}
	if !running(pinned.Process.Pid) {
		t.Error("the pinned app's workload was stopped: nobody else will run it")
	}
	if st := nodeC.agent.Apps().Node(); st.Fence == "" {
		t.Error("the node's status does not say it fenced itself")
	}

	// The cut ends: the fence lifts, and the auto app's pod it stopped is
	// renewed at once: a new pod, not the old one left to the kubelet's
	// crash back-off (up to 5 minutes after a long cut). The pinned app's
	// pod, never stopped, stays as it was.
	autoBefore, pinnedBefore := podOf("fence-auto").UID, podOf("fence-pinned").UID
	nodeC.counter.lost.Store(false)
	sel := metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + appConfigs["fence-auto"].UUID}
	waitPods(t, cs, kube.AppNamespace, sel, 30*time.Second, "the fenced auto app's pod renewed (a new one Ready on node-c)", func(pods []corev1.Pod) bool {
		return onlyPodReadyOn("node-c")(pods) && pods[0].UID != autoBefore
	})
	if now := podOf("fence-pinned").UID; now != pinnedBefore {
		t.Errorf("the pinned app's pod, which the fence never stopped, was renewed too (%s, was %s)", now, pinnedBefore)
	}
}

// Issue 36: a cut-off group of two answers each other. node-b and node-c
// lose the API server and every other node, but still reach each other's
// agent: neither is contact with the quorum (neither proves it reaches a
// ready API server), so both fence their auto apps. Before, a peer's
// answer was contact, and the pair ran on while the other side could
// start the apps again.
func TestCutOffPairFencesBothSides(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	dyn := dynClient(t, site)
	appsDir, logDir := t.TempDir(), t.TempDir()
	appConfigs := map[string]apps.AppConfig{
		"pair-b": {UUID: "e2e00000-0000-4000-8000-0000000000f3", DisplayName: "pair-b", Activate: true, Kind: apps.KindContainer,
			Image: "registry.local/auto:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), Affinity: apps.AffinityPreferred},
		"pair-c": {UUID: "e2e00000-0000-4000-8000-0000000000f4", DisplayName: "pair-c", Activate: true, Kind: apps.KindContainer,
			Image: "registry.local/auto:1", DesignatedNodeID: sitebox.NodeUUID("node-c"), Affinity: apps.AffinityPreferred},
	}
	for name, a := range appConfigs {
		writeJSON(t, filepath.Join(appsDir, "apps", name+".json"), a)
	}
	const failoverTimeout = 16 * time.Second
	bound := apps.DeriveFenceTimings(failoverTimeout).FenceAfter
	agents := map[string]*siteAgent{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		agents[n] = startAgentWith(t, site, n, appsDir, logDir, func(o *agent.Options) {
			startSiteAgentTimings(o)
			o.Apps.FailoverTimeout = failoverTimeout
		})
	}
	defer logAgentsOnFailure(t, logDir, "node-a", "node-b", "node-c")
	t.Cleanup(func() {
		for _, a := range agents {
			a.counter.cutOff.Store(nil)
		}
		cleanupApps(t, cs, dyn, agents, appsDir, appConfigs)
		for _, a := range agents {
			a.stop()
		}
	})
	podOn := func(name, node string) corev1.Pod {
		sel := metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + appConfigs[name].UUID}
		return waitPods(t, cs, kube.AppNamespace, sel, 60*time.Second, name+" Ready on "+node, onlyPodReadyOn(node))[0]
	}
	onB := podWorkload(t, string(podOn("pair-b", "node-b").UID))
	onC := podWorkload(t, string(podOn("pair-c", "node-c").UID))
	addrB, err := site.StatusAddr("node-b")
	if err != nil {
		t.Fatal(err)
	}
	addrC, err := site.StatusAddr("node-c")
	if err != nil {
		t.Fatal(err)
	}
	// Each half of the pair reaches only the other's agent.
	agents["node-b"].counter.cutOff.Store(&[]string{addrC})
	agents["node-c"].counter.cutOff.Store(&[]string{addrB})
	cut := time.Now()
	until(t, bound+15*time.Second, "both halves of the cut-off pair fenced", func() (bool, bool) {
		return true, !running(onB.Process.Pid) && !running(onC.Process.Pid)
	}, func(bool) string {
		return fmt.Sprintf("node-b's workload running %v (fence %q), node-c's %v (fence %q)", running(onB.Process.Pid), agents["node-b"].agent.Apps().Node().Fence,
			running(onC.Process.Pid), agents["node-c"].agent.Apps().Node().Fence)
	})
	if took := time.Since(cut); took < bound-1500*time.Millisecond {
		t.Errorf("fenced %s after the cut, before the %s bound (less a check period)", took, bound)
	}
	for _, n := range []string{"node-b", "node-c"} {
		if st := agents[n].agent.Apps().Node(); !strings.Contains(st.Fence, "no peer proves it reaches one") {
			t.Errorf("%s's status does not say why it fenced: %q", n, st.Fence)
		}
	}
}

type stopped struct{ what string }

func (s *stopped) Error() string { return s.what + " workload was stopped" }
