package doctor

import (
	"strings"
	"testing"
)

// A "not checked" finding's next step says how to get the check run: the
// text prints it whatever the severity, as it does for Warn and above; an
// ok's or a plain info's is left out.
func TestWriteTextPrintsNotCheckedNextSteps(t *testing.T) {
	r := Report{Findings: []Finding{
		{ID: IDSecondCluster, Area: AreaNetwork, Severity: Info, NotChecked: true, Summary: "not checked: no cluster config on this machine", Next: "on a node, or with --config FILE"},
		{ID: IDMTUMismatch, Area: AreaNetwork, Severity: Info, Summary: "nothing to compare", Next: "quiet info step"},
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
// part) carries NotChecked, and none that does not say so: run with no
// cluster config, no agent, no nodes to ask and no API, every check
// answers "not checked" in some form.
func TestNotCheckedFindingsAreMarked(t *testing.T) {
	r := Run(t.Context(), Checks(), &Env{APIProblem: "no kubeconfig"})
	marked := 0
	for _, f := range r.Findings {
		says := strings.Contains(f.Summary, "not checked") || strings.Contains(f.Summary, "partly checked")
		if says != f.NotChecked {
			t.Errorf("%s %q: NotChecked %v", f.ID, f.Summary, f.NotChecked)
		}
		if f.NotChecked {
			marked++
		}
	}
	if marked == 0 {
		t.Error("no finding marked not checked with nothing to check with")
	}
}
