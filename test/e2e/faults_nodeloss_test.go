//go:build faults

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/kube"
)

// Issue 23 §3: a node lost and recovered twice in a row, and two nodes
// lost at once, on a site at the shipped timings. Each step is timed from
// the fault and logged; make faults prints them.

// offNode: every agent sees the app Running on one node other than node,
// and only that node's agent runs it.
func offNode(node string) func(agentView) bool {
	return func(v agentView) bool {
		on := ""
		for _, st := range v {
			if st.KubeStatus != apps.KubeRunning || st.Node == node || st.Node == "" || (on != "" && st.Node != on) {
				return false
			}
			on = st.Node
		}
		for n, st := range v {
			if st.ClusterAppRunning != (n == on) {
				return false
			}
		}
		return true
	}
}

// The same node lost twice: each time its apps run elsewhere within the
// shipped promises; between the two it comes back, its volume's copy is
// rebuilt, and the technician brings the apps home (sitecon return-home
// --all), so that the second loss finds them there again. Nothing the
// first loss left behind (the guard's records, the leases, the fence's
// state, the override-free return) holds up the second failover.
func TestNodeLostTwiceAtShippedTimings(t *testing.T) {
	appsDir, logDir := t.TempDir(), t.TempDir()
	site, agents, appConfigs := startShippedSiteIn(t, appsDir, logDir)
	cs := clientset(t, site)
	auditLog := t.TempDir() + "/audit.jsonl"
	nodes := []string{"node-a", "node-b", "node-c"}
	t.Cleanup(func() { logAgentsOnFailure(t, logDir, nodes...) })
	all := func() []*siteAgent { return []*siteAgent{agents["node-a"], agents["node-b"], agents["node-c"]} }
	for name := range appConfigs {
		waitAgents(t, all(), name, 5*time.Minute, "running on node-b", runningOn("node-b"))
	}
	site.RecoverOnCleanup(t, "node-b")
	for round := 1; round <= 2; round++ {
		start := time.Now()
		step := func(what string) { t.Logf("loss %d: +%5.1fs  %s", round, time.Since(start).Seconds(), what) }
		agents["node-b"].lose()
		if err := site.Fail("node-b"); err != nil {
			t.Fatal(err)
		}
		step("node-b lost (kubelet, etcd member and agent)")
		live := []*siteAgent{agents["node-a"], agents["node-c"]}
		for name, promise := range shippedPromises {
			waitAgents(t, live, name, promise-time.Since(start), fmt.Sprintf("running off node-b within %s of its loss", promise), offNode("node-b"))
			step(name + " running off node-b")
		}

		if err := site.Recover("node-b"); err != nil {
			t.Fatal(err)
		}
		agents["node-b"] = startAgentWith(t, site, "node-b", appsDir, logDir, nil)
		t.Cleanup(agents["node-b"].stop)
		step("node-b recovered, its agent started again")
		waitNode(t, cs, "node-b", true)
		step("node-b Ready")
		waitClaimHealthyOn(t, site, apps.ClaimName(shippedVolume), "node-b", 5*time.Minute)
		step("ship-data healthy again with its copy on node-b")
		leader, _ := waitOneStatsLeader(t, cs, agents, fmt.Sprintf("after loss %d", round), 2*time.Minute)
		step("one stats leader: " + leader)
		for name := range appConfigs {
			// Away, and staying where the failover put them: coming back
			// does not move them by itself.
			waitAgents(t, all(), name, time.Minute, "running off node-b, seen by all three agents", offNode("node-b"))
		}

		out, err := act(t, site, auditLog, "return-home", "--all", "--yes", "--timeout", "3m", "--reason", fmt.Sprintf("after loss %d", round))
		if err != nil {
			t.Fatalf("return-home --all after loss %d: %v\n%s", round, err, out)
		}
		for name := range appConfigs {
			waitAgents(t, all(), name, 2*time.Minute, "back home on node-b", runningOn("node-b"))
		}
		step("both apps back home on node-b (sitecon return-home --all)")
	}
}

