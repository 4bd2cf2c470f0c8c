package streams

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
)

func logPod(name string, labels map[string]string, phase corev1.PodPhase, age time.Duration, containers ...string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: kube.AppNamespace, Labels: labels,
		CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).Add(-age)),
	}, Status: corev1.PodStatus{Phase: phase}}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
	}
	return p
}

func TestPickAppPod(t *testing.T) {
	app := func(name string) map[string]string {
		return map[string]string{kube.LabelAppName: name, kube.LabelAppUUID: "uuid-" + name}
	}
	vm := func(name string) map[string]string {
		l := app(name)
		l["kubevirt.io"] = "virt-launcher"
		l[LabelVMIName] = name + "-5b0f7c1evxklh"
		return l
	}
	going := logPod("plc-old", app("plc"), corev1.PodRunning, time.Hour, "main")
	going.DeletionTimestamp = ptr.To(metav1.Now())
	pods := []corev1.Pod{
		going,
		logPod("plc-new-pending", app("plc"), corev1.PodPending, 0, "main"),
		logPod("plc-running", app("plc"), corev1.PodRunning, time.Minute, "main"),
		logPod("virt-launcher-hmi-abcde", vm("hmi"), corev1.PodRunning, time.Minute, "compute", GuestConsoleLogContainer),
		logPod("bare", nil, corev1.PodRunning, time.Minute, "main"),
	}
	for _, tc := range []struct {
		name, want, err string
	}{
		{name: "plc", want: "plc-running"},
		{name: "uuid-plc", want: "plc-running"},
		{name: "hmi", want: "virt-launcher-hmi-abcde"},
		// Issue 38: the apps screen's l names a VM app by its VMI.
		{name: "hmi-5b0f7c1evxklh", want: "virt-launcher-hmi-abcde"},
		{name: "bare", want: "bare"},
		{name: "nope", err: `no pod or app named "nope" (apps: bare, hmi, plc)`},
	} {
		got, err := PickAppPod(pods, tc.name)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: %v, want error %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got.Name != tc.want {
			t.Errorf("%s: %v %v, want %s", tc.name, got, err, tc.want)
		}
	}
	if _, err := PickAppPod(nil, "x"); err == nil || err.Error() != `no pod or app named "x"` {
		t.Errorf("no pods: %v", err)
	}
}

func TestLogTargetOf(t *testing.T) {
	vmLabels := map[string]string{"kubevirt.io": "virt-launcher", kube.LabelAppName: "hmi", kube.LabelAppUUID: "u-1"}
	withDefault := logPod("multi", nil, corev1.PodRunning, 0, "a", "b")
	withDefault.Annotations = map[string]string{defaultContainerAnnotation: "b"}
	for _, tc := range []struct {
		what      string
		pod       corev1.Pod
		container string
		want      string
		why       string // a part of Why; "" means Why is empty
		err       string
	}{
		{what: "one container", pod: logPod("p", nil, corev1.PodRunning, 0, "main"), want: "main"},
		{what: "named", pod: logPod("p", nil, corev1.PodRunning, 0, "a", "b"), container: "b", want: "b"},
		{what: "named, absent", pod: logPod("p", nil, corev1.PodRunning, 0, "a", "b"), container: "c", err: `has no container "c" (it has a, b)`},
		{what: "several: the first, said", pod: logPod("p", nil, corev1.PodRunning, 0, "a", "b"), want: "a", why: "the first of a, b"},
		{what: "several: the pod's default", pod: withDefault, want: "b", why: "default"},
		{what: "VM: its console log", pod: logPod("virt-launcher-hmi-x", vmLabels, corev1.PodRunning, 0, "compute", GuestConsoleLogContainer), want: GuestConsoleLogContainer, why: "serial console"},
		{what: "VM without a console log: compute, said", pod: logPod("virt-launcher-hmi-x", vmLabels, corev1.PodRunning, 0, "compute"), want: "compute", why: "no guest-console-log"},
		{what: "VM, compute named", pod: logPod("virt-launcher-hmi-x", vmLabels, corev1.PodRunning, 0, "compute", GuestConsoleLogContainer), container: "compute", want: "compute"},
	} {
		got, err := LogTargetOf(&tc.pod, tc.container)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want error with %q", tc.what, err, tc.err)
			}
			continue
		}
		if err != nil || got.Container != tc.want || (tc.why == "") != (got.Why == "") || !strings.Contains(got.Why, tc.why) {
			t.Errorf("%s: %+v %v, want container %s, why with %q", tc.what, got, err, tc.want, tc.why)
		}
	}
	vmTarget, _ := LogTargetOf(&[]corev1.Pod{logPod("virt-launcher-hmi-x", vmLabels, corev1.PodRunning, 0, "compute")}[0], "")
	if !vmTarget.VM || vmTarget.App != "hmi" || vmTarget.AppUUID != "u-1" {
		t.Errorf("a VM's launcher: %+v, want VM app hmi (u-1)", vmTarget)
	}
}

func TestLogOptionsToAPI(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	o := LogOptions{Since: 1500 * time.Millisecond, Tail: ptr.To[int64](0), Follow: true}.PodLogOptions("c")
	if *o.SinceSeconds != 2 || *o.TailLines != 0 || !o.Follow || o.Container != "c" || o.SinceTime != nil {
		t.Errorf("since 1.5s, tail 0: %+v", o)
	}
	o = LogOptions{Since: time.Minute, SinceTime: &at}.PodLogOptions("c")
	if o.SinceSeconds != nil || !o.SinceTime.Time.Equal(at) || o.TailLines != nil {
		t.Errorf("since time wins, no tail: %+v", o)
	}
}
