package apps

import (
	"fmt"
	"time"

	"github.com/sitecon/sitecon/kube"
)

// Self-fencing: a node cut off from the others stops its auto-migration
// apps' workloads before the majority side's failover guard may
// force-delete their pods and start them elsewhere, so that an app never
// runs on both sides of a partition. Pinned apps stay: nobody else will
// run them.

// FenceTimings are the failover guard's timer and the self-fence bound,
// derived from one another (DeriveFenceTimings).
type FenceTimings struct {
	// ForceDeleteAfter is the stats leader's own timer: how long it sees a
	// pod on an unreachable node before it may force-delete it, once
	// evicted (DecideFailover's Timeout).
	ForceDeleteAfter time.Duration
	// FenceAfter is how long a node goes without reaching a ready API
	// server, or a peer that proves it reaches one, before it stops its
	// auto apps' workloads.
	FenceAfter time.Duration
	// Margin is ForceDeleteAfter - FenceAfter.
	Margin time.Duration
}

const (
	// fenceCheckEvery is how often the fence watch checks for contact.
	fenceCheckEvery = time.Second
	// fenceStopBudget bounds the stop of the workloads: SIGKILL to every
	// process of the pods, delivered in milliseconds; the budget leaves
	// room for a loaded device.
	fenceStopBudget = 5 * time.Second
	// MinFenceAfter is the shortest fence bound: a cut-off shorter than
	// this (a switch restarting) stops nothing.
	MinFenceAfter = 5 * time.Second
	// MinFailoverTimeout is the shortest failover timeout that leaves
	// MinFenceAfter under DeriveFenceTimings' margin; a shorter one is
	// raised to it (kube's, which the cluster record's value is read by).
	MinFailoverTimeout = kube.MinFailoverTimeout
)

// DeriveFenceTimings is the one place both sides take their timing from:
// the stats leader's failover guard (its force-delete timer) and every
// node's fence watch (its fence bound).
//
// The order to keep: a node X cut off at time C has stopped its auto apps'
// workloads before any leader can force-delete their pods.
//
//   - Force-delete, on the majority side: the leader's timer T starts when
//     it first sees the pod on X while X carries the unreachable taint
//     (evicted or not yet: the timer runs while the pod tolerates the
//     taint, and the pod goes only once evicted), which the node
//     lifecycle controller puts on only after its node-monitor grace
//     period G since X's last heartbeat. So force-delete >= C + T: G is
//     not counted on (a heartbeat may predate C, and k3s may stop before
//     the agent does: see the silence below).
//   - Fence, on X: the watch counts from its last contact with a ready
//     API server (before C), its own or one a peer proves it had (counted
//     from when the peer had it, not from its answer: a relay never
//     stretches the bound), finds the bound passed at its next
//     check (every fenceCheckEvery), that check's probes answer or time
//     out (probeTimeout, run side by side), and the stop takes at most
//     fenceStopBudget. So fence done <= C + FenceAfter + fenceCheckEvery
//   - probeTimeout + fenceStopBudget.
//
// Margin = fenceCheckEvery + probeTimeout + fenceStopBudget + T/10, and
// FenceAfter = T - Margin. The tenth of T is spare: scheduling delays on a
// loaded device and the rate difference of two monotonic clocks (at most
// 500 ppm under NTP). With the default T = 28 s: Margin 11.8 s,
// FenceAfter 16.2 s, longer than the most silence a 10 s blink of the
// node's link can count (FenceSilenceCounted: 14 s). With T = 60 s:
// Margin 15 s, FenceAfter 45 s.
// A T so short that FenceAfter would fall below MinFenceAfter is raised
// to MinFailoverTimeout.
//
// Both durations are measured on each machine's monotonic clock (Go's
// time.Since and Time.Sub on readings from time.Now), never by comparing
// wall-clock timestamps, so a clock stepped by NTP or by hand moves
// neither. Both sides must run with the same --failover-timeout.
//
// The leader's timer counts the node's silence too (stuckPod.timerStart):
// a pod it saw stuck while the node's agent still answered (k3s down
// there, the containers perhaps running) is held, and when the node is
// then cut off the timer starts again from the first silent probe, so the
// bound above holds from C in that case as well.
func DeriveFenceTimings(failoverTimeout time.Duration) FenceTimings {
	t := max(failoverTimeout, MinFailoverTimeout)
	margin := fenceCheckEvery + probeTimeout + fenceStopBudget + t/10
	return FenceTimings{ForceDeleteAfter: t, FenceAfter: t - margin, Margin: margin}
}

