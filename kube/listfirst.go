package kube

import (
	"context"
	"fmt"
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
// scanned for its kind once and decoded once. On a 3-node site of 10,000
// pods and 2,000 volumes, the console's CPU until its whole overview
// went from 2.1-2.5 s to 1.2 s with these kinds listed first (the
// built-in kinds streamed as before; docs/BENCHMARKS.md). The built-in
// kinds come as protobuf and keep the streaming list, which spares the
// API server a whole list in memory.
type listFirst struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported has client-go's reflector read with a
// LIST (k8s.io/client-go/util/watchlist).
func (listFirst) IsWatchListSemanticsUnSupported() bool { return true }

// newListFirstInformer is an informer of one kind over list and watch that
// reads its first state with a LIST (listFirst). Unlike the generated
// informers it keeps no index by namespace: its readers list the whole
// kind (Longhorn's objects live in one namespace), and the index held
// every key once more.
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
	return cache.NewSharedIndexInformer(listFirst{lw}, obj, 0, cache.Indexers{})
}

// NewLonghornInformers is a Longhorn informer factory over
// LonghornNamespace, trimmed (TrimForCache), whose informers of kinds
// (of *lhv1beta2.Volume, *lhv1beta2.Replica, *lhv1beta2.Engine) read their
// first state with a LIST (listFirst). Only those kinds are made: the
// factory starts every informer it holds, and a drain's watch has no use
// for the engines, the busiest of them. They are made before anyone asks
// the factory for them, so every Informer() and Lister() of those kinds
// gives these; another kind asked for later is the factory's own.
func NewLonghornInformers(c lhclientset.Interface, kinds ...runtime.Object) lhinformers.SharedInformerFactory {
	f := lhinformers.NewSharedInformerFactoryWithOptions(c, 0, lhinformers.WithNamespace(LonghornNamespace), lhinformers.WithTransform(TrimForCache))
	lh := c.LonghornV1beta2()
	for _, kind := range kinds {
		var informer cache.SharedIndexInformer
		switch kind.(type) {
		case *lhv1beta2.Volume:
			informer = newListFirstInformer(kind, lh.Volumes(LonghornNamespace).List, lh.Volumes(LonghornNamespace).Watch)
		case *lhv1beta2.Replica:
			informer = newListFirstInformer(kind, lh.Replicas(LonghornNamespace).List, lh.Replicas(LonghornNamespace).Watch)
		case *lhv1beta2.Engine:
			informer = newListFirstInformer(kind, lh.Engines(LonghornNamespace).List, lh.Engines(LonghornNamespace).Watch)
		default:
			panic(fmt.Sprintf("kube: no list-first Longhorn informer of %T", kind))
		}
		f.InformerFor(kind, func(lhclientset.Interface, time.Duration) cache.SharedIndexInformer { return informer })
	}
	return f
}
