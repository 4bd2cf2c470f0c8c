package e2e

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// The failover guard probes each node's real agent at the node's cluster
// address as the API server has it, and nothing it dials leaves this
// machine: every node's agent proves its life there; a failed node's
// address is silent (no reset: a powered-off device's kernel sends none),
// and after recovery its agent proves itself again.
func TestGuardProbesEachNodesAgentOnThisMachine(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	appsDir, logDir := t.TempDir(), t.TempDir()
	agents := map[string]*siteAgent{}
	nodes := []string{"node-a", "node-b", "node-c"}
	for _, n := range nodes {
		agents[n] = startSiteAgent(t, site, n, appsDir, logDir)
	}
	t.Cleanup(func() {
		for _, a := range agents {
			a.stop()
		}
	})
	probe := lifeProber(t, site)
	for _, n := range nodes {
		probe(n, apps.LifeProven, 15*time.Second)
	}
	guardDials.checkNoneRefused(t)
	if t.Failed() {
		return
	}

	agents["node-c"].lose()
	site.RecoverOnCleanup(t, "node-c")
	if err := site.Fail("node-c"); err != nil {
		t.Fatal(err)
	}
	probe("node-c", apps.LifeSilent, 15*time.Second)
	probe("node-a", apps.LifeProven, 5*time.Second)
	if err := site.Recover("node-c"); err != nil {
		t.Fatal(err)
	}
	agents["node-c"] = startSiteAgent(t, site, "node-c", appsDir, logDir)
	probe("node-c", apps.LifeProven, 15*time.Second)
	guardDials.checkNoneRefused(t)
}

// lifeProber probes a node as the failover guard does: the node's
// InternalIP as the API server has it, the site's cluster key, every dial
// checked to stay on this machine. The probe waits until the evidence is
// want.
func lifeProber(t *testing.T, site *sitebox.TestSite) func(node string, want apps.LifeEvidence, within time.Duration) {
	cs := clientset(t, site)
	token, err := site.ClusterToken()
	if err != nil {
		t.Fatal(err)
	}
	key, err := config.NewLifeKey(site.ClusterID, token)
	if err != nil {
		t.Fatal(err)
	}
	guard := apps.LifeProbe{Key: key, Dial: guardDials.dial("the test's guard")}
	t.Cleanup(func() { guardDials.checkNoneRefused(t) })
	return func(node string, want apps.LifeEvidence, within time.Duration) {
		t.Helper()
		until(t, within, fmt.Sprintf("%s probed at its cluster address: %s", node, want), func() (apps.NodeLife, bool) {
			n, err := cs.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
			if err != nil {
				return apps.NodeLife{Detail: err.Error()}, false
			}
			life := guard.Node(context.Background(), n)
			return life, life.Evidence == want
		}, func(life apps.NodeLife) string { return fmt.Sprintf("last probe: %+v", life) })
	}
}

