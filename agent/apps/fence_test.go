package apps

import (
	"testing"
	"time"
)

// The fence comes before the force-delete with the margin the derivation
// states, for the shipped default and for the short timings a 60 s
// recovery needs; a failover timeout too short to leave a fence bound is
// raised, never the fence squeezed to nothing.
func TestDeriveFenceTimings(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Second, 15 * time.Second, 20 * time.Second, 30 * time.Second, DefaultFailoverTimeout, 10 * time.Minute} {
		ft := DeriveFenceTimings(timeout)
		if timeout >= MinFailoverTimeout && ft.ForceDeleteAfter != timeout {
			t.Errorf("timeout %s: the leader's timer became %s; only a timeout below %s is raised", timeout, ft.ForceDeleteAfter, MinFailoverTimeout)
		}
		if timeout < MinFailoverTimeout && ft.ForceDeleteAfter != MinFailoverTimeout {
			t.Errorf("timeout %s: the leader's timer is %s, want it raised to %s", timeout, ft.ForceDeleteAfter, MinFailoverTimeout)
		}
		if ft.FenceAfter < MinFenceAfter {
			t.Errorf("timeout %s: fence after %s, below the %s a blip needs", timeout, ft.FenceAfter, MinFenceAfter)
		}
		// The fence is done (found at the next check, the check's probes
		// answered or timed out, the pods stopped) before the leader's
		// timer can run out, with a tenth of the timer to spare.
		done := ft.FenceAfter + fenceCheckEvery + probeTimeout + fenceStopBudget
		if spare := ft.ForceDeleteAfter - done; spare < ft.ForceDeleteAfter/10 {
			t.Errorf("timeout %s: fence done at %s, force-delete at %s: %s to spare, want at least %s",
				timeout, done, ft.ForceDeleteAfter, spare, ft.ForceDeleteAfter/10)
		}
		if ft.Margin != ft.ForceDeleteAfter-ft.FenceAfter {
			t.Errorf("timeout %s: margin %s is not the difference of %s and %s", timeout, ft.Margin, ft.ForceDeleteAfter, ft.FenceAfter)
		}
	}
	if ft := DeriveFenceTimings(DefaultFailoverTimeout); ft.FenceAfter != 16200*time.Millisecond {
		t.Errorf("the default 28 s failover timeout: fence after %s, want 16.2s", ft.FenceAfter)
	}
}

// A node fences only when it has reached neither the API server nor any
// peer for the whole bound, measured on the monotonic clock: a wall clock
// stepped forward does not fence early, one stepped back does not fence
// late. Contact again lifts the fence.
func TestFenceDecision(t *testing.T) {
	const bound = 45 * time.Second
	wall := time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)
	type check struct {
		mono      time.Duration // since the watch started (monotonic)
		wallShift time.Duration // the wall clock's step, from wall+mono
		api, peer bool
		want      FenceAction
	}
	for name, checks := range map[string][]check{
		"API and peers silent past the bound: fence, and keep stopping what restarts": {
			{mono: 0, api: true, want: FenceNone},
			{mono: 2 * time.Second, want: FenceNone},
			{mono: 44 * time.Second, want: FenceNone},
			{mono: 45 * time.Second, want: FenceStop},
			{mono: 47 * time.Second, want: FenceStop},
		},
		"API back before the bound: nothing stopped": {
			{mono: 0, api: true},
			{mono: 30 * time.Second},
			{mono: 44 * time.Second, api: true},
			{mono: 80 * time.Second},
			{mono: 88 * time.Second, want: FenceNone},
		},
		"the API down but a peer answers (k3s restarting here): not cut off": {
			{mono: 0, api: true},
			{mono: 10 * time.Second, peer: true},
			{mono: 100 * time.Second, peer: true},
			{mono: 140 * time.Second, want: FenceNone},
		},
		"a peer answers, then silence: the bound counts from that answer": {
			{mono: 0, api: true},
			{mono: 30 * time.Second, peer: true},
			{mono: 74 * time.Second, want: FenceNone},
			{mono: 75 * time.Second, want: FenceStop},
		},
		"wall clock stepped forward an hour: no early fence": {
			{mono: 0, api: true},
			{mono: 2 * time.Second, wallShift: time.Hour, want: FenceNone},
			{mono: 40 * time.Second, wallShift: time.Hour, want: FenceNone},
			{mono: 45 * time.Second, wallShift: time.Hour, want: FenceStop},
		},
		"wall clock stepped back an hour: no late fence": {
			{mono: 0, api: true},
			{mono: 2 * time.Second, wallShift: -time.Hour, want: FenceNone},
			{mono: 45 * time.Second, wallShift: -time.Hour, want: FenceStop},
		},
		"contact again lifts the fence": {
			{mono: 0, api: true},
			{mono: 50 * time.Second, want: FenceStop},
			{mono: 52 * time.Second, api: true, want: FenceLift},
			{mono: 54 * time.Second, api: true, want: FenceNone},
			{mono: 60 * time.Second, want: FenceNone},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var st FenceState
			for i, c := range checks {
				v := st.Observe(FenceCheck{Mono: c.mono, Wall: wall.Add(c.mono + c.wallShift), APIReachable: c.api, PeerAnswered: c.peer}, bound)
				if c.want == "" {
					c.want = FenceNone
				}
				if v.Action != c.want {
					t.Fatalf("check %d at %s (wall %+v): %s (%s), want %s", i, c.mono, c.wallShift, v.Action, v.Reason, c.want)
				}
			}
		})
	}
}
