package kube

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TrimForCache is the transform every informer of sitecon's applies
// before an object enters its cache: it drops what no reader of the cache
// uses, so the cache holds less and the collector has less to walk.
//
//   - metadata.managedFields (who last wrote which field, for server-side
//     apply): often the largest part of a pod; nothing in sitecon reads it
//     from a cache (the support bundle LISTs afresh and drops it too).
//   - a Node's status.images (every image the kubelet holds, with its
//     digests and size): nothing in sitecon shows or decides on them.
//   - a pod outside the namespaces sitecon shows (Namespaces) is kept only
//     as what it is counted by (CountedPod): on most sites those are nearly
//     all of the pods, and every reader only counts them.
//
// Everything else stays: the screens, the detail views and the agent read
// labels, annotations, owner references, the pod spec (containers, volumes,
// tolerations, affinity) and every status condition of the pods they show.
// The objects are the informer's own, freshly decoded, so trimming them in
// place is safe.
func TrimForCache(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		if !ShownNamespace(o.Namespace) {
			return CountedPod(o), nil
		}
	case *corev1.Node:
		o.Status.Images = nil
	case cache.DeletedFinalStateUnknown:
		return obj, nil
	}
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

var _ cache.TransformFunc = TrimForCache

// ShownNamespace says whether sitecon shows the pods of namespace one by
// one (the pods screen, namespace health, apps, gating, failover, fencing,
// logs); a pod anywhere else is only counted.
func ShownNamespace(namespace string) bool { return slices.Contains(Namespaces, namespace) }

// CountedPod is p as the cache keeps a pod outside the shown namespaces: a
// new, small object with only what the node figures (pods, pods leaving,
// CPU and memory requested), the doctor's count of pods leaving a node and
// the informer's own bookkeeping read. On a site of 10,000 such pods the
// whole pod (its containers' env, mounts and probes, its volumes,
// tolerations, annotations and every container's status) was most of
// the cache; none of it was ever read.
//
// Kept: name, namespace, UID, resourceVersion, creation and deletion
// times; the node; the name and resource requests of each container and
// init container that requests any (one that requests nothing adds
// nothing to a sum or a maximum); the phase. Not kept, and so not to be
// read of a pod outside Namespaces from a cache: everything else, its
// labels, owners and conditions included (a write of only those, as the
// node lifecycle controller marks a lost node's pods not ready, then
// changes nothing the cache holds and wakes no reader). A reader that
// needs a whole pod (logs, a drain's evictions, the bundle) reads it from
// the API server.
func CountedPod(p *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
			DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds,
		},
		Spec: corev1.PodSpec{
			NodeName:       p.Spec.NodeName,
			Containers:     requestsOnly(p.Spec.Containers),
			InitContainers: requestsOnly(p.Spec.InitContainers),
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
}

// requestsOnly is the name and resource requests of each container that
// requests any; nil when none does.
func requestsOnly(cs []corev1.Container) []corev1.Container {
	var out []corev1.Container
	for i := range cs {
		if len(cs[i].Resources.Requests) > 0 {
			out = append(out, corev1.Container{Name: cs[i].Name, Resources: corev1.ResourceRequirements{Requests: cs[i].Resources.Requests}})
		}
	}
	return out
}

// countedPodUnchanged says whether an update of a pod outside the shown
// namespaces changed nothing it is counted by: its status and its
// containers' states move often (restarts, probes, IPs) and no reader
// shows them, so such a write wakes nobody.
func countedPodUnchanged(old, next *corev1.Pod) bool {
	if ShownNamespace(next.Namespace) || ShownNamespace(old.Namespace) {
		return false
	}
	// Shallow copies: only the resourceVersion differs in them, and the
	// busiest event path of a large site need not copy every pod deeply.
	a, b := *old, *next
	a.ResourceVersion, b.ResourceVersion = "", ""
	return apiequality.Semantic.DeepEqual(&a, &b)
}
