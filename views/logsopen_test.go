package views

import (
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/streams"
	"github.com/sitecon/sitecon/test/sitebox"
)

// The site starts only for a test that asks for it (sitebox.Shared).
func TestMain(m *testing.M) { os.Exit(sitebox.RunMain(m)) }

// The pod a logs view reads, found through sitebox's real API server as
// `sitecon logs` finds it: a pod by name with its containers (its
// default-container annotation honoured); a VM app's virt-launcher pod, on
// its guest console; and a clear error for what is not there.
func TestResolveLogTargetOnSitebox(t *testing.T) {
	site := sitebox.Shared(t)
	cs := site.Clients(t).Core
	ctx := t.Context()
	const ns = "logs-resolve"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	pod := func(name string, labels, annotations map[string]string, containers ...string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations}}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "busybox"})
		}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("plc-gateway-1", nil, map[string]string{"kubectl.kubernetes.io/default-container": "plc"}, "sidecar", "plc")
	launcher := func(vm string) map[string]string {
		return map[string]string{"kubevirt.io": "virt-launcher", streams.LabelVMIName: vm, kube.LabelAppName: vm}
	}
	pod("virt-launcher-hmi-x2kq9", launcher("hmi"), nil, "compute", "guest-console-log")
	// Another VM whose name starts the same: not hmi's.
	pod("virt-launcher-hmi-old-5tq8z", launcher("hmi-old"), nil, "compute", "guest-console-log")

	src := PodLogSource(site.Clients(t))
	for _, tc := range []struct {
		name string
		want LogTarget
		err  string
	}{
		{"plc-gateway-1", LogTarget{Namespace: ns, Pod: "plc-gateway-1", Containers: []string{"sidecar", "plc"}, Container: "plc"}, ""},
		{"hmi", LogTarget{Namespace: ns, Pod: "virt-launcher-hmi-x2kq9", Containers: []string{"compute", "guest-console-log"}, Container: "guest-console-log"}, ""},
		{"historian", LogTarget{}, `no pod or app named "historian"`},
	} {
		got, err := src.Resolve(ctx, ns, tc.name, true)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("resolve %s: error %v, want one saying %q", tc.name, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("resolve %s: %v", tc.name, err)
		case tc.err == "" && (got.Pod != tc.want.Pod || got.Container != tc.want.Container || strings.Join(got.Containers, ",") != strings.Join(tc.want.Containers, ",")):
			t.Errorf("resolve %s = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
