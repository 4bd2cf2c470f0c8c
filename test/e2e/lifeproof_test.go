package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
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
