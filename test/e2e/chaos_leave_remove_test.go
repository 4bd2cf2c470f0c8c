//go:build chaos

package e2e

import (
	"slices"
	"testing"
	"time"

	"github.com/sitecon/sitecon/test/chaos"
)

// The explorer's node remove and leave (issue 36 §1), staged on purpose
// where they are most dangerous. The worker node-d runs the auto app
// mqtt-broker (migrated there), then is cut off from the rest, its
// containers still running. Removed as soon as it is NotReady, before the
// failover has its evidence, it would have its pods deleted at once and
// its app started elsewhere beside the copy still running: the removal is
// stopped (a warning, which --force alone passes). Asked again once the
// failover has moved the app (node-d fenced), it goes through. A server's
// removal is refused (one of three leaves the cluster unable to take a
// failure). Then node-d, joined anew, is paused (its processes stopped,
// there all the same): its removal is stopped too. Then node-d leaves on
// purpose, run on node-d itself: its app moves first; a server's leave is
// refused. The six invariants are checked all along.
func TestChaosLeaveAndRemove(t *testing.T) {
	c := startChaosSite(t, 4)
	removal := chaos.Schedule{Seed: 1, Steps: []chaos.Step{
		{Kind: chaos.Migrate, App: "mqtt-broker", Nodes: []string{"node-d"}, Hold: 30 * time.Second},
		{Kind: chaos.Cut, Nodes: []string{"node-d"}, Hold: 14 * time.Second},
		{Kind: chaos.Remove, Nodes: []string{"node-d"}, Hold: 40 * time.Second},
		{Kind: chaos.Remove, Nodes: []string{"node-d"}, Hold: 20 * time.Second},
		{Kind: chaos.Remove, Nodes: []string{"node-b"}, Hold: 5 * time.Second},
		{Kind: chaos.Heal, Hold: 2 * time.Second},
	}}
	res := c.run(t, removal)
	if on := res.ranOn["mqtt-broker"]; !slices.Contains(on, "node-d") || len(on) < 2 {
		t.Errorf("mqtt-broker ran on %v: want node-d, then elsewhere", on)
	}
	if res.actions["remove ok"] != 1 || res.actions["remove refused or failed"] != 2 {
		t.Errorf("actions %v: want node-d's first removal stopped, its second done, node-b's refused", res.actions)
	}

	paused := chaos.Schedule{Seed: 3, Steps: []chaos.Step{
		{Kind: chaos.Migrate, App: "mqtt-broker", Nodes: []string{"node-d"}, Hold: 30 * time.Second},
		{Kind: chaos.Pause, Nodes: []string{"node-d"}, Part: "host", Hold: 14 * time.Second},
		{Kind: chaos.Remove, Nodes: []string{"node-d"}, Hold: 10 * time.Second},
		{Kind: chaos.Heal, Hold: 2 * time.Second},
	}}
	res3 := c.run(t, paused)
	if res3.actions["remove refused or failed"] != 1 {
		t.Errorf("actions %v: want the removal of the paused node-d stopped", res3.actions)
	}

	leaving := chaos.Schedule{Seed: 2, Steps: []chaos.Step{
		{Kind: chaos.Migrate, App: "mqtt-broker", Nodes: []string{"node-d"}, Hold: 30 * time.Second},
		{Kind: chaos.Leave, Nodes: []string{"node-d"}, Hold: 40 * time.Second},
		{Kind: chaos.Leave, Nodes: []string{"node-c"}, Hold: 10 * time.Second},
	}}
	res2 := c.run(t, leaving)
	if on := res2.ranOn["mqtt-broker"]; !slices.Contains(on, "node-d") || len(on) < 2 {
		t.Errorf("mqtt-broker ran on %v: want node-d, then elsewhere", on)
	}
	if res2.actions["leave ok"] != 1 || res2.actions["leave refused or failed"] != 1 {
		t.Errorf("actions %v: want node-d's leave done and node-c's refused", res2.actions)
	}
	t.Logf("\n%s", chaosTable([]chaosRun{res, res3, res2}))
}
