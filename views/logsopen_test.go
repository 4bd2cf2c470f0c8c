package views

import (
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/test/sitebox"
)

// The site starts only for a test that asks for it (sitebox.Shared).
func TestMain(m *testing.M) { os.Exit(sitebox.RunMain(m)) }

// The pod a logs view reads, found through sitebox's real API server: a
// pod by name with its containers (its default-container annotation
// honoured); a VM app's virt-launcher pod, on its guest console; and a
// clear error for what is not there.
func TestResolveLogTargetOnSitebox(t *testing.T) {
	site := sitebox.Shared(t)
	cs := site.Clients(t).Core
	ctx := t.Context()
	const ns = "logs-resolve"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	pod := func(name string, labels, annotations map[string]string, containers ...string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, Annotations: annotations}}
		for _, c := range containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "busybox"})
		}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod("plc-gateway-1", nil, map[string]string{defaultContainerAnnotation: "plc"}, "sidecar", "plc")
	pod("virt-launcher-hmi-x2kq9", map[string]string{"vm.kubevirt.io/name": "hmi"}, nil, "compute", "guest-console-log")
	// Another VM whose name starts the same: not hmi's.
	pod("virt-launcher-hmi-old-5tq8z", map[string]string{"vm.kubevirt.io/name": "hmi-old"}, nil, "compute", "guest-console-log")

	for _, tc := range []struct {
		name string
		app  bool
		want LogTarget
		err  string
	}{
		{"plc-gateway-1", false, LogTarget{Namespace: ns, Pod: "plc-gateway-1", Containers: []string{"sidecar", "plc"}, Container: "plc"}, ""},
		{"plc-gateway-1", true, LogTarget{Namespace: ns, Pod: "plc-gateway-1", Containers: []string{"sidecar", "plc"}, Container: "plc"}, ""},
		{"hmi", true, LogTarget{Namespace: ns, Pod: "virt-launcher-hmi-x2kq9", Containers: []string{"compute", "guest-console-log"}, Container: "guest-console-log"}, ""},
		{"hmi", false, LogTarget{}, `pods "hmi" not found`},
		{"historian", true, LogTarget{}, "logs-resolve/historian has no pod"},
	} {
		got, err := resolveLogTarget(ctx, cs, ns, tc.name, tc.app)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("resolve %s (app %v): error %v, want one saying %q", tc.name, tc.app, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("resolve %s (app %v): %v", tc.name, tc.app, err)
		case tc.err == "" && (got.Pod != tc.want.Pod || got.Container != tc.want.Container || strings.Join(got.Containers, ",") != strings.Join(tc.want.Containers, ",")):
			t.Errorf("resolve %s (app %v) = %+v, want %+v", tc.name, tc.app, got, tc.want)
		}
	}
}

// pickLauncher: during a migration a VM has two launcher pods; the one
// running and not going away is read, else the newest.
func TestPickLauncher(t *testing.T) {
	at := func(name string, phase corev1.PodPhase, age time.Duration, deleting bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(now.Add(-age))}, Status: corev1.PodStatus{Phase: phase}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: now}
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		want string
	}{
		{"none", nil, ""},
		{"the running one", []corev1.Pod{at("virt-launcher-hmi-a", corev1.PodPending, time.Minute, false), at("virt-launcher-hmi-b", corev1.PodRunning, time.Hour, false)}, "virt-launcher-hmi-b"},
		{"not the one going away", []corev1.Pod{at("virt-launcher-hmi-a", corev1.PodRunning, time.Hour, true), at("virt-launcher-hmi-b", corev1.PodRunning, time.Minute, false)}, "virt-launcher-hmi-b"},
		{"the newest of the running", []corev1.Pod{at("virt-launcher-hmi-b", corev1.PodRunning, time.Minute, false), at("virt-launcher-hmi-a", corev1.PodRunning, time.Hour, false)}, "virt-launcher-hmi-b"},
		{"another VM's", []corev1.Pod{at("virt-launcher-other-a", corev1.PodRunning, time.Minute, false)}, ""},
	} {
		got := ""
		if p := pickLauncher(tc.pods, "hmi"); p != nil {
			got = p.Name
		}
		if got != tc.want {
			t.Errorf("%s: picked %q, want %q", tc.name, got, tc.want)
		}
	}
}
