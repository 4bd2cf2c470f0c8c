package kube

import (
	"fmt"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// The counts the snapshot keeps from the informer's events (adds, updates
// that move a pod to another node, finish it or start its deletion,
// deletes, and a delete the informer only learnt of on a relist) are at
// every step what counting the pods listed gives.
func TestPodCountsFollowTheInformersEvents(t *testing.T) {
	pod := func(ns, name, node string, cpu string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if cpu != "" {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		}
		return CountedPod(p)
	}
	listed := map[string]*corev1.Pod{}
	counts := podCounts{}
	check := func(step string) {
		t.Helper()
		var pods []*corev1.Pod
		for _, p := range listed {
			pods = append(pods, p)
		}
		want := NodePodCounts(Data{Pods: pods})
		got := NodePodCounts(Data{CountedPods: counts})
		if !maps.Equal(got, want) {
			t.Errorf("%s: the kept counts are %v, counting the pods gives %v", step, got, want)
		}
	}
	add := func(p *corev1.Pod) { counts.add(p, +1); listed[p.Name] = p }
	update := func(p *corev1.Pod) { counts.add(listed[p.Name], -1); counts.add(p, +1); listed[p.Name] = p }
	for i := range 6 {
		add(pod("shop-floor", fmt.Sprint("web-", i), fmt.Sprintf("node-%c", 'a'+i%3), "250m"))
	}
	add(pod("shop-floor", "unplaced", "", "1"))
	check("after the adds")

	moved := pod("shop-floor", "web-0", "node-c", "500m")
	update(moved)
	check("a pod placed on another node with another request")
	finished := pod("shop-floor", "web-1", "node-b", "250m")
	finished.Status.Phase = corev1.PodSucceeded
	update(finished)
	check("a pod finished")
	leaving := pod("shop-floor", "web-2", "node-c", "250m")
	leaving.DeletionTimestamp = &metav1.Time{Time: time.Unix(1_800_000_000, 0)}
	update(leaving)
	check("a pod terminating")

	counts.add(listed["web-3"], -1)
	delete(listed, "web-3")
	check("a pod deleted")
	counts.add(cache.DeletedFinalStateUnknown{Key: "shop-floor/web-4", Obj: listed["web-4"]}, -1)
	delete(listed, "web-4")
	check("a pod whose deletion a relist found")
	for name, p := range listed {
		counts.add(p, -1)
		delete(listed, name)
	}
	if len(counts) != 0 {
		t.Errorf("with every pod gone the counts keep %v", map[string]NodePodCount(counts))
	}

	// A pod of a shown namespace is listed, not counted here.
	counts.add(pod("kube-system", "coredns", "node-a", "100m"), +1)
	if len(counts) != 0 {
		t.Errorf("a kube-system pod was counted as one outside the shown namespaces: %v", map[string]NodePodCount(counts))
	}
}
