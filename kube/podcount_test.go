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
// deletes, a delete the informer only learnt of on a relist, with its last
// state or without any) are at every step what counting the pods listed
// gives.
func TestPodCountsFollowTheInformersEvents(t *testing.T) {
	pod := func(ns, name, node string, cpu string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if cpu != "" {
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		}
		return p
	}
	listed := map[string]*corev1.Pod{}
	counts := newPodCounts()
	check := func(step string) {
		t.Helper()
		var pods []*corev1.Pod
		for _, p := range listed {
			pods = append(pods, p)
		}
		want := NodePodCounts(Data{Pods: pods})
		got := NodePodCounts(Data{CountedPods: counts.byNode})
		if !maps.Equal(got, want) {
			t.Errorf("%s: the kept counts are %v, counting the pods gives %v", step, got, want)
		}
	}
	// As the informer holds them: through the cache's transform.
	add := func(p *corev1.Pod) { counts.set(NewCountedPod(p)); listed[p.Name] = p }
	update := add
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

	counts.gone(NewCountedPod(listed["web-3"]))
	delete(listed, "web-3")
	check("a pod deleted")
	counts.gone(cache.DeletedFinalStateUnknown{Key: "shop-floor/web-4", Obj: NewCountedPod(listed["web-4"])})
	delete(listed, "web-4")
	check("a pod whose deletion a relist found")
	// client-go may report such a deletion with no object: what was
	// counted for the key goes all the same.
	counts.gone(cache.DeletedFinalStateUnknown{Key: "shop-floor/web-5"})
	delete(listed, "web-5")
	check("a pod whose deletion a relist found, without its last state")
	// The same pod added twice (a relist's replace) counts once.
	add(listed["web-0"])
	check("a pod seen again unchanged")
	for name, p := range listed {
		counts.gone(NewCountedPod(p))
		delete(listed, name)
	}
	if len(counts.byNode) != 0 || len(counts.byPod) != 0 {
		t.Errorf("with every pod gone the counts keep %v (%d pods)", counts.byNode, len(counts.byPod))
	}

	// A pod of a shown namespace is listed, not counted here.
	counts.set(NewCountedPod(pod("kube-system", "coredns", "node-a", "100m")))
	if len(counts.byNode) != 0 {
		t.Errorf("a kube-system pod was counted as one outside the shown namespaces: %v", counts.byNode)
	}
}