// Two of three nodes lost at once: etcd has no quorum and the cluster API
// does not answer. The survivor's agent stays up and says so on its local
// API; nothing can move and nothing does. When both come back, the site
// recovers by itself: the API answers, the apps run on node-b exactly
// once (their home: the loss moved nothing), the volume is healthy again
// and exactly one agent leads.
func TestTwoNodesLostAtShippedTimings(t *testing.T) {
	appsDir, logDir := t.TempDir(), t.TempDir()
	site, agents, appConfigs := startShippedSiteIn(t, appsDir, logDir)
	cs := clientset(t, site)
	nodes := []string{"node-a", "node-b", "node-c"}
	t.Cleanup(func() { logAgentsOnFailure(t, logDir, nodes...) })
	all := func() []*siteAgent { return []*siteAgent{agents["node-a"], agents["node-b"], agents["node-c"]} }
	for name := range appConfigs {
		waitAgents(t, all(), name, 5*time.Minute, "running on node-b", runningOn("node-b"))
	}
	before := appPods(t, cs, appConfigs)
	start := time.Now()
	step := func(what string) { t.Logf("+%5.1fs  %s", time.Since(start).Seconds(), what) }
	for _, n := range []string{"node-b", "node-c"} {
		agents[n].lose()
		site.RecoverOnCleanup(t, n)
		if err := site.Fail(n); err != nil {
			t.Fatal(err)
		}
	}
	step("node-b and node-c lost (kubelets, etcd members and agents): no quorum")
	until(t, time.Minute, "the cluster API not answering", func() (string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
		return fmt.Sprint(err), err != nil
	}, func(s string) string { return "last answer: " + s })
	step("the cluster API does not answer")
	// The survivor's agent stays up through the outage, and its local API
	// answers.
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := localapi.Get[map[string]any](ctx, agents["node-a"].socket, localapi.PathAgent)
		cancel()
		if err != nil {
			t.Fatalf("node-a's agent, %d into the outage: %v", i, err)
		}
		if i < 2 {
			// The outage lasts past the shipped grace periods (node
			// monitor, move-after, the failover timeout).
			select {
			case <-time.After(30 * time.Second):
			case <-t.Context().Done():
				return
			}
		}
	}
	step("node-a's agent answered through 60 s of the outage")

	recovered := time.Now()
	for _, n := range []string{"node-b", "node-c"} {
		if err := site.Recover(n); err != nil {
			t.Fatal(err)
		}
		agents[n] = startAgentWith(t, site, n, appsDir, logDir, nil)
		t.Cleanup(agents[n].stop)
	}
	step("node-b and node-c recovered, their agents started again")
	until(t, 2*time.Minute, "the cluster API answering", func() (string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
		return fmt.Sprint(err), err == nil
	}, func(s string) string { return "last answer: " + s })
	step("the cluster API answers")
	for _, n := range []string{"node-b", "node-c"} {
		waitNode(t, cs, n, true)
	}
	step("node-b and node-c Ready")
	for name := range appConfigs {
		waitAgents(t, all(), name, 3*time.Minute, "running on node-b, once", runningOn("node-b"))
	}
	step("both apps running on node-b, once, seen by all three agents")
	waitClaimHealthyOn(t, site, apps.ClaimName(shippedVolume), "node-b", 5*time.Minute)
	step("ship-data healthy")
	leader, _ := waitOneStatsLeader(t, cs, agents, "after the two nodes' return", 2*time.Minute)
	step("one stats leader: " + leader)
	t.Logf("the site recovered %.1fs after the two nodes came back", time.Since(recovered).Seconds())
	if after := appPods(t, cs, appConfigs); after != before {
		t.Errorf("the apps' pods changed through the outage: %s before, %s after (an app was moved or restarted)", before, after)
	}
}

// appPods names the apps' pods and their UIDs, in a stable order.
func appPods(t *testing.T, cs kubernetes.Interface, appConfigs map[string]apps.AppConfig) string {
	t.Helper()
	var out []string
	for name, a := range appConfigs {
		pods := listPods(cs, kube.AppNamespace, metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + a.UUID})
		if pods.err != nil {
			t.Fatal(pods.err)
		}
		for _, p := range pods.items {
			if p.DeletionTimestamp == nil {
				out = append(out, fmt.Sprintf("%s:%s/%s@%s", name, p.Name, p.UID, p.Spec.NodeName))
			}
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
