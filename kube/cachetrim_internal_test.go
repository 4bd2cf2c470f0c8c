package kube

import (
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the pod informer's handler takes for a quiet write of a pod outside
// the shown namespaces: one that changes nothing the cache keeps of it
// (CountedPod) wakes no reader; one that changes what it is counted by
// does, and every write of a shown namespace's pod does.
func TestCountedPodUnchanged(t *testing.T) {
	base := func(ns string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", ResourceVersion: "10", Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "registry.local/web:1"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	cases := []struct {
		name   string
		ns     string
		change func(p *corev1.Pod)
		quiet  bool
	}{
		{"a new resourceVersion only", "shop-floor", func(*corev1.Pod) {}, true},
		{"annotations", "shop-floor", func(p *corev1.Pod) { p.Annotations = map[string]string{"shift": "night"} }, true},
		{"a container restarted", "shop-floor", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", RestartCount: 4}}
		}, true},
		{"a new pod IP", "shop-floor", func(p *corev1.Pod) { p.Status.PodIP = "10.42.0.7" }, true},
		{"another image", "shop-floor", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "registry.local/web:2" }, true},
		{"finished", "shop-floor", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, false},
		{"failed", "shop-floor", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }, false},
		// Pending and Running count alike: a pod starting on its node
		// changes no figure.
		{"pending after running", "shop-floor", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }, true},
		{"the node", "shop-floor", func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }, false},
		{"terminating", "shop-floor", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1_800_000_000, 0)} }, false},
		{"not ready (a lost node's pods)", "shop-floor", func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }, true},
		{"a label", "shop-floor", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "web", "shift": "night"} }, true},
		{"a container's requests resized", "shop-floor", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}
		}, false},
		{"annotations of a shown namespace's pod", "kube-system", func(p *corev1.Pod) { p.Annotations = map[string]string{"shift": "night"} }, false},
		{"a new resourceVersion of a shown namespace's pod", "kube-system", func(*corev1.Pod) {}, false},
	}
	for _, c := range cases {
		// As the informer holds them: both through the transform.
		old := base(c.ns)
		next := base(c.ns)
		next.ResourceVersion = "11"
		c.change(next)
		oldCached, _ := TrimForCache(old)
		nextCached, _ := TrimForCache(next)
		if got := quietPodWrite(oldCached, nextCached); got != c.quiet {
			t.Errorf("%s: quiet %v, want %v", c.name, got, c.quiet)
		}
	}
}

// A counted pod is what the cache holds of nearly every pod of a large
// site: a field added to it is paid ten thousand times. It stays the size
// of its four strings and its count.
func TestCountedPodStaysSmall(t *testing.T) {
	if size := unsafe.Sizeof(CountedPod{}); size > 96 {
		t.Errorf("a counted pod is %d bytes, over 96", size)
	}
}
