package views

import (
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/kube"
)

// On the events screen the message is what a technician reads: at 100
// columns it gets the room, and a long object name gives way first.
func TestEventsMessageGetsTheWidth(t *testing.T) {
	f := sampleFrame()
	f.Agent = nil
	msg := "Stopping container compute: the node was lost and the pod is being evicted from it"
	f.Events = []kube.EventRow{{Time: now.Add(-5 * time.Second), Type: "Normal", Reason: "Killing",
		Object: "Pod/virt-launcher-historian-vm-7d9f8c6b5-x2kq9", Namespace: "eve-kube-app", Message: msg}}
	a := NewApp(testContext(100, 24))
	a.Update(FrameMsg(f))
	press(a, "6")
	if row := lineOf(a.View(), "Killing"); !strings.Contains(row, msg[:50]) {
		t.Errorf("at 100 columns the message should show at least %q:\n%s", msg[:50], row)
	}
}
