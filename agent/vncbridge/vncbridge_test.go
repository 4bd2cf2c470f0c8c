package vncbridge

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
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
