package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/test/sitebox"
)

// The console's doctor screen (7) against sitebox's API with node-c
// failed: it runs the doctor in the background and lists the degraded
// volume's finding by its id; enter on it shows the finding's next step,
// the one sitecon doctor gives.
func TestConsoleDoctorScreenShowsAFinding(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	replicatedVolume(t, site, "console-doctor", "node-c", 3)
	site.RecoverOnCleanup(t, "node-c")
	// What the doctor says of node-c's loss is under test, not etcd's
	// election: with the leader on node-c, the API server stalls a few
	// seconds, the simulated Longhorn managers on the other nodes miss
	// their readiness and their replicas fail with them (the volume
	// faulted, not degraded: CI saw it).
	if err := site.MoveEtcdLeaderOff("node-c"); err != nil {
		t.Fatal(err)
	}
	if err := site.Fail("node-c"); err != nil {
		t.Fatal(err)
	}
	var verbs verbCounter
	r := until(t, 90*time.Second, "the doctor reports console-doctor degraded", func() (doctor.Report, bool) {
		r := diagnose(t, site, &verbs)
		_, ok := findings(r)[doctor.IDVolumeDegraded]["console-doctor"]
		return r, ok
	}, describeReport)
	next := findings(r)[doctor.IDVolumeDegraded]["console-doctor"].Next
	if next == "" {
		t.Fatalf("the finding has no next step: %s", describeReport(r))
	}

	c := startConsole(t, "--kubeconfig", site.Kubeconfig(), "--log-file", filepath.Join(t.TempDir(), "console.log"),
		"--agent-socket", filepath.Join(t.TempDir(), "none.sock"))
	c.waitScreen(30*time.Second, "the console", func(s string) bool { return strings.Contains(s, "7 doctor") })
	c.keys("7")
	c.waitScreen(60*time.Second, "the doctor's findings", func(s string) bool {
		return strings.Contains(s, "last ran") && strings.Contains(s, doctor.IDVolumeDegraded) && strings.Contains(s, "console-doctor")
	})
	c.keys("/")
	c.keys("console-doctor")
	c.keys("Enter")
	c.keys("Enter")
	flat := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	c.waitScreen(10*time.Second, "the finding's detail with its next step", func(s string) bool {
		return strings.Contains(s, "Finding      "+doctor.IDVolumeDegraded) && strings.Contains(s, "Next step") && strings.Contains(flat(s), flat(next))
	})
}
