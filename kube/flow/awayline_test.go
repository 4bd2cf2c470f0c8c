package flow

import (
	"testing"

	"github.com/sitecon/sitecon/kube"
)

// A maintenance's end names the apps away from home and offers the
// command that returns them; with none away it says nothing.
func TestAwayLine(t *testing.T) {
	for _, c := range []struct {
		away []kube.AppStatus
		want string
	}{
		{nil, ""},
		{[]kube.AppStatus{{Name: "hmi", Node: "node-a", DesignatedNode: "node-b"}, {Name: "historian", Node: "node-c", DesignatedNode: "node-b"}},
			"2 app(s) away from home: hmi (on node-a, home node-b), historian (on node-c, home node-b); once their designated nodes are Ready, return them with: sitecon return-home --all"},
	} {
		if got := AwayLine(c.away); got != c.want {
			t.Errorf("AwayLine(%v) = %q, want %q", c.away, got, c.want)
		}
	}
}
