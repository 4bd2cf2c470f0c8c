//go:build chaos

package e2e

import (
	"testing"
	"time"

	"github.com/sitecon/sitecon/test/chaos"
)

// Issue 36 (found reading the explorer's site: every app it ran had a
// volume): an auto app with no volume, on a node whose host is paused (its
// processes stopped, there all the same, going on when the host does).
// No attachment holds its replacement: the taint's eviction used to make
// the replacement at once, and it ran elsewhere beside the paused copy.
// The failover's own rule must hold it as it holds a volume's: the old
// copy goes first, on evidence, and a paused host gives none (it takes
// connections). The same with only its kubelet stopped (its agent proves
// it runs). After each heal the site is whole.
func TestChaosAppWithoutVolumeOnAPausedHost(t *testing.T) {
	c := startChaosSite(t, 3)
	s := chaos.Schedule{Seed: 4, Steps: []chaos.Step{
		{Kind: chaos.Pause, Nodes: []string{"node-c"}, Part: "host", Hold: 90 * time.Second},
		{Kind: chaos.Heal, Hold: 2 * time.Second},
	}}
	res := c.run(t, s)
	t.Logf("%s ran on %v", chaosAppWithoutVolume, res.ranOn[chaosAppWithoutVolume])
	// Its kubelet alone stopped: the node NotReady, its agent and the app
	// running on; the agent's proof of life holds the failover.
	kubelet := chaos.Schedule{Seed: 5, Steps: []chaos.Step{
		// On node-c again, if the first schedule moved it.
		{Kind: chaos.Migrate, App: chaosAppWithoutVolume, Nodes: []string{"node-c"}, Hold: 20 * time.Second},
		{Kind: chaos.Pause, Nodes: []string{"node-c"}, Part: "kubelet", Hold: 90 * time.Second},
		{Kind: chaos.Heal, Hold: 2 * time.Second},
	}}
	res2 := c.run(t, kubelet)
	t.Logf("%s ran on %v", chaosAppWithoutVolume, res2.ranOn[chaosAppWithoutVolume])
	t.Logf("\n%s", chaosTable([]chaosRun{res, res2}))
}
