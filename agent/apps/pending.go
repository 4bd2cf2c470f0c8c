package apps

import (
	"sync"
	"time"
)

// Pending is the apps controller's own account of the work it has in hand:
// whether a reconcile pass is running, whether it armed a timer to come
// back (a failed write to retry, a failover timer), and whether a change
// or a wake-up is waiting for the next pass. Every write the apps controller
// makes (layouts, removals, failover) happens inside a pass, so an agent
// with nothing pending makes none until something changes.
type Pending struct {
	// Passes is how many reconcile passes have completed.
	Passes uint64 `json:"passes"`
	// LastPass is when the last pass ended.
	LastPass time.Time `json:"lastPass"`
	// Running: a pass is under way.
	Running bool `json:"running"`
	// RetryAt is when the last pass asked to run again without a change
	// (zero: it did not).
	RetryAt time.Time `json:"retryAt,omitzero"`
	// Queued: a cluster change or a wake-up waits for the next pass.
	Queued bool `json:"queued"`
	// WaitingForCache: the last pass placed nothing because the watches
	// on what this node laid out had not synced; their sync wakes the
	// next.
	WaitingForCache bool `json:"waitingForCache,omitempty"`
}

// Idle reports that nothing is pending: no pass running, none asked for,
// none queued, none waiting for the cache.
func (p Pending) Idle() bool {
	return !p.Running && p.RetryAt.IsZero() && !p.Queued && !p.WaitingForCache
}

// passes records the reconcile loop's passes for Pending.
type passes struct {
	mu      sync.Mutex
	p       Pending
	changes <-chan struct{} // the loop's subscription to the snapshot
}

func (s *passes) begin(changes <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.p.Running, s.changes = true, changes
}

// waitingForCache records whether this pass found the placement's cache
// unsynced.
func (s *passes) waitingForCache(waiting bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.p.WaitingForCache = waiting
}

func (s *passes) end(next time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	s.p.Running, s.p.Passes, s.p.LastPass, s.p.RetryAt = false, s.p.Passes+1, now, time.Time{}
	if next > 0 {
		s.p.RetryAt = now.Add(next)
	}
}

// Pending returns what the apps controller has in hand (see Pending).
func (c *Controller) Pending() Pending {
	c.pass.mu.Lock()
	defer c.pass.mu.Unlock()
	p := c.pass.p
	p.Queued = len(c.kick) > 0 || len(c.pass.changes) > 0
	return p
}
