package kube

import (
	"context"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	lhclientset "github.com/longhorn/longhorn-manager/k8s/pkg/client/clientset/versioned"
	lhinformers "github.com/longhorn/longhorn-manager/k8s/pkg/client/informers/externalversions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// listFirst is a ListerWatcher whose informer reads its first state with
// one LIST, then watches from that list's resourceVersion, instead of
// client-go's streaming list (watch-list: the first state sent as one
// watch event per object, on by default since client-go v0.35).
//
// For the kinds the API server sends as JSON (Longhorn's and KubeVirt's
// custom resources: they have no protobuf) a streaming list costs the
// reader about twice the CPU: each event is framed, then scanned once to
// learn its kind and once more to decode it, where a LIST's body is
// scanned for its kind once and decoded once. Measured on a 10,000-pod,
// 2,000-volume site, the console's CPU until its whole overview went from
// 2.2 to 1.2 s with every kind read by LIST (docs/BENCHMARKS.md). The
// built-in kinds come as protobuf and keep the streaming list, which
// spares the API server a whole list in memory.
type listFirst struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported has client-go's reflector read with a
// LIST (k8s.io/client-go/util/watchlist).
func (listFirst) IsWatchListSemanticsUnSupported() bool { return true }

// newListFirstInformer is an informer of one kind over list and watch,
// indexed by namespace as the generated informers are, that reads its
// first state with a LIST (listFirst).
func newListFirstInformer[L runtime.Object](obj runtime.Object,
	list func(context.Context, metav1.ListOptions) (L, error),
	watchFunc func(context.Context, metav1.ListOptions) (watch.Interface, error),
) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := list(ctx, o)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		WatchFuncWithContext: watchFunc,
	}
	return cache.NewSharedIndexInformer(listFirst{lw}, obj, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// newLonghornInformers is a Longhorn informer factory over
// LonghornNamespace, trimmed (TrimForCache), whose volume, replica and
// engine informers read their first state with a LIST (listFirst): the
// factory's own informers of those kinds are replaced by these before
// anyone asks for them, so every Informer() and Lister() of the three
// gives these.
func newLonghornInformers(c lhclientset.Interface) lhinformers.SharedInformerFactory {
	f := lhinformers.NewSharedInformerFactoryWithOptions(c, 0, lhinformers.WithNamespace(LonghornNamespace), lhinformers.WithTransform(TrimForCache))
	lh := c.LonghornV1beta2()
	f.InformerFor(&lhv1beta2.Volume{}, func(lhclientset.Interface, time.Duration) cache.SharedIndexInformer {
		return newListFirstInformer(&lhv1beta2.Volume{}, lh.Volumes(LonghornNamespace).List, lh.Volumes(LonghornNamespace).Watch)
	})
	f.InformerFor(&lhv1beta2.Replica{}, func(lhclientset.Interface, time.Duration) cache.SharedIndexInformer {
		return newListFirstInformer(&lhv1beta2.Replica{}, lh.Replicas(LonghornNamespace).List, lh.Replicas(LonghornNamespace).Watch)
	})
	f.InformerFor(&lhv1beta2.Engine{}, func(lhclientset.Interface, time.Duration) cache.SharedIndexInformer {
		return newListFirstInformer(&lhv1beta2.Engine{}, lh.Engines(LonghornNamespace).List, lh.Engines(LonghornNamespace).Watch)
	})
	return f
}
