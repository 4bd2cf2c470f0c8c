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

// A lost node makes Kubernetes say NodeNotReady once per pod on it: the
// events screen shows them as one line, the pods in its detail.
func TestEventsGroupOneMessageForManyPods(t *testing.T) {
	f := sampleFrame()
	f.Agent = nil
	for _, p := range []string{"coredns-x", "hmi-x", "plc-gateway-1", "svclb-traefik-2", "longhorn-manager-q"} {
		f.Events = append(f.Events, kube.EventRow{Time: now.Add(-8 * time.Second), Type: "Warning", Reason: "NodeNotReady",
			Object: "Pod/" + p, Namespace: "kube-system", Name: p + ".1", Message: "Node is not ready"})
	}
	a := NewApp(testContext(100, 24))
	a.Update(FrameMsg(f))
	press(a, "6")
	v := a.View()
	if n := strings.Count(v, "NodeNotReady"); n != 2 {
		t.Fatalf("want the node's line and one line for its 5 pods, got %d NodeNotReady lines:\n%s", n, v)
	}
	if !strings.Contains(v, "5 pods") {
		t.Fatalf("the grouped line should say how many pods:\n%s", v)
	}
	press(a, "enter") // the newest line: the pods'
	if d := a.View(); !strings.Contains(d, "hmi-x") || !strings.Contains(d, "longhorn-manager-q") {
		t.Errorf("the detail should name the pods:\n%s", d)
	}
}
