package views

import (
	"context"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/kube"
)

// MaxFrameRate caps redraws: bursts of watch events (a node failing takes
// dozens of pods with it) coalesce into at most ten frames a second.
const MaxFrameRate = 10

// agentPollInterval is how often the agent's local state is re-read; it is a
// unix socket on this node, not the API server.
const agentPollInterval = 2 * time.Second

// BuildFrame computes a frame from the snapshot; snap may be nil when there
// is no cluster to read (problem says why).
func BuildFrame(snap *kube.Snapshot, agent *AgentSummary, problem string, now time.Time) Frame {
	f := Frame{Agent: agent, Problem: problem}
	if snap == nil {
		return f
	}
	d := snap.Data()
	f.Status = kube.Derive(d, now)
	f.Synced = snap.Synced()
	if f.Synced {
		f.Pods = kube.PodRows(d.Pods)
		f.Events = kube.EventRows(d.Events, 500)
	} else {
		f.Problem = d.Health.LastError
		if f.Problem == "" {
			f.Problem = "connecting to the API server"
		}
	}
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
	refreshAgent := func() {
		if agentState != nil {
			agent = agentState(ctx)
		}
	}
	refreshAgent()
	minGap := time.Second / MaxFrameRate
	for {
		send(FrameMsg(BuildFrame(snap, agent, problem, time.Now())))
		sent := time.Now()
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-poll.C:
			refreshAgent()
		}
		if wait := minGap - time.Since(sent); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}
}
