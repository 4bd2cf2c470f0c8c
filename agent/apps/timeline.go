package apps

import (
	"slices"
	"sync"
	"time"
)

// Timeline event kinds.
const (
	EventMove      = "move"
	EventFailover  = "failover"
	EventRefusal   = "refusal"
	EventNode      = "node"
	EventLeader    = "leader"
	EventPlacement = "placement"
	EventConfig    = "config"
	// EventConflict: this node's config and another node's disagree on an
	// app; one holds back, or takes the layout over after the window.
	EventConflict = "conflict"
)

// TimelineEvent is one entry of the agent's timeline.
type TimelineEvent struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	App     string    `json:"app,omitempty"`
	Node    string    `json:"node,omitempty"`
	Message string    `json:"message"`
	// Warning marks refusals and failures, for colour.
	Warning bool `json:"warning,omitempty"`
}

// Timeline keeps the latest events, newest first on read.
type Timeline struct {
	mu      sync.Mutex
	max     int
	events  []TimelineEvent
	version int
}

// NewTimeline keeps at most max events.
func NewTimeline(max int) *Timeline { return &Timeline{max: max} }

// Add records an event.
func (t *Timeline) Add(e TimelineEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.version++
	t.events = append(t.events, e)
	if len(t.events) > t.max {
		t.events = slices.Delete(t.events, 0, len(t.events)-t.max)
	}
}

// Version counts the events ever added, to tell whether anything is new.
func (t *Timeline) Version() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.version
}

// Events returns the events, newest first.
func (t *Timeline) Events() []TimelineEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Clone(t.events)
	slices.Reverse(out)
	return out
}
