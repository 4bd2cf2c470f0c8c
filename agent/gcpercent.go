package agent

import (
	"fmt"
	"runtime/debug"
)

// DefaultGCPercent is the agent's garbage-collection target (--gc-percent,
// as GOGC): the heap may grow to 1.5 times what is live before the next
// collection, not Go's default of twice. The agent runs for days on every
// node and holds the whole site in its caches (every node, lease, Longhorn
// volume, replica and engine, a count of every pod): 23 to 24 MB live at
// 10 nodes, 10,000 pods and 2,000 volumes. At Go's default the garbage
// between two collections was as much again, and the runtime keeps that
// peak mapped. There the agent's own memory (RssAnon) was 63 to 71 MiB at
// Go's default and 52 to 58 MiB at 50, before the caches were trimmed to
// what they hold now; the price is a collection twice as often, 0.36 s of
// CPU an idle minute instead of 0.31 (docs/BENCHMARKS.md).
const DefaultGCPercent = 50

// SetGCPercent has the Go runtime collect at percent, the agent's
// --gc-percent. When the flag was not given (given false) and GOGC is set
// in the environment (getenv), the runtime has applied the operator's
// GOGC, and it stands. GOGC in the agent's environment also reaches k3s,
// which the agent starts: --gc-percent is the agent's alone.
func SetGCPercent(percent int, given bool, getenv func(string) string) error {
	if percent < 1 {
		// A target of 0 or less is no target: Go reads a negative one as
		// GOGC=off, and a heap that never shrinks on a device is a leak.
		return fmt.Errorf("--gc-percent %d: give at least 1 (%d, the default, lets the heap grow to 1.5 times what is live)", percent, DefaultGCPercent)
	}
	if !given && getenv("GOGC") != "" {
		return nil
	}
	debug.SetGCPercent(percent)
	return nil
}
