package agent

import (
	"testing"
	"time"
)

// The shipped defaults bring an auto app back within EVE's figures, and a
// blink of the link moves nothing: the budget adds up the worst case of
// each step (FailoverBudget), the blink the most of each bound it uses.
func TestShippedFailoverBudget(t *testing.T) {
	s := ShippedFailoverSettings()
	b := s.Budget()
	for _, st := range b.Steps {
		t.Logf("%6s  %s (%s)", st.Bound, st.What, st.Setting)
	}
	t.Logf("container %s, VM %s", b.ContainerTotal, b.VMTotal)
	if b.ContainerTotal > 60*time.Second {
		t.Errorf("an auto container app runs elsewhere up to %s after its node's loss, want <= 60s", b.ContainerTotal)
	}
	if b.VMTotal > 90*time.Second {
		t.Errorf("an auto VM runs elsewhere up to %s after its node's loss, want <= 90s", b.VMTotal)
	}
	const blink = 10 * time.Second
	// Room left on every bound: scheduling on a loaded device.
	const margin = 2 * time.Second
	for _, c := range s.Blink(blink) {
		t.Logf("%s blink: %s: uses %s of %s", blink, c.Bound, c.Used, c.Limit)
		if c.Moves && c.Used+margin > c.Limit {
			t.Errorf("a %s blink uses %s of %s (%s), less than %s short of it: %s", blink, c.Used, c.Limit, c.Bound, margin, c.Crossed)
		}
	}
	if s.NodeMonitorGracePeriod <= blink {
		t.Errorf("node-monitor-grace-period %s: a %s blink marks the node Unknown by itself", s.NodeMonitorGracePeriod, blink)
	}
}
