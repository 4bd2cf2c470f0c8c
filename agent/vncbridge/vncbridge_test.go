package vncbridge

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/streams"
)

func TestWant(t *testing.T) {
	vmi := func(name, node string, phase kvv1.VirtualMachineInstancePhase, port string) *kvv1.VirtualMachineInstance {
		v := &kvv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kube.AppNamespace},
			Status: kvv1.VirtualMachineInstanceStatus{NodeName: node, Phase: phase}}
		if port != "" {
			v.Annotations = map[string]string{kube.AnnotationVNCPort: port}
		}
		return v
	}
	deleting := vmi("leaving", "node-a", kvv1.Running, "5904")
	deleting.DeletionTimestamp = &metav1.Time{}
	got, conflicts := Want([]*kvv1.VirtualMachineInstance{
		vmi("hmi", "node-a", kvv1.Running, "5901"),
		vmi("elsewhere", "node-b", kvv1.Running, "5902"),
		vmi("booting", "node-a", kvv1.Scheduled, "5903"),
		deleting,
		vmi("no-vnc", "node-a", kvv1.Running, ""),
		vmi("bad-port", "node-a", kvv1.Running, "x"),
		vmi("b-second", "node-a", kvv1.Running, "5905"),
		vmi("a-first", "node-a", kvv1.Running, "5905"),
	}, "node-a")
	want := map[int]Target{
		5901: {Port: 5901, Namespace: kube.AppNamespace, VMI: "hmi"},
		5905: {Port: 5905, Namespace: kube.AppNamespace, VMI: "a-first"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Want: %+v\nwant %+v", got, want)
	}
	if len(conflicts) != 1 || conflicts[0] != kube.AppNamespace+"/b-second asks for port 5905, served for "+kube.AppNamespace+"/a-first" {
		t.Errorf("conflicts: %q", conflicts)
	}
}

// A password is for one console, named by its port, app or VMI; a name
// that fits two is refused rather than guessed, and one that fits none
// says what the node serves.
func TestSessionNamesOneConsole(t *testing.T) {
	b := New(Options{Node: "node-a"}, nil)
	for port, target := range map[int]Target{
		5901: {Port: 5901, Namespace: kube.AppNamespace, VMI: "hmi-x", App: "hmi"},
		5902: {Port: 5902, Namespace: "other", VMI: "hmi-x", App: "hmi-copy"},
	} {
		b.running[port] = &running{target: target, addr: "127.0.0.1:" + strconv.Itoa(port), passwords: &streams.VNCPasswords{}}
	}
	s, err := b.Session("hmi")
	if err != nil || s.Address != "127.0.0.1:5901" || len(s.Password) != 8 || s.VMI != kube.AppNamespace+"/hmi-x" {
		t.Errorf("by app: %+v, %v", s, err)
	}
	if s, err := b.Session("5902"); err != nil || s.Address != "127.0.0.1:5902" {
		t.Errorf("by port: %+v, %v", s, err)
	}
	if _, err := b.Session("hmi-x"); err == nil || !strings.Contains(err.Error(), "more than one console") {
		t.Errorf("a VMI name two consoles share: %v, want refused", err)
	}
	if _, err := b.Session("plc"); err == nil || !strings.Contains(err.Error(), "hmi (hmi-x, port 5901)") {
		t.Errorf("an unknown console: %v, want what the node serves", err)
	}
}