// The guard end to end on a lost node whose host is still up (its agent
// and k3s down: the address refuses): the stuck pod is held, and the
// timeline and Event say so; held too while the host is paused (it takes
// the connection and never answers); once the host goes silent the pod is
// force-deleted, the verdict naming the silence.
func TestFailoverHeldWhileTheLostHostIsUp(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs, dyn := clientset(t, site), dynClient(t, site)
	appsDir, logDir := t.TempDir(), t.TempDir()
	appConfigs := map[string]apps.AppConfig{
		"hostup-web": {UUID: "e5000000-0000-4000-8000-000000000001", DisplayName: "hostup-web", Activate: true, Kind: apps.KindContainer,
			Image: "registry.local/web:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), Affinity: apps.AffinityPreferred},
	}
	for name, a := range appConfigs {
		writeJSON(t, filepath.Join(appsDir, "apps", name+".json"), a)
	}
	agents := map[string]*siteAgent{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		agents[n] = startSiteAgent(t, site, n, appsDir, logDir)
	}
	t.Cleanup(func() {
		logAgentsOnFailure(t, logDir, "node-a", "node-b", "node-c")
		cleanupApps(t, cs, dyn, agents, appsDir, appConfigs)
	})
	waitAgents(t, []*siteAgent{agents["node-a"], agents["node-b"], agents["node-c"]}, "hostup-web", 60*time.Second, "running on node-b", runningOn("node-b"))

	agents["node-b"].lose()
	site.RecoverOnCleanup(t, "node-b")
	if err := site.Fail("node-b"); err != nil {
		t.Fatal(err)
	}
	if err := site.HostUp("node-b"); err != nil {
		t.Fatal(err)
	}
	live := []*siteAgent{agents["node-a"], agents["node-c"]}
	held := waitAnyTimeline(t, live, 90*time.Second, "hostup-web held while node-b's host is up", func(e apps.TimelineEvent) bool {
		return e.App == "hostup-web" && (e.Kind == apps.EventFailover || e.Kind == apps.EventRefusal && strings.Contains(e.Message, "shows a sign of life"))
	})
	if held.Kind != apps.EventRefusal || !strings.Contains(held.Message, "its host is up") || !strings.Contains(held.Message, "refused the connection") {
		t.Fatalf("node-b's host refuses connections (it is up), yet: %q", held.Message)
	}
	waitEvent(t, cs, kube.AppNamespace, metav1.ListOptions{FieldSelector: "reason=FailoverHeld"}, 15*time.Second,
		"a FailoverHeld Event naming the evidence", func(e corev1.Event) bool { return strings.Contains(e.Message, "its host is up") })

	// The host pauses (its agent stopped or thrashing): the kernel takes
	// the connection, nothing answers. Its containers may run: held.
	if err := site.HostPaused("node-b"); err != nil {
		t.Fatal(err)
	}
	paused := waitAnyTimeline(t, live, 60*time.Second, "hostup-web held while node-b's host is paused", func(e apps.TimelineEvent) bool {
		return e.App == "hostup-web" && (e.Kind == apps.EventFailover || e.Kind == apps.EventRefusal && strings.Contains(e.Message, "took the connection"))
	})
	if paused.Kind != apps.EventRefusal {
		t.Fatalf("node-b's host takes connections (paused), yet: %q", paused.Message)
	}

	// The host goes: silence, and the guard lets the pod go, saying why.
	if err := site.HostDown("node-b"); err != nil {
		t.Fatal(err)
	}
	forced := waitAnyTimeline(t, live, 60*time.Second, "hostup-web force-deleted once node-b is silent", func(e apps.TimelineEvent) bool {
		return e.App == "hostup-web" && e.Kind == apps.EventFailover && strings.Contains(e.Message, "force-deleting")
	})
	if !strings.Contains(forced.Message, "no sign of life: ") || !strings.Contains(forced.Message, "is silent") {
		t.Fatalf("the force-delete does not name the silence: %q", forced.Message)
	}
	waitAgents(t, live, "hostup-web", 60*time.Second, "running on node-a or node-c", func(v agentView) bool {
		return runningOn("node-a")(v) || runningOn("node-c")(v)
	})
	guardDials.checkNoneRefused(t)
	if err := site.Recover("node-b"); err != nil {
		t.Fatal(err)
	}
	agents["node-b"] = startSiteAgent(t, site, "node-b", appsDir, logDir)
}

// membersProveLife: each bootstrapped member's agent proves its life on
// its cluster address to a guard on another member (from's namespace, the
// cluster's key from its formation plan); an agent of another cluster at
// its own address is someone else.
func membersProveLife(t *testing.T, from *nodeAgent, plan *formation.FormPlan, members []*nodeAgent) {
	t.Helper()
	key, err := config.NewLifeKey(plan.ClusterID, plan.Token)
	if err != nil {
		t.Fatal(err)
	}
	guard := apps.LifeProbe{Key: key, Dial: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
		err = from.host.Do(func() (err error) {
			conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}}
	for _, m := range members {
		st := m.agent.State()
		want := apps.LifeProven
		if !strings.EqualFold(st.ClusterID, plan.ClusterID) {
			want = apps.LifeStranger
		}
		addr := net.JoinHostPort(st.ClusterIP, strconv.Itoa(config.StatusPort))
		until(t, 10*time.Second, fmt.Sprintf("%s's agent probed at %s: %s", st.Node, addr, want), func() (apps.NodeLife, bool) {
			life := guard.Probe(t.Context(), addr, st.Node)
			return life, life.Evidence == want
		}, func(life apps.NodeLife) string { return fmt.Sprintf("last probe: %+v", life) })
	}
}
