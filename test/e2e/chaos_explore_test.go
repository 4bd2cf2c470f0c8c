//go:build chaos

package e2e

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sitecon/sitecon/test/chaos"
)

// TestChaosExplore is make chaos: CHAOS_RUNS random schedules (default 20)
// of CHAOS_LENGTH faults and actions each (default 2m; with the heal, at
// most 5 minutes) on one bootstrap-mode site of CHAOS_NODES nodes (default
// 4: three servers and a worker), the six invariants checked all along.
// The seeds are CHAOS_SEED (default: the time) and the ones after it;
// CHAOS_SEED with CHAOS_RUNS=1 replays one. A failing schedule is shrunk
// (CHAOS_SHRINK runs at most, default 4) to the fewest steps that still
// fail, and printed with its seed. Ends with the table docs/BENCHMARKS.md holds.
func TestChaosExplore(t *testing.T) {
	runs := envInt(t, "CHAOS_RUNS", 20)
	nodes := envInt(t, "CHAOS_NODES", 4)
	shrinkBudget := envInt(t, "CHAOS_SHRINK", 4)
	length := 2 * time.Minute
	if v := os.Getenv("CHAOS_LENGTH"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CHAOS_LENGTH: %v", err)
		}
		length = d
	}
	seed := uint64(time.Now().UnixNano() % 1_000_000)
	if v := os.Getenv("CHAOS_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED: %v", err)
		}
		seed = s
	}
	// Clock steps need sitecon built again with sitebox's clock overlay
	// (minutes, once): CHAOS_CLOCKS=0 leaves them out.
	clocks := os.Getenv("CHAOS_CLOCKS") != "0"
	c := startChaosSiteWith(t, nodes, clocks)
	var done []chaosRun
	// The table, however the runs end (a site that did not heal ends them).
	defer func() {
		t.Logf("make chaos: %d schedules from seed %d, %d nodes, %s each\n%s", len(done), seed, nodes, length, chaosTable(done))
	}()
	site := chaos.Site{Nodes: c.nodes, AutoApps: c.auto, Length: length, MinHold: 2 * time.Second, MaxHold: 25 * time.Second, ClockSteps: clocks}
	for i := range runs {
		s := chaos.Generate(seed+uint64(i), site)
		res := c.run(t, s)
		done = append(done, res)
		if len(res.violations) == 0 {
			continue
		}
		prefix := s.Prefix(max(1, min(res.firstStep(), len(s.Steps))))
		shrunk, spent := chaos.Shrink(prefix, func(c2 chaos.Schedule) bool {
			return len(c.run(t, c2).violations) > 0
		}, shrinkBudget)
		t.Errorf("seed %d fails; shrunk in %d runs to:\n%s", s.Seed, spent, shrunk)
		if !res.healed {
			t.Fatalf("the site did not heal after seed %d: the schedules after it would start from a broken site", s.Seed)
		}
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// firstStep is the step during which the first violation was seen.
func (r chaosRun) firstStep() int {
	first := 0
	for _, v := range r.violations {
		if first == 0 || v.step < first {
			first = v.step
		}
	}
	return first
}
