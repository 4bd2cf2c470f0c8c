//go:build faults

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/test/sitebox"
)

// TestControlPlaneFaultsWhileConsoleAndAgentsRun (issue 23 §3): the API
// server is killed and started again, then etcd loses its quorum (two of
// three members stopped) and regains it, while the console and the three
// nodes' agents run. Through both: the console stays up, says the API is
// down (never green), and is live again once it answers; the agents stay
// up and afterwards exactly one of them is the stats leader, the one the
// Lease names. It logs each recovery time.
func TestControlPlaneFaultsWhileConsoleAndAgentsRun(t *testing.T) {
	// Its own site: the faults take the whole control plane down.
	site, err := sitebox.StartTestSite(sitebox.TestOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(site.Stop)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	logDir := t.TempDir()
	nodes := []string{"node-a", "node-b", "node-c"}
	agents := map[string]*siteAgent{}
	for _, n := range nodes {
		agents[n] = startSiteAgent(t, site, n, t.TempDir(), logDir)
	}
	stopAgentsWithTest(t, agents)
	t.Cleanup(func() { logAgentsOnFailure(t, logDir, nodes...) })
	c := startConsole(t, "--kubeconfig", site.Kubeconfig())

	live := func(what string, within time.Duration) time.Duration {
		t.Helper()
		from := time.Now()
		c.waitScreen(within, "the console live "+what, func(s string) bool {
			return strings.Contains(s, "3/3 ready") && !strings.Contains(s, "Cluster API down")
		})
		return time.Since(from)
	}
	oneLeader := func(what string, within time.Duration) (string, time.Duration) {
		t.Helper()
		return waitOneStatsLeader(t, cs, agents, what, within)
	}
	// Down: the console says so and draws nothing green, and holds it.
	down := func(what string) {
		t.Helper()
		s := c.waitScreen(90*time.Second, "the console saying the API is down "+what, func(s string) bool {
			return strings.Contains(s, "Cluster API down")
		})
		if strings.Contains(s, "every node ready") {
			t.Fatalf("the console calls the site healthy while its API is down (%s):\n%s", what, s)
		}
	}
	live("at the start", 60*time.Second)
	first, _ := oneLeader("at the start", 60*time.Second)
	t.Logf("stats leader at the start: %s", first)

	// 1. The API server killed, down 20 s, started again.
	if err := site.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	down("(API server stopped)")
	<-time.After(20 * time.Second) // the outage itself: what is tested is what comes after
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err = site.StartAPIServer(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	took := live("after the API server's return", 2*time.Minute)
	leader, _ := oneLeader("after the API server's return", 2*time.Minute)
	t.Logf("API server restart: the console live %.1fs after it answered again, one stats leader (%s) by %.1fs",
		took.Seconds(), leader, time.Since(back).Seconds())
	site.WaitSettled(t, 2*time.Minute)

	// 2. etcd loses its quorum (two members of three stopped), regains it.
	for _, n := range []string{"node-b", "node-c"} {
		if err := site.StopEtcdMember(n); err != nil {
			t.Fatal(err)
		}
	}
	down("(etcd without quorum)")
	<-time.After(20 * time.Second)
	for _, n := range []string{"node-b", "node-c"} {
		if err := site.StartEtcdMember(n); err != nil {
			t.Fatal(err)
		}
	}
	back = time.Now()
	took = live("after etcd's quorum returned", 2*time.Minute)
	leader, _ = oneLeader("after etcd's quorum returned", 2*time.Minute)
	t.Logf("etcd quorum regained: the console live %.1fs after, one stats leader (%s) by %.1fs",
		took.Seconds(), leader, time.Since(back).Seconds())

	// No crash: every agent still answers for itself, the console draws.
	for _, n := range nodes {
		if agents[n].agent.Apps() == nil {
			t.Errorf("%s's agent has no apps part after the faults", n)
		}
	}
	if s := c.screen(); !strings.Contains(s, "sitecon") {
		t.Errorf("the console is gone:\n%s", s)
	}
}
