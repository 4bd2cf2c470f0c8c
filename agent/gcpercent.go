package agent

import "runtime/debug"

// GCPercent is the agent's garbage-collection target (GOGC): the heap may
// grow to 1.5 times what is live before the next collection, not Go's
// default of twice. The agent runs for days on every node and holds the
// whole site in its caches (every node, lease, Longhorn volume, replica
// and engine, a count of every pod): about 29 MB live at 10 nodes, 10,000
// pods and 2,000 volumes. At Go's default the garbage between two
// collections was as much again, and the runtime keeps that peak mapped:
// the agent's own memory (RssAnon) was 63 to 71 MiB there, at 50 it is 52
// to 53 MiB. The price is a collection twice as often: 0.36 s of CPU an
// idle minute instead of 0.31 (docs/BENCHMARKS.md).
const GCPercent = 50

// SetGCPercent has the Go runtime collect at GCPercent, unless GOGC is
// set in the environment (getenv): the runtime has then applied the
// operator's choice, and it stands.
func SetGCPercent(getenv func(string) string) {
	if getenv("GOGC") != "" {
		return
	}
	debug.SetGCPercent(GCPercent)
}
