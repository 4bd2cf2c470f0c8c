package views

import (
	"context"
	"reflect"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

// MaxFrameRate caps redraws: bursts of watch events (a node failing takes
// dozens of pods with it) coalesce into at most ten frames a second.
const MaxFrameRate = 10

// agentPollInterval is how often the agent's local state is re-read; it is a
// unix socket on this node, not the API server.
var agentPollInterval = 2 * time.Second

// BuildFrame computes a frame from the snapshot; snap may be nil when there
// is no cluster to read (problem says why).
func BuildFrame(snap *kube.Snapshot, agent *AgentSummary, problem string, now time.Time) Frame {
	if snap == nil {
		return Frame{Agent: agent, Problem: problem}
	}
	synced := snap.Synced() // first: the data read after it holds the lists
	return FrameFromData(snap.Data(), synced, agent, problem, now)
}

// FrameFromData computes a frame from what the snapshot holds: the cluster
// model, the pod and event rows.
func FrameFromData(d kube.Data, synced bool, agent *AgentSummary, problem string, now time.Time) Frame {
	return new(frameBuilder).build(d, synced, agent, problem, now)
}

// frameBuilder computes the frames of successive reads of the caches,
// keeping the rows of the objects that did not change (kube.PodRowCache):
// a change of one pod re-sorts one row, not a thousand.
type frameBuilder struct {
	status kube.Deriver
	pods   kube.PodRowCache
	events kube.EventRowCache
}

// build is FrameFromData.
func (b *frameBuilder) build(d kube.Data, synced bool, agent *AgentSummary, problem string, now time.Time) Frame {
	// The rows' strings are cleaned as each row is made (ui.CleanStrings),
	// once for as long as its object does not change: a frame of 2,000
	// volumes and a thousand pods in which one pod changed cleans one row.
	b.status.FinishVolume = ui.CleanStrings[kube.VolumeStatus]
	b.pods.Finish = ui.CleanStrings[kube.PodRow]
	b.events.Finish = ui.CleanStrings[kube.EventRow]
	f := Frame{Agent: agent, Problem: problem}
	f.Status = b.status.Derive(d, now)
	f.Synced = synced
	if f.Synced {
		f.Pods = b.pods.Rows(d.Pods)
		f.Events = b.events.Rows(d.Events, 500)
	} else {
		f.Problem = d.Health.LastError
		if f.Problem == "" {
			f.Problem = "connecting to the API server"
		}
	}
	// The rest of the frame, whatever fields it gains, is cleaned whole,
	// as the console cleans every frame made elsewhere.
	volumes, pods, events := f.Status.Volumes, f.Pods, f.Events
	f.Status.Volumes, f.Pods, f.Events = nil, nil, nil
	f = ui.CleanStrings(f)
	f.Status.Volumes, f.Pods, f.Events = volumes, pods, events
	f.cleaned = true
	return f
}

// withBasics is f, a frame of a cluster still being read, with what is
// read of it already (kube.Snapshot.BasicsData): the API server answers,
// so the frame has no problem but the console's own (problem); a list
// that fails meanwhile is said where the overview says what is still
// being read (its status's API.LastError).
func withBasics(f Frame, basics kube.Data, problem string, now time.Time) Frame {
	st := kube.Derive(basics, now)
	f.Basics = ui.CleanStrings(&st)
	f.Problem = ui.Clean(problem)
	return f
}

// Feed sends the console a frame on every snapshot change (coalesced, capped
// at MaxFrameRate) and whenever the agent's state may have moved, until ctx
// ends. It runs on its own goroutine: nothing in the console's Update waits
// for the network.
func Feed(ctx context.Context, snap *kube.Snapshot, agentState func(context.Context) *AgentSummary, problem string, send func(tea.Msg)) {
	var changes <-chan struct{}
	if snap != nil {
		ch, unsubscribe := snap.Subscribe()
		defer unsubscribe()
		changes = ch
	}
	poll := time.NewTicker(agentPollInterval)
	defer poll.Stop()
	var agent *AgentSummary
	refreshAgent := func() (changed bool) {
		if agentState == nil {
			return false
		}
		next := agentState(ctx)
		changed = !reflect.DeepEqual(next, agent)
		agent = next
		return changed
	}
	refreshAgent()
	var frames frameBuilder
	minGap := time.Second / MaxFrameRate
	// shown is the read stage of the last frame sent.
	shown := readNothing
	for {
		now := time.Now()
		var expiry <-chan time.Time
		var timer *time.Timer
		if snap == nil {
			send(FrameMsg(Frame{Agent: agent, Problem: problem}))
		} else {
			// One read of the caches for the frame and its next wake-up.
			// Synced first: once true it stays so, and the data read after
			// it holds the lists.
			synced := snap.Synced()
			d := snap.Data()
			f := frames.build(d, synced, agent, problem, now)
			if !synced {
				if basics, ok := snap.BasicsData(); ok {
					f = withBasics(f, basics, problem, now)
					d = basics
				}
			}
			shown = frameStage(f)
			send(FrameMsg(f))
			// The stats leader's lease running out changes the status with
			// no event to say so: wake up for it.
			if at := kube.NextLeaseExpiry(d, now); !at.IsZero() {
				timer = time.NewTimer(time.Until(at) + 10*time.Millisecond)
				expiry = timer.C
			}
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-changes:
				break wait
			case <-expiry:
				break wait
			case <-poll.C:
				// The agent's state is re-read; the frame is rebuilt only
				// when it says something new.
				if refreshAgent() {
					break wait
				}
			}
		}
		if timer != nil {
			timer.Stop()
		}
		// The changes of a gap are coalesced into the frame after it, but
		// the basics or the whole cluster read are what the technician
		// waits on at the start: drawn at once, not at the next tenth of
		// a second.
		if !waitGap(ctx, minGap-time.Since(now), changes, func() bool { return readMore(snap, shown) }) {
			return
		}
	}
}

// waitGap waits out a frame-rate gap of d, taking the changes that come
// in it (the frame after it shows them), but ends it at once when more
// is true, at its start or at a change. False when ctx ends.
func waitGap(ctx context.Context, d time.Duration, changes <-chan struct{}, more func() bool) bool {
	if d <= 0 || more() {
		return true
	}
	gap := time.NewTimer(d)
	defer gap.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-gap.C:
			return true
		case <-changes:
			if more() {
				return true
			}
		}
	}
}

// How much of the cluster a frame shows, or a snapshot has read.
const (
	readNothing = iota
	readBasics  // the basics (Frame.Basics, Snapshot.BasicsRead)
	readAll     // the whole cluster (Frame.Synced, Snapshot.Synced)
)

// frameStage is how much of the cluster f shows.
func frameStage(f Frame) int {
	switch {
	case f.Synced:
		return readAll
	case f.Basics != nil:
		return readBasics
	}
	return readNothing
}

// readMore says whether snap has read more than a frame of stage shown
// shows.
func readMore(snap *kube.Snapshot, shown int) bool {
	switch {
	case snap == nil:
		return false
	case snap.Synced():
		return shown < readAll
	case snap.BasicsRead():
		return shown < readBasics
	}
	return false
}
