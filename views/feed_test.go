package views

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

// The feed re-reads the agent's state on every poll but sends a frame
// only when it says something new: an idle site draws nothing.
func TestFeedSendsFramesOnlyForChanges(t *testing.T) {
	was := agentPollInterval
	agentPollInterval = 5 * time.Millisecond
	t.Cleanup(func() { agentPollInterval = was })

	var polls atomic.Int64
	var mu sync.Mutex
	phase := "joined"
	state := func(context.Context) *AgentSummary {
		polls.Add(1)
		mu.Lock()
		defer mu.Unlock()
		return &AgentSummary{Running: true, Node: "node-a", Phase: phase}
	}
	frames := make(chan Frame, 100)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go Feed(ctx, nil, state, "", func(m tea.Msg) { frames <- Frame(m.(FrameMsg)) })

	first := <-frames
	deadline := time.Now().Add(10 * time.Second)
	for polls.Load() < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("the agent was polled %d times in 10s", polls.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := len(frames); n != 0 {
		t.Fatalf("%d frames sent for %d polls that found nothing new (first frame: %s)", n, polls.Load(), first.Agent.Phase)
	}
	mu.Lock()
	phase = "error"
	mu.Unlock()
	select {
	case f := <-frames:
		if f.Agent.Phase != "error" {
			t.Fatalf("the new frame shows phase %q", f.Agent.Phase)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the agent's change never reached a frame")
	}
}
