package kube

import (
	"slices"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
//   - a Longhorn object's labels, annotations, owner references and
//     finalizers (they repeat its spec: the volume, the node), a volume's
//     list of the pods using it, and an engine's records of its snapshots,
//     backups, restores, purges, clones and replicas' transitions (a real
//     engine carries one per snapshot of its volume). Readers read the
//     volumes, replicas and engines by their spec and status, and a
//     reader that selects replicas by label (the failover guard) asks the
//     API server. At 2,000 volumes (10,000 Longhorn objects) the caches'
//     live heap went from 27-29 to 23-24 MB.
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
			return NewCountedPod(o), nil
		}
	case *corev1.Node:
		o.Status.Images = nil
	case *lhv1beta2.Volume:
		trimLonghornMeta(&o.ObjectMeta)
		o.Status.KubernetesStatus.WorkloadsStatus = nil
	case *lhv1beta2.Replica:
		trimLonghornMeta(&o.ObjectMeta)
	case *lhv1beta2.Engine:
		trimLonghornMeta(&o.ObjectMeta)
		st := &o.Status
		st.ReplicaTransitionTimeMap, st.BackupStatus, st.RestoreStatus, st.PurgeStatus, st.CloneStatus, st.Snapshots = nil, nil, nil, nil, nil, nil
	case *CountedPod, cache.DeletedFinalStateUnknown:
		// A transform may be handed what it already made (client-go
		// asks transforms to be idempotent).
		return obj, nil
	}
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// trimLonghornMeta drops what no reader reads of a Longhorn object's
// metadata (TrimForCache).
func trimLonghornMeta(m *metav1.ObjectMeta) {
	m.Labels, m.Annotations, m.OwnerReferences, m.Finalizers = nil, nil, nil, nil
}

var _ cache.TransformFunc = TrimForCache

// ShownNamespace says whether sitecon shows the pods of namespace one by
// one (the pods screen, namespace health, apps, gating, failover, fencing,
// logs); a pod anywhere else is only counted.
func ShownNamespace(namespace string) bool { return slices.Contains(Namespaces, namespace) }

// CountedPod is how a cache keeps a pod outside the shown namespaces
// (Namespaces): its key and resourceVersion, for the informer's own
// bookkeeping, and what it adds to its node's figures (the pods, the pods
// leaving, the CPU and memory requested), which is all any reader reads of
// it. On a site of 10,000 such pods the whole pod (its containers' env,
// mounts and probes, its volumes, tolerations, annotations and every
// container's status) was most of the cache, and even a trimmed
// corev1.Pod is a 1,240-byte struct: this one is 96 bytes.
//
// A reader that needs a whole pod outside Namespaces (logs, a drain's
// evictions, the bundle) reads it from the API server.
type CountedPod struct {
	Name, Namespace, ResourceVersion string
	// Node is where the pod counts; "" for a pod that counts for no node
	// (not placed, or finished).
	Node string
	// Count is what the pod adds to Node.
	Count NodePodCount
}

// NewCountedPod is p as a cache keeps it when p is outside the shown
// namespaces.
func NewCountedPod(p *corev1.Pod) *CountedPod {
	node, count, _ := podCount(p)
	return &CountedPod{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion, Node: node, Count: count}
}

// GetObjectMeta is what an informer keys, indexes and versions a counted
// pod by (meta.Accessor): a fresh copy on each call, so the 232-byte
// ObjectMeta is not kept beside every counted pod. Setting a field on it
// changes nothing: no informer writes the objects it caches. The copy is
// garbage at once: an informer asks a few times per event (its key, its
// index, its version), a few hundred bytes each, small beside decoding
// the event.
func (p *CountedPod) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion}
}

// GetObjectKind and DeepCopyObject make a counted pod a runtime.Object,
// for the parts of client-go that take a cached object as one (its
// watch-list consistency check, its mutation detector).
func (p *CountedPod) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject: see GetObjectKind.
func (p *CountedPod) DeepCopyObject() runtime.Object { c := *p; return &c }

var (
	_ metav1.ObjectMetaAccessor = (*CountedPod)(nil)
	_ runtime.Object            = (*CountedPod)(nil)
)
