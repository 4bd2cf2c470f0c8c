package kube

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
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
//
// Everything else stays: the screens, the detail views and the agent read
// labels, annotations, owner references, the pod spec (containers, volumes,
// tolerations, affinity) and every status condition. The objects are the
// informer's own, freshly decoded, so trimming them in place is safe.
func TrimForCache(obj any) (any, error) {
	switch o := obj.(type) {
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
