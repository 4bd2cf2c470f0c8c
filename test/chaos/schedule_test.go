package chaos

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

var testSite = Site{Nodes: []string{"node-a", "node-b", "node-c", "node-d"}, AutoApps: []string{"web", "hmi"},
	Length: 4 * time.Minute, MinHold: 2 * time.Second, MaxHold: 25 * time.Second}

// A seed replays exactly: CHAOS_SEED gives the run it names.
func TestGenerateReplays(t *testing.T) {
	a, b := Generate(42, testSite), Generate(42, testSite)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 42 gave two schedules:\n%s\n%s", a, b)
	}
	if reflect.DeepEqual(a.Steps, Generate(43, testSite).Steps) {
		t.Fatal("seeds 42 and 43 gave the same schedule")
	}
	if a.Length() < testSite.Length || a.Length() > testSite.Length+testSite.MaxHold {
		t.Errorf("length %s, want %s to %s", a.Length(), testSite.Length, testSite.Length+testSite.MaxHold)
	}
}

// Every step of every schedule can be staged when it comes: a node is
// powered on only when off, never into a cut or pause; a part resumed was
// paused; a cut takes nodes not cut and leaves one node with the API
// server; an agent is restarted only on a node that is up.
func TestGenerateOnlyFeasibleSteps(t *testing.T) {
	clockSite := testSite
	clockSite.ClockSteps = true
	kinds := map[Kind]int{}
	for seed := range uint64(300) {
		if s := Generate(seed, testSite); slices.ContainsFunc(s.Steps, func(st Step) bool { return st.Kind == StepClock }) {
			t.Fatalf("seed %d steps a clock on a site whose clocks cannot be stepped:\n%s", seed, s)
		}
		s := Generate(seed, clockSite)
		off, cut, full, paused := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string][]string{}
		for i, st := range s.Steps {
			kinds[st.Kind]++
			fail := func(why string) { t.Fatalf("seed %d step %d (%s): %s\n%s", seed, i+1, st, why, s) }
			if st.Hold < testSite.MinHold || st.Hold > testSite.MaxHold {
				fail("hold out of bounds")
			}
			for _, n := range st.Nodes {
				if !slices.Contains(testSite.Nodes, n) {
					fail("unknown node " + n)
				}
			}
			switch st.Kind {
			case Cut:
				up := 0
				for _, n := range testSite.Nodes {
					if !off[n] {
						up++
					}
				}
				if len(st.Nodes) >= up {
					fail("cuts every node that is up")
				}
				for _, n := range st.Nodes {
					if off[n] || cut[n] || len(paused[n]) > 0 {
						fail(n + " is off, cut or paused")
					}
					cut[n] = true
				}
			case PowerOff:
				for _, n := range st.Nodes {
					if off[n] {
						fail(n + " is already off")
					}
					off[n] = true
				}
			case PowerOn:
				n := st.Nodes[0]
				if !off[n] || cut[n] || len(paused[n]) > 0 {
					fail(n + " is not off, or is cut or paused")
				}
				delete(off, n)
			case Pause:
				if off[st.Nodes[0]] {
					fail("paused while off")
				}
				paused[st.Nodes[0]] = append(paused[st.Nodes[0]], st.Part)
			case Resume:
				if !slices.Contains(paused[st.Nodes[0]], st.Part) {
					fail("resumed what is not paused")
				}
				paused[st.Nodes[0]] = slices.DeleteFunc(paused[st.Nodes[0]], func(p string) bool { return p == st.Part })
			case RestartAgent:
				if off[st.Nodes[0]] {
					fail("agent restarted on a node that is off")
				}
				if len(st.Flags) > 0 {
					kinds["restart-agent with other fence settings"]++
				}
			case FillDisk:
				if full[st.Nodes[0]] {
					fail(st.Nodes[0] + "'s disk is already full")
				}
				full[st.Nodes[0]] = true
			case StepClock:
				if d := st.Clock.Abs(); d < 10*time.Second || d > 2*time.Minute {
					fail("a clock step outside 10 s to 2 minutes either way")
				}
			case Heal:
				clear(cut)
				clear(paused)
				clear(full)
			case Drop:
				if st.Nodes[0] == st.Nodes[1] {
					fail("drop to itself")
				}
			}
		}
	}
	// Over 300 seeds every kind comes up.
	for _, k := range []Kind{Cut, Drop, Pause, Resume, PowerOff, PowerOn, RestartAgent, "restart-agent with other fence settings", FillDisk, StepClock, Heal, Drain, Uncordon, Migrate, ReturnHome, DrainRequest, Maintenance, Remove, Leave} {
		if kinds[k] == 0 {
			t.Errorf("no %s step in 300 schedules", k)
		}
	}
}

// Shrink drops every step the failure does not need, within its budget.
func TestShrinkKeepsOnlyWhatFails(t *testing.T) {
	s := Generate(7, testSite)
	if len(s.Steps) < 6 {
		t.Fatalf("want a longer schedule: %s", s)
	}
	// The failure needs steps 2 and 5 (by identity), in that order.
	need := []Step{s.Steps[1], s.Steps[4]}
	fails := func(c Schedule) bool {
		i := slices.IndexFunc(c.Steps, func(st Step) bool { return reflect.DeepEqual(st, need[0]) })
		j := slices.IndexFunc(c.Steps, func(st Step) bool { return reflect.DeepEqual(st, need[1]) })
		return i >= 0 && j > i
	}
	got, runs := Shrink(s, fails, 100)
	if !reflect.DeepEqual(got.Steps, need) {
		t.Errorf("shrunk to\n%s\nwant only steps 2 and 5", got)
	}
	if runs != len(s.Steps) {
		t.Errorf("%d runs, want one per step (%d)", runs, len(s.Steps))
	}
	if _, runs := Shrink(s, fails, 3); runs != 3 {
		t.Errorf("budget 3 spent %d runs", runs)
	}
}
