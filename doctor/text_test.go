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
		{ID: IDSecondCluster, Area: AreaNetwork, Severity: Info, Summary: "not checked: no cluster config on this machine", Next: "on a node, or with --config FILE"},
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
}
