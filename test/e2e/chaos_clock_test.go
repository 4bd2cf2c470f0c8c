//go:build chaos

package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/doctor"
)

// A clock step staged by sitebox reaches the node's sitecon: the doctor,
// run on node-a as a technician would, finds node-b's clock off by the
// step (SC-CLOCK-SKEW), and in step again once healed. Without it, make
// chaos's clock steps could change nothing and no one would know.
func TestChaosClockStepReachesTheNode(t *testing.T) {
	c := startChaosSiteWith(t, 3, true)
	// And every node signs its proof of life as itself: its k3s wrote its
	// credential and the client CA where the agent reads them.
	until(t, 60*time.Second, "every node signing its proof of life with its own credential", func() (string, bool) {
		r := c.doctorOnNodeA(t)
		var bad []string
		checked := false
		for _, f := range r.Findings {
			if f.ID == doctor.IDNodeCredential {
				checked = checked || f.Severity == doctor.OK
				if f.Severity > doctor.OK {
					bad = append(bad, f.Summary+": "+strings.Join(f.Evidence, "; "))
				}
			}
		}
		return fmt.Sprintf("ok seen %v, %v", checked, bad), checked && len(bad) == 0
	}, func(s string) string { return s })
	if err := c.site.StepClock("node-b", 90*time.Second); err != nil {
		t.Fatal(err)
	}
	until(t, 90*time.Second, "node-a's doctor sees node-b's clock 1m30s ahead", func() (string, bool) {
		f, ok := c.clockFinding(t, "node-b")
		return fmt.Sprintf("%s %s %v", f.Severity, f.Summary, f.Evidence),
			ok && f.Severity == doctor.Error && strings.Contains(f.Summary, "node-b's clock is 1m3") && strings.Contains(f.Summary, "ahead")
	}, func(s string) string { return s })
	if err := c.site.Heal(); err != nil {
		t.Fatal(err)
	}
	until(t, 90*time.Second, "node-b's clock in step again after the heal", func() (string, bool) {
		f, ok := c.clockFinding(t, "node-b")
		return fmt.Sprintf("%v %s %s", ok, f.Severity, f.Summary), !ok
	}, func(s string) string { return s })
}

// clockFinding is SC-CLOCK-SKEW's finding about node in the doctor's
// report on node-a (false: none, the node's clock in step).
func (c *chaosSite) clockFinding(t *testing.T, node string) (doctor.Finding, bool) {
	t.Helper()
	for _, f := range c.doctorOnNodeA(t).Findings {
		if f.ID == doctor.IDClockSkew && f.Subject == node {
			return f, true
		}
	}
	return doctor.Finding{}, false
}

// doctorOnNodeA is sitecon doctor's report, run on node-a in its
// namespace with its cluster config, as a technician there runs it.
func (c *chaosSite) doctorOnNodeA(t *testing.T) doctor.Report {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", c.site.Netns("node-a"), sitecon, "doctor", "-o", "json",
		"--config", c.site.ClusterConfig("node-a"), "--kubeconfig", c.inNodeKubeconfig,
		"--agent-socket", c.site.AgentSocket("node-a"), "--k3s-data-dir", c.site.K3sDataDir("node-a"),
		"--audit-log", t.TempDir()+"/audit.jsonl", "--timeout", "20s").Output()
	var r doctor.Report
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		t.Fatalf("sitecon doctor on node-a: %v, %v:\n%s", err, jerr, out)
	}
	return r
}
