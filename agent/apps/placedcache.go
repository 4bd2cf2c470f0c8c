package apps

import (
	"context"

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
}

func newPlacedCache(dyn dynamic.Interface, hasKubeVirt bool, changed func()) *placedCache {
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = LabelManagedBy + "=" + FieldManager }
	c := &placedCache{
		namespace: dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, kube.AppNamespace, tweak),
		cluster:   dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, metav1.NamespaceAll, tweak),
		informers: map[schema.GroupVersionResource]cache.SharedIndexInformer{},
	}
	c.kinds = []schema.GroupVersionResource{GVRDeployment, GVRPVC}
	if hasKubeVirt {
		c.kinds = append(c.kinds, GVRVMIRS, GVRVMI)
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { changed() }, UpdateFunc: func(any, any) { changed() }, DeleteFunc: func(any) { changed() },
	}
	for _, gvr := range c.kinds {
		inf := c.namespace.ForResource(gvr).Informer()
		_, _ = inf.AddEventHandler(handler)
		c.informers[gvr] = inf
	}
	sc := c.cluster.ForResource(GVRStorageClass).Informer()
	_, _ = sc.AddEventHandler(handler)
	c.informers[GVRStorageClass] = sc
	return c
}

func (c *placedCache) start(ctx context.Context) {
	c.namespace.Start(ctx.Done())
	c.cluster.Start(ctx.Done())
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
	for _, obj := range c.informers[gvr].GetStore().List() {
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
