package doctor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/kube/nodestate"
)

// A "not checked" finding's next step says how to get the check run: the
// text prints it whatever the severity, as it does for Warn and above; an
// ok's or a plain info's is left out.
func TestWriteTextPrintsNotCheckedNextSteps(t *testing.T) {
	r := Report{Findings: []Finding{
		{ID: IDSecondCluster, Area: AreaNetwork, Severity: Info, NotChecked: true, Summary: "not checked: no cluster config on this machine", Next: "on a node, or with --config FILE"},
		{ID: IDMTUMismatch, Area: AreaNetwork, Severity: Info, Summary: "3 nodes, one MTU", Next: "quiet info step"},
		{ID: IDPeerPorts, Area: AreaNetwork, Severity: OK, Summary: "the cluster ports answer", Next: "quiet ok step"},
	}}
	var b strings.Builder
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "next: on a node, or with --config FILE") {
		t.Errorf("the not-checked finding's next step is missing:\n%s", out)
	}
	if strings.Contains(out, "quiet info step") || strings.Contains(out, "quiet ok step") {
		t.Errorf("an ok's or a plain info's next step printed:\n%s", out)
	}
	// Issue 38: the summary said "0 error, 0 warn, 2 info, 1 ok; exit
	// status 0" though a check did not run: it says so beside the counts.
	if !strings.Contains(out, "1 not checked") || !strings.Contains(out, "--config FILE)") {
		t.Errorf("the summary does not count what was not checked:\n%s", out)
	}
	// Scripts tell "unknown" from "fine" by a field, not by words.
	var j strings.Builder
	if err := WriteJSON(&j, r); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(j.String(), `"notChecked": true`); n != 1 {
		t.Errorf("the JSON marks %d findings not checked, want 1:\n%s", n, j.String())
	}
}

// Every finding the checks make that says it was not checked (or only in
// part) carries NotChecked, and none that does not say so: with no
// cluster API and the nodes' reports each missing in another way (no
// answer, an older agent, sections whose reads failed, no cluster config
// applied, a clock in the future), every node-side check's branches that
// cannot judge are reached.
func TestNotCheckedFindingsAreMarked(t *testing.T) {
	now := time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)
	failedReads := &nodestate.NodeReport{Node: "node-c", Version: "v1.4.0",
		Storage: &nodestate.StorageReport{Iscsid: nodestate.Prereq{Problem: "permission denied"}, IscsiTCP: nodestate.Prereq{OK: true},
			Multipathd: nodestate.Prereq{OK: true}, NFSClient: nodestate.Prereq{OK: true}},
		Time:    &nodestate.TimeReport{Problem: "adjtimex: operation not permitted"},
		Certs:   &nodestate.CertsReport{DataDir: "/var/lib/rancher/k3s", Problem: "permission denied"},
		Token:   &nodestate.TokenReport{Since: now, Source: "this agent's start", Problem: "the token's record: read-only file system"},
		Network: &nodestate.NetworkReport{Problem: "no cluster interface: no cluster config applied"}}
	future := healthyReport("node-e", now)
	future.Token = &nodestate.TokenReport{Since: now.Add(time.Hour), Source: "first applied by this node's agent"}
	env := &Env{Now: now, APIProblem: "no kubeconfig", NodeReports: func(context.Context) nodestate.NodeReports {
		return nodestate.NodeReports{At: now, Answers: []nodestate.NodeAnswer{
			{Node: "node-a", Address: "10.244.244.1:12346", Answered: true, Report: healthyReport("node-a", now)},
			{Node: "node-b", Address: "10.244.244.2:12346", Problem: "did not answer within 2s"},
			{Node: "node-c", Address: "10.244.244.3:12346", Answered: true, Report: failedReads},
			{Node: "node-d", Address: "10.244.244.4:12346", Answered: true, Report: &nodestate.NodeReport{Node: "node-d", Version: "v0.9.0"}},
			{Node: "node-e", Address: "10.244.244.5:12346", Answered: true, Report: future},
		}}
	}}
	marked := map[string]int{}
	for _, f := range Run(t.Context(), Checks(), env).Findings {
		says := strings.Contains(f.Summary, "not checked") || strings.Contains(f.Summary, "partly checked")
		if says != f.NotChecked {
			t.Errorf("%s %q: NotChecked %v", f.ID, f.Summary, f.NotChecked)
		}
		if f.NotChecked {
			marked[f.ID]++
		}
	}
	for _, id := range []string{IDLonghornPrereq, IDNodeCertExpiry, IDTimeUnsynced, IDTokenAge, IDMTUMismatch, IDDuplicateAddress, IDVolumeDegraded} {
		if marked[id] == 0 {
			t.Errorf("%s: no finding marked not checked, with reports that cannot be judged: %v", id, marked)
		}
	}
}
