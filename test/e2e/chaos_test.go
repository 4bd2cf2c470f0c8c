package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/test/chaos"
)

// The fault explorer's fixed short schedule, so that its harness cannot
// rot (make chaos runs the random ones): on a three-server bootstrap-mode
// site with the demo's apps, node-b's state disk fills, then node-b
// (where the auto app plc-gateway and the pinned VM historian run) is cut
// off from the others and the API server, and its agent restarted while
// cut off, its fence record unwritable since; it fences, and the others
// start plc-gateway again elsewhere, never while node-b's copy runs. Then
// node-c's agent is paused and resumed, and a drain of node-a is asked
// while node-b is still cut off: its preflight must refuse it (two of
// three members reachable; draining a third would leave etcd without
// quorum). After the heal the site is whole. The six invariants are
// checked all along, from outside the product.
func TestChaosShortSchedule(t *testing.T) {
	c := startChaosSite(t, 3)
	// Its sitecon was built without sitebox's clock overlay: a clock step
	// would change nothing, and is refused rather than staged.
	if err := c.site.StepClock("node-b", time.Minute); err == nil || !strings.Contains(err.Error(), "does not read a clock step") {
		t.Errorf("a clock step on a site built without the clock overlay: %v, want it refused", err)
	}
	s := chaos.Schedule{Seed: 0, Steps: []chaos.Step{
		{Kind: chaos.FillDisk, Nodes: []string{"node-b"}, Hold: 2 * time.Second},
		{Kind: chaos.Cut, Nodes: []string{"node-b"}, Hold: 5 * time.Second},
		{Kind: chaos.RestartAgent, Nodes: []string{"node-b"}, Hold: 45 * time.Second},
		{Kind: chaos.Pause, Nodes: []string{"node-c"}, Part: "agent", Hold: 6 * time.Second},
		{Kind: chaos.Resume, Nodes: []string{"node-c"}, Part: "agent", Hold: time.Second},
		{Kind: chaos.Drain, Nodes: []string{"node-a"}, Hold: 8 * time.Second},
		{Kind: chaos.Heal, Hold: 2 * time.Second},
	}}
	res := c.run(t, s)
	// The schedule did what it is for: plc-gateway ran on node-b, then,
	// node-b cut off, elsewhere.
	if on := res.ranOn["plc-gateway"]; !slices.Contains(on, "node-b") || len(on) < 2 {
		t.Errorf("plc-gateway ran on %v: the cut of node-b did not move it", on)
	}
	if res.actions["drain refused or failed"] != 1 {
		t.Errorf("actions %v: the drain of node-a while node-b is cut off was not refused", res.actions)
	}
	t.Logf("\n%s", chaosTable([]chaosRun{res}))
}
