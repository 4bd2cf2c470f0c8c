package apps

import (
	"testing"
	"time"
)

// Pending follows the loop: a pass running, a retry armed, a change or a
// wake-up queued are each work in hand; only none of them is idle.
func TestPendingFollowsTheLoop(t *testing.T) {
	a := &Controller{kick: make(chan struct{}, 1)}
	changes := make(chan struct{}, 1)
	if p := a.Pending(); !p.Idle() || p.Passes != 0 {
		t.Fatalf("before the first pass: %+v", p)
	}
	a.pass.begin(changes)
	if p := a.Pending(); !p.Running || p.Idle() {
		t.Fatalf("during a pass: %+v", p)
	}
	a.pass.end(5 * time.Second)
	if p := a.Pending(); p.Running || p.RetryAt.IsZero() || p.Idle() || p.Passes != 1 {
		t.Fatalf("a pass that asked to run again in 5 s: %+v", p)
	}
	a.pass.begin(changes)
	a.pass.end(0)
	if p := a.Pending(); !p.Idle() || p.Passes != 2 {
		t.Fatalf("a pass with nothing to retry: %+v", p)
	}
	changes <- struct{}{}
	if p := a.Pending(); !p.Queued || p.Idle() {
		t.Fatalf("a change waiting for the next pass: %+v", p)
	}
	<-changes
	a.wake()
	if p := a.Pending(); !p.Queued || p.Idle() {
		t.Fatalf("a wake-up waiting for the next pass: %+v", p)
	}
	<-a.kick
	a.pass.begin(changes)
	a.pass.waitingForCache(true)
	a.pass.end(0)
	if p := a.Pending(); !p.WaitingForCache || p.Idle() {
		t.Fatalf("a pass that placed nothing for want of a synced cache: %+v", p)
	}
	a.pass.begin(changes)
	a.pass.waitingForCache(false)
	a.pass.end(0)
	if p := a.Pending(); !p.Idle() {
		t.Fatalf("a pass with the cache synced and nothing to retry: %+v", p)
	}
}
