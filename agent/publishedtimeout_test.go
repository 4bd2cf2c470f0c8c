package agent

import (
	"testing"

	"github.com/sitecon/sitecon/agent/apps"
)

// The first member writes its failover timeout as the cluster's: the one
// its fence derives from, never one of an agent that does not fence
// (--no-fence keeps its raw value, which no fence bound comes from).
func TestPublishedFailoverTimeout(t *testing.T) {
	if got := publishedTimeout(apps.Options{}); got != apps.DefaultFailoverTimeout {
		t.Errorf("a fencing agent offers %s, want %s", got, apps.DefaultFailoverTimeout)
	}
	if got := publishedTimeout(apps.Options{FailoverTimeout: 5e9, Fence: apps.FenceOptions{Disabled: true}}); got != 0 {
		t.Errorf("an agent run --no-fence offers %s, want none", got)
	}
}
