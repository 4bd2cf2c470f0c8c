package views

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/kube"
)

// A message longer than its column is cut in the list; enter on its row
// shows it whole with the object, the count and when it was first and last
// seen, and esc goes back to the list.
func TestEventDetail(t *testing.T) {
	long := "0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, " +
		"2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
	f := sampleFrame()
	f.Agent = nil
	f.Events = []kube.EventRow{{Time: now.Add(-5 * time.Second), First: now.Add(-10 * time.Minute), Type: "Warning", Reason: "FailedScheduling",
		Object: "Pod/historian-x", Namespace: "eve-kube-app", Message: long, Count: 7}}
	a := NewApp(testContext(80, 24))
	a.Update(FrameMsg(f))
	press(a, "6")
	if v := a.View(); strings.Contains(v, "Preemption is not helpful") {
		t.Fatalf("the list should cut the message (the test needs a long one):\n%s", v)
	}
	press(a, "enter")
	v := strings.ReplaceAll(a.View(), "\n", "")
	for _, want := range []string{"Pod/historian-x", "FailedScheduling", "Count", "7", "First seen", "10m", "Last seen", "5s"} {
		if !strings.Contains(v, want) {
			t.Errorf("the detail lacks %q:\n%s", want, a.View())
		}
	}
	// Wrapped to the width: the whole message, once the line breaks go.
	if !strings.Contains(strings.ReplaceAll(v, " ", ""), strings.ReplaceAll(long, " ", "")) {
		t.Errorf("the detail should show the whole message:\n%s", a.View())
	}
	press(a, "esc")
	if v := a.View(); !strings.Contains(v, "REASON") || strings.Contains(v, "First seen") {
		t.Errorf("esc should go back to the list:\n%s", v)
	}
}

// An event that arrives while the console runs shows on top of the events
// screen, whatever rows came before it: an old audit record (the only row
// when the console starts) must not hold the cursor at the bottom and scroll
// the newest events out of sight. The technician has not chosen a row yet.
func TestNewEventShowsOnTopPastAnOldAuditRecord(t *testing.T) {
	f := sampleFrame()
	f.Events = nil
	f.Agent = &AgentSummary{Running: true, Node: "node-a", Events: []AgentEvent{
		{Source: "audit", Time: now.Add(-3 * time.Hour), Kind: "drain", Subject: "node-b", Message: "done by root"}}}
	a := NewApp(testContext(100, 20))
	a.Update(FrameMsg(f))
	press(a, "6")
	// The site's own start-up events arrive (more than a screen), then one
	// created by hand, newest of all.
	for i := range 40 {
		f.Events = append([]kube.EventRow{{Time: now.Add(time.Duration(i-60) * time.Second), Type: "Normal", Reason: fmt.Sprintf("Started%02d", i),
			Object: fmt.Sprintf("Pod/p%02d", i), Namespace: "eve-kube-app", Message: "started"}}, f.Events...)
		a.Update(FrameMsg(f))
	}
	f.Events = append([]kube.EventRow{{Time: now, Type: "Warning", Reason: "ByHand", Object: "Pod/by-hand", Namespace: "eve-kube-app",
		Message: "created by hand while the console runs"}}, f.Events...)
	a.Update(FrameMsg(f))
	if v := a.View(); !strings.Contains(v, "ByHand") {
		t.Fatalf("the newest event is not on the screen:\n%s", v)
	}
}

// A row the technician moved the cursor onto stays under the cursor while
// newer events arrive above it: enter opens that event, not whichever took
// its place in the list.
func TestChosenEventKeepsTheCursorAsNewerOnesArrive(t *testing.T) {
	f := sampleFrame()
	f.Agent = nil
	f.Events = nil
	for i := range 10 {
		f.Events = append([]kube.EventRow{{Time: now.Add(time.Duration(i-60) * time.Second), Type: "Normal", Reason: fmt.Sprintf("Started%02d", i),
			Name: fmt.Sprintf("p%02d.1", i), Object: fmt.Sprintf("Pod/p%02d", i), Namespace: "eve-kube-app", Message: "started"}}, f.Events...)
	}
	a := NewApp(testContext(100, 20))
	a.Update(FrameMsg(f))
	press(a, "6", "down", "down") // Started07
	for i := 10; i < 13; i++ {
		f.Events = append([]kube.EventRow{{Time: now.Add(time.Duration(i-60) * time.Second), Type: "Normal", Reason: fmt.Sprintf("Started%02d", i),
			Name: fmt.Sprintf("p%02d.1", i), Object: fmt.Sprintf("Pod/p%02d", i), Namespace: "eve-kube-app", Message: "started"}}, f.Events...)
		a.Update(FrameMsg(f))
	}
	press(a, "enter")
	if v := a.View(); !strings.Contains(v, "Pod/p07") {
		t.Fatalf("enter should open the event chosen before newer ones arrived (Pod/p07):\n%s", v)
	}
}