// FenceSilenceCounted is the longest silence a node's fence watch can
// count for a cut-off of the given length: its last contact up to one
// check before the cut, and the first check after it waiting out its
// probes.
func FenceSilenceCounted(cut time.Duration) time.Duration {
	return cut + fenceCheckEvery + probeTimeout
}

// LifeProbeBound bounds one probe of a node's life: the failover guard's
// before a force-delete or a release.
const LifeProbeBound = probeTimeout

// FenceAction is what one check of the fence watch asks for.
type FenceAction string

// Fence actions.
const (
	// FenceNone: nothing to do (in contact, or not cut off long enough).
	FenceNone FenceAction = "none"
	// FenceStop: cut off past the bound: stop the auto apps' workloads
	// (again on every check while cut off: a kubelet that still runs
	// starts them again).
	FenceStop FenceAction = "stop"
	// FenceLift: contact is back after a fence: the cluster decides again
	// (the kubelet restarts a pod that was not moved meanwhile, and ends
	// one that was).
	FenceLift FenceAction = "lift"
)

// FenceCheck is one check's finding.
type FenceCheck struct {
	// Mono is the check's time on the monotonic clock (time.Since the
	// watch's start); the only time the decision uses.
	Mono time.Duration
	// Wall is the wall-clock time of the check, for the report only.
	Wall time.Time
	// APIReachable: the API server answered ready (a server that answers
	// without quorum is not ready). PeerInContact: a peer's agent proved
	// that it reached a ready API server just now (peerInContact); a peer
	// that merely answers may be cut off with this node.
	APIReachable, PeerInContact bool
	// ContactAgo is, for a peer's contact, how long before Mono that peer
	// last found a ready API server (its signed age plus this check's
	// own time): the bound counts from that contact, not from the answer,
	// so a contact relayed by a peer never stretches the fence past
	// DeriveFenceTimings' order.
	ContactAgo time.Duration
}

// FenceVerdict is what a check decided and why.
type FenceVerdict struct {
	Action FenceAction
	Reason string
}

// FenceState is the fence watch's memory between checks.
type FenceState struct {
	started         bool
	lastContact     time.Duration
	lastContactWall time.Time
	fenced          bool
}

// Fenced says whether the node is fenced now.
func (s *FenceState) Fenced() bool { return s.fenced }

// ResumeFrom starts the state from a contact ago before its first check,
// at mono and wall: a restarted watch's last contact, from its record.
func (s *FenceState) ResumeFrom(ago, mono time.Duration, wall time.Time) {
	s.started, s.lastContact, s.lastContactWall = true, mono-ago, wall.Add(-ago)
}

// Observe decides one check: fence once neither the API server nor a peer
// in contact with it has been reached for bound (counted from the last
// contact, or from the watch's start), lift on the first contact after.
func (s *FenceState) Observe(c FenceCheck, bound time.Duration) FenceVerdict {
	if !s.started {
		s.started, s.lastContact, s.lastContactWall = true, c.Mono, c.Wall
	}
	if c.APIReachable || c.PeerInContact {
		ago := time.Duration(0)
		if !c.APIReachable {
			ago = max(c.ContactAgo, 0)
		}
		// A relayed contact older than one already counted moves nothing.
		if at := c.Mono - ago; at > s.lastContact {
			s.lastContact, s.lastContactWall = at, c.Wall.Add(-ago)
		}
		if s.fenced {
			s.fenced = false
			return FenceVerdict{Action: FenceLift, Reason: "in contact again: the fence is lifted, the cluster decides where the apps run"}
		}
		return FenceVerdict{Action: FenceNone}
	}
	lost := c.Mono - s.lastContact
	since := s.lastContactWall.UTC().Format(time.RFC3339)
	if lost < bound {
		return FenceVerdict{Action: FenceNone, Reason: fmt.Sprintf("no contact with the quorum (API server not ready, no peer proves it reaches one) for %s of %s (last contact %s)", lost.Round(time.Second), bound, since)}
	}
	s.fenced = true
	return FenceVerdict{Action: FenceStop, Reason: fmt.Sprintf("no contact with the quorum (API server not ready, no peer proves it reaches one) for %s (last contact %s, fence bound %s): stopping this node's auto apps' workloads before the others may force-delete them",
		lost.Round(time.Second), since, bound)}
}
