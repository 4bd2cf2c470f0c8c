package doctor

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/kube/nodestate"
)

// Each node's clock against this machine's, from the agents' own reports:
// a second apart warns (etcd's own warning), half a minute is an error,
// a refusal for the clocks is an error, and without a config or an answer
// the check says it did not run; in step, nothing.
func TestClocksCheck(t *testing.T) {
	at := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	answer := func(node string, skew time.Duration) nodestate.NodeAnswer {
		return nodestate.NodeAnswer{Node: node, Answered: true, ClockSkew: skew, Report: &nodestate.NodeReport{Node: node, Clock: at.Add(skew)}}
	}
	for _, c := range []struct {
		name    string
		reports *nodestate.NodeReports
		want    map[string]Severity // subject → severity; "" the check itself
	}{
		{"no config", nil, map[string]Severity{"": Info}},
		{"in step", &nodestate.NodeReports{At: at, Answers: []nodestate.NodeAnswer{answer("node-a", 0), answer("node-b", 300*time.Millisecond)}}, map[string]Severity{"": OK}},
		// Issue 38: node-b failed, the others in step: ok for those
		// compared, never for node-b, which is not checked.
		{"one did not answer", &nodestate.NodeReports{At: at, Answers: []nodestate.NodeAnswer{answer("node-a", 0),
			{Node: "node-b", Problem: "did not answer within 2s"}, answer("node-c", -200*time.Millisecond)}}, map[string]Severity{"": OK, "node-b": Warn}},
		{"one ahead, one far behind", &nodestate.NodeReports{At: at, Answers: []nodestate.NodeAnswer{answer("node-a", 0), answer("node-b", 3*time.Second), answer("node-c", -2*time.Minute)}},
			map[string]Severity{"": OK, "node-b": Warn, "node-c": Error}},
		{"refused for its clock", &nodestate.NodeReports{At: at, Answers: []nodestate.NodeAnswer{answer("node-a", 0),
			{Node: "node-b", Problem: "refused: the clocks differ: this node's clock is 7m12s ahead of the reader's"}}}, map[string]Severity{"": OK, "node-b": Error}},
		{"nobody answered", &nodestate.NodeReports{At: at, Answers: []nodestate.NodeAnswer{{Node: "node-b", Problem: "did not answer within 2s"}}}, map[string]Severity{"": Info}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := &Env{}
			if c.reports != nil {
				env.NodeReports = func(context.Context) nodestate.NodeReports { return *c.reports }
			}
			got := map[string]Severity{}
			for _, f := range checkClocks(context.Background(), env) {
				got[f.Subject] = f.Severity
				if f.Subject != "" && !strings.Contains(f.Summary, f.Subject) {
					t.Errorf("%+v does not name its node", f)
				}
				if f.Severity == OK && (len(f.Evidence) == 0 || !strings.Contains(strings.Join(f.Evidence, " "), "node-a")) {
					t.Errorf("an ok without the evidence it rests on (each node compared): %+v", f)
				}
				if f.Subject == "node-b" && c.name == "one did not answer" && (!f.NotChecked || !strings.Contains(f.Summary, "not checked")) {
					t.Errorf("the node that did not answer: %+v, want not checked", f)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("findings %v, want %v", got, c.want)
			}
			for s, sev := range c.want {
				if got[s] != sev {
					t.Errorf("%q: %s, want %s (all: %v)", s, got[s], sev, got)
				}
			}
		})
	}
}
