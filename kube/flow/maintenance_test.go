package flow

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// seen is one look at the walked node: gone (no Node), or Ready or not
// with the boot ID its status reports; uid tells a re-created Node.
type seen struct {
	gone  bool
	ready bool
	boot  string
	uid   string
}

func (s seen) node(name string) (*corev1.Node, bool) {
	if s.gone {
		return nil, false
	}
	status := corev1.ConditionFalse
	if s.ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(s.uid)},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}},
			NodeInfo:   corev1.NodeSystemInfo{BootID: s.boot},
		},
	}, true
}

// Steps 2 and 3 of the walk pass only on evidence of a boot: the boot ID
// recorded when the walk began changed. A NotReady blip with the same
// boot ID is not the reboot: the walk waits (here until its step times
// out) instead of uncordoning the node and, under --all, draining the
// next one while the technician powers this one off (issue 36). With no
// boot ID recorded, NotReady then Ready still passes, and the walk says
// it rests on weaker evidence.
func TestMaintenancePassesTheBootOnlyOnANewBootID(t *testing.T) {
	up := func(boot string) seen { return seen{ready: true, boot: boot, uid: "1"} }
	down := func(boot string) seen { return seen{boot: boot, uid: "1"} }
	for _, c := range []struct {
		name     string
		recorded string // the boot ID when the walk began
		looks    []seen // the last one stands from then on
		passes   bool
		says     string // in the walk's progress
	}{
		{name: "a NotReady blip, the boot ID unchanged", recorded: "b1",
			looks: []seen{up("b1"), down("b1"), up("b1")}, says: "same boot ID"},
		{name: "powered off and booted", recorded: "b1",
			looks: []seen{up("b1"), down("b1"), down("b1"), up("b2")}, passes: true, says: "back and Ready"},
		{name: "a reboot too quick to be seen NotReady", recorded: "b1",
			looks: []seen{up("b1"), up("b2")}, passes: true, says: "back and Ready"},
		{name: "a blip, then the real boot", recorded: "b1",
			looks: []seen{up("b1"), down("b1"), up("b1"), down("b1"), up("b2")}, passes: true, says: "same boot ID"},
		{name: "the boot ID goes empty while Ready", recorded: "b1",
			looks: []seen{up("b1"), up("")}, says: "no boot ID"},
		{name: "the boot ID goes empty over a blip", recorded: "b1",
			looks: []seen{up("b1"), down(""), up("")}, says: "no boot ID"},
		{name: "the Node deleted and re-created, the same boot", recorded: "b1",
			looks: []seen{up("b1"), {gone: true}, {boot: "b1", uid: "2"}, {ready: true, boot: "b1", uid: "2"}}, says: "same boot ID"},
		{name: "the Node re-created after a boot", recorded: "b1",
			looks: []seen{up("b1"), {gone: true}, {boot: "b2", uid: "2"}, {ready: true, boot: "b2", uid: "2"}}, passes: true},
		{name: "no boot ID recorded: NotReady then Ready", recorded: "",
			looks: []seen{up(""), down(""), up("")}, passes: true, says: "weaker evidence"},
		{name: "no boot ID recorded, one reported later, never NotReady", recorded: "",
			looks: []seen{up(""), up("b2")}, says: "power it off or reboot it"},
		{name: "no boot ID recorded, one reported after NotReady", recorded: "",
			looks: []seen{up(""), down(""), up("b2")}, passes: true, says: "weaker evidence"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := &Maintenance{opts: MaintenanceOptions{StepTimeout: time.Minute, Every: time.Second}}
				i := 0
				nodeOf := func() (*corev1.Node, bool) {
					s := c.looks[min(i, len(c.looks)-1)]
					i++
					return s.node("node-a")
				}
				var said []string
				err := m.awaitBoot(context.Background(), "node-a", c.recorded, nodeOf, func(s string) { said = append(said, s) })
				progress := strings.Join(said, "\n")
				if passed := err == nil; passed != c.passes {
					t.Errorf("the walk passed its node's boot: %v, want %v (%v); it said:\n%s", passed, c.passes, err, progress)
				}
				if !strings.Contains(progress, c.says) {
					t.Errorf("the walk's progress does not say %q:\n%s", c.says, progress)
				}
			})
		})
	}
}

// NodeReturn, the judgement both the walk and the agent's drain request
// wait on: back only on a new boot ID, or, with none known, on NotReady
// then Ready.
func TestNodeReturn(t *testing.T) {
	node := func(s seen) *corev1.Node { n, _ := s.node("node-a"); return n }
	for _, c := range []struct {
		bootID   string
		wentDown bool
		n        *corev1.Node
		want     Return
	}{
		{"b1", true, nil, ReturnDown},
		{"b1", true, node(seen{boot: "b2"}), ReturnDown},
		{"b1", false, node(seen{ready: true, boot: "b1"}), ReturnAwaited},
		{"b1", true, node(seen{ready: true, boot: "b1"}), ReturnBlip},
		{"b1", true, node(seen{ready: true, boot: ""}), ReturnNoBootID},
		{"b1", false, node(seen{ready: true, boot: ""}), ReturnNoBootID},
		{"b1", false, node(seen{ready: true, boot: "b2"}), ReturnBooted},
		{"b1", true, node(seen{ready: true, boot: "b2"}), ReturnBooted},
		{"", false, node(seen{ready: true, boot: "b2"}), ReturnAwaited},
		{"", true, node(seen{ready: true, boot: "b2"}), ReturnUnproven},
		{"", true, node(seen{ready: true, boot: ""}), ReturnUnproven},
	} {
		got := NodeReturn(c.bootID, c.wentDown, c.n)
		if got != c.want {
			t.Errorf("NodeReturn(%q, went down %v, a Node: %v) = %s, want %s", c.bootID, c.wentDown, c.n != nil, got.Say("node-a"), c.want.Say("node-a"))
		}
	}
}
