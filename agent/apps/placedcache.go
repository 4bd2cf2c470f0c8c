package apps

import (
	"context"
	"maps"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/sitecon/sitecon/kube"
)

// placedCache watches the objects sitecon laid out (by its managed-by label).
type placedCache struct {
	kinds     []schema.GroupVersionResource
	namespace dynamicinformer.DynamicSharedInformerFactory
	cluster   dynamicinformer.DynamicSharedInformerFactory
	informers map[schema.GroupVersionResource]cache.SharedIndexInformer
	// mu guards deleted, which the informers' handlers write.
	mu sync.Mutex
	// deleted is the last state of each object deleted since one of its
	// name was last added, by layout key: a takeover's mark
	// (AnnotationTakeover) is read from it when the object is gone.
	deleted map[string]*unstructured.Unstructured
	// changed wakes the placement.
	changed func()
}

// newPlacedCache watches sitecon's workloads and claims (VMs' only with
// KubeVirt) and storage classes, and its network attachments when
// watchNADs (the cluster serves them, and this identity may read them).
func newPlacedCache(dyn dynamic.Interface, hasKubeVirt, watchNADs bool, changed func()) *placedCache {
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = LabelManagedBy + "=" + FieldManager }
	c := &placedCache{
		namespace: dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, kube.AppNamespace, tweak),
		cluster:   dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, metav1.NamespaceAll, tweak),
		informers: map[schema.GroupVersionResource]cache.SharedIndexInformer{},
		deleted:   map[string]*unstructured.Unstructured{},
		changed:   changed,
	}
	c.kinds = []schema.GroupVersionResource{GVRDeployment, GVRPVC}
	if hasKubeVirt {
		c.kinds = append(c.kinds, GVRVMIRS, GVRVMI)
	}
	if watchNADs {
		c.kinds = append(c.kinds, GVRNAD)
	}
	for _, gvr := range c.kinds {
		inf := c.namespace.ForResource(gvr).Informer()
		_, _ = inf.AddEventHandler(c.handler(gvr, changed))
		c.informers[gvr] = inf
	}
	sc := c.cluster.ForResource(GVRStorageClass).Informer()
	_, _ = sc.AddEventHandler(c.handler(GVRStorageClass, changed))
	c.informers[GVRStorageClass] = sc
	return c
}

// handler calls changed on every event of gvr's objects, and keeps the
// last state of the deleted ones: the watch's delete event carries it even
// when the delete and what came before it arrive in one burst, between
// two of the writer's passes.
func (c *placedCache) handler(gvr schema.GroupVersionResource, changed func()) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				c.mu.Lock()
				delete(c.deleted, layoutKey(gvr, u.GetNamespace(), u.GetName()))
				c.mu.Unlock()
			}
			changed()
		},
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				c.mu.Lock()
				c.deleted[layoutKey(gvr, u.GetNamespace(), u.GetName())] = u
				c.mu.Unlock()
			}
			changed()
		},
	}
}

// lastDeleted is the last state of the object l would be written over, if
// it was deleted and none of its name made since (nil: none).
func (c *placedCache) lastDeleted(l Layout) *unstructured.Unstructured {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deleted[layoutKey(l.GVR, l.Namespace(), l.Name())]
}

// forgetDeleted drops the last states kept of what is not desired: the
// memory stays bounded by what is laid out.
func (c *placedCache) forgetDeleted(desired map[string]Layout) {
	c.mu.Lock()
	defer c.mu.Unlock()
	maps.DeleteFunc(c.deleted, func(key string, _ *unstructured.Unstructured) bool { _, ok := desired[key]; return !ok })
}

// start starts the watches, and wakes the placement once all have
// synced: the placement waits for that, and a kind whose first list comes
// last and holds nothing raises no event of its own.
func (c *placedCache) start(ctx context.Context) {
	c.namespace.Start(ctx.Done())
	c.cluster.Start(ctx.Done())
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), c.synced) {
			c.changed()
		}
	}()
}

// servesNADs says whether network attachments are watched, and so may be
// laid out.
func (c *placedCache) servesNADs() bool {
	_, ok := c.informers[GVRNAD]
	return ok
}

func (c *placedCache) synced() bool {
	for _, inf := range c.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

func (c *placedCache) workloadGVRs() []schema.GroupVersionResource {
	var out []schema.GroupVersionResource
	for _, gvr := range WorkloadGVRs {
		if _, ok := c.informers[gvr]; ok {
			out = append(out, gvr)
		}
	}
	return out
}

func (c *placedCache) get(gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	inf, ok := c.informers[gvr]
	if !ok {
		return nil
	}
	key := name
	if ns != "" {
		key = ns + "/" + name
	}
	obj, exists, err := inf.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}

func (c *placedCache) list(gvr schema.GroupVersionResource) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	inf, ok := c.informers[gvr]
	if !ok {
		return nil
	}
	for _, obj := range inf.GetStore().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	return out
}

// live is the object l would be written over, nil when there is none.
func (c *placedCache) live(l Layout) *unstructured.Unstructured {
	return c.get(l.GVR, l.Namespace(), l.Name())
}

// placedObject is one object sitecon laid out, with its resource.
type placedObject struct {
	GVR    schema.GroupVersionResource
	Object *unstructured.Unstructured
}

func (p placedObject) key() string {
	return layoutKey(p.GVR, p.Object.GetNamespace(), p.Object.GetName())
}

// workloads are the apps' workloads sitecon laid out, kind by kind.
func (c *placedCache) workloads() []placedObject {
	var out []placedObject
	for _, gvr := range c.workloadGVRs() {
		for _, obj := range c.list(gvr) {
			out = append(out, placedObject{GVR: gvr, Object: obj})
		}
	}
	return out
}

// workload is the object an app is laid out as, for Kubernetes Events.
func (c *placedCache) workload(uuid string) *unstructured.Unstructured {
	if c == nil {
		return nil
	}
	for _, gvr := range c.workloadGVRs() {
		for _, obj := range c.list(gvr) {
			if obj.GetLabels()[kube.LabelAppUUID] == uuid {
				return obj
			}
		}
	}
	return nil
}
