package config

import (
	"strconv"
	"sync"
	"time"
)

// What a live agent says of its own fence, signed with its proof of life
// (LifeKey.AnswerWith). Two readers need it and neither may take an
// unsigned word for it:
//
//   - a peer's fence watch, cut off from the API server itself: a peer
//     that answers is contact with the side that holds quorum only when
//     it proves that it reaches a ready API server (QuorumContactAgo),
//     or a cut-off pair that answers each other would never fence;
//   - the stats leader's failover guard: a node that answers may still
//     run its pods, unless it says, signed, that it has fenced (FencedFor)
//     with the same failover timeout as the cluster's.
//
// Ages, not timestamps: each is measured on the answering agent's
// monotonic clock, so no two machines' wall clocks are compared.

// LifeState is an agent's signed word about its fence.
type LifeState struct {
	// QuorumContactAgoMs is how long ago this agent last found the API
	// server ready (its etcd with quorum), in milliseconds; -1: not since
	// it started.
	QuorumContactAgoMs int64 `json:"quorum_contact_ago_ms"`
	// FencedForMs is how long this node's auto apps' workloads have been
	// stopped by its fence, in milliseconds; -1: not fenced.
	FencedForMs int64 `json:"fenced_for_ms"`
	// Fencing says whether the fence watch runs on this node (an agent run
	// with --no-fence says false).
	Fencing bool `json:"fencing"`
	// FailoverTimeoutMs is the failover timeout this node's fence bound is
	// derived from, in milliseconds.
	FailoverTimeoutMs int64 `json:"failover_timeout_ms"`
}

// QuorumContactAgo is how long ago the agent last reached a ready API
// server; ok is false when it has not since it started.
func (s LifeState) QuorumContactAgo() (ago time.Duration, ok bool) {
	if s.QuorumContactAgoMs < 0 {
		return 0, false
	}
	return time.Duration(s.QuorumContactAgoMs) * time.Millisecond, true
}

// FencedFor is how long the node has been fenced; ok is false when it is
// not fenced.
func (s LifeState) FencedFor() (d time.Duration, ok bool) {
	if s.FencedForMs < 0 {
		return 0, false
	}
	return time.Duration(s.FencedForMs) * time.Millisecond, true
}

// FailoverTimeout is the timeout the node's fence bound derives from.
func (s LifeState) FailoverTimeout() time.Duration {
	return time.Duration(s.FailoverTimeoutMs) * time.Millisecond
}

// macField is the state as one MAC field: fixed order, decimal, so that a
// JSON re-encoding on the way cannot change what was signed.
func (s LifeState) macField() []byte {
	var b []byte
	for _, n := range []int64{s.QuorumContactAgoMs, s.FencedForMs, s.FailoverTimeoutMs} {
		b = strconv.AppendInt(b, n, 10)
		b = append(b, '|')
	}
	return strconv.AppendBool(b, s.Fencing)
}

// LifeStatus is this agent's own record of its fence, kept by its fence
// watch and read by its proof-of-life handler. Safe for concurrent use.
// The zero value is not usable: NewLifeStatus.
type LifeStatus struct {
	mu         sync.Mutex
	fencing    bool
	timeout    time.Duration
	fenceBy    *FenceBy  // nil: fencing and timeout
	lastQuorum time.Time // zero: not since the start
	fencedAt   time.Time // zero: not fenced
}

// NewLifeStatus is the record of an agent that fences (or not, with
// --no-fence) with the given failover timeout.
func NewLifeStatus(fencing bool, failoverTimeout time.Duration) *LifeStatus {
	return &LifeStatus{fencing: fencing, timeout: failoverTimeout}
}

// FenceBy are fence settings the watch follows instead of its agent's
// own: the ones its Node still says, while they fence sooner.
type FenceBy struct {
	Fencing         bool
	FailoverTimeout time.Duration
}

// FenceBy records that the fence watch fences by by instead of the
// agent's own settings (nil: by its own again), so that the proof of life
// signs what the node fences with.
func (s *LifeStatus) FenceBy(by *FenceBy) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.fenceBy = by
	s.mu.Unlock()
}

// QuorumContact records that the API server answered ready at now (a
// reading of time.Now, so that ages run on the monotonic clock).
func (s *LifeStatus) QuorumContact(now time.Time) {
	s.mu.Lock()
	s.lastQuorum = now
	s.mu.Unlock()
}

// SetFenced records that the auto apps' workloads were stopped at now
// (kept from the first stop while the fence holds), or, with fenced false,
// that the fence is lifted or the last stop failed.
func (s *LifeStatus) SetFenced(fenced bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !fenced:
		s.fencedAt = time.Time{}
	case s.fencedAt.IsZero():
		s.fencedAt = now
	}
}

// State is the record as of now, as the proof of life signs it.
func (s *LifeStatus) State(now time.Time) LifeState {
	if s == nil {
		return LifeState{QuorumContactAgoMs: -1, FencedForMs: -1}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	age := func(t time.Time) int64 {
		if t.IsZero() {
			return -1
		}
		return max(now.Sub(t), 0).Milliseconds()
	}
	fencing, timeout := s.fencing, s.timeout
	if s.fenceBy != nil {
		fencing, timeout = s.fenceBy.Fencing, s.fenceBy.FailoverTimeout
	}
	return LifeState{QuorumContactAgoMs: age(s.lastQuorum), FencedForMs: age(s.fencedAt),
		Fencing: fencing, FailoverTimeoutMs: timeout.Milliseconds()}
}
