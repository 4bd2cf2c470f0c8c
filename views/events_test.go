package views

import (
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
