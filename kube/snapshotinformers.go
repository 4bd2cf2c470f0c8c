package kube

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	kvv1 "kubevirt.io/api/core/v1"
)

// discover asks the API server which optional APIs (Longhorn, KubeVirt) exist,
// so an informer is never started for a resource that is not there (it would
// never sync).
func (s *Snapshot) discover() error {
	disc := s.clients.Core.Discovery()
	info, err := disc.ServerVersion()
	if err != nil {
		return unreachable(s.clients.Config.Host, err)
	}
	has := func(groupVersion, resource string) (bool, error) {
		list, err := disc.ServerResourcesForGroupVersion(groupVersion)
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("discovery of %s: %w", groupVersion, err)
		}
		for _, r := range list.APIResources {
			if r.Name == resource {
				return true, nil
			}
		}
		return false, nil
	}
	lh, err := has(lhv1beta2.SchemeGroupVersion.String(), "volumes")
	if err != nil {
		return err
	}
	kv, err := has(kvv1.SchemeGroupVersion.String(), "virtualmachineinstances")
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.hasLonghorn, s.hasKubeVirt, s.serverVersion = lh, kv, info.GitVersion
	s.mu.Unlock()
	return nil
}

func (s *Snapshot) startInformers(ctx context.Context) {
	s.makeInformers()
	s.runInformers(ctx)
}

// makeInformers makes the informers of every kind read, with their
// handlers, and keeps them in kinds; runInformers starts them. A test
// waits on them before their first list.
func (s *Snapshot) makeInformers() {
	c := s.clients
	s.core = informers.NewSharedInformerFactoryWithOptions(c.Core, 0, informers.WithTransform(TrimForCache))
	// Kubelet leases in kube-node-lease renew every few seconds per node and
	// say nothing the Node objects do not: leave them out of the watch.
	s.leases = informers.NewSharedInformerFactoryWithOptions(c.Core, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = "metadata.namespace!=" + corev1.NamespaceNodeLease
		}), informers.WithTransform(TrimForCache))
	s.appConfig = informers.NewSharedInformerFactoryWithOptions(c.Core, 0, informers.WithNamespace(AppNamespace), informers.WithTransform(TrimForCache))

	pods := s.core.Core().V1().Pods().Informer()
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.trackPod(obj) },
		UpdateFunc: func(_, obj any) { s.trackPod(obj) },
		DeleteFunc: func(obj any) { s.forgetPod(obj) },
	})
	watched := []cache.SharedIndexInformer{
		s.core.Core().V1().Nodes().Informer(),
		pods,
		s.leases.Coordination().V1().Leases().Informer(),
		s.appConfig.Core().V1().ConfigMaps().Informer(),
	}
	if !s.withoutEvents {
		watched = append(watched, s.core.Core().V1().Events().Informer())
	}
	s.mu.Lock()
	hasLonghorn, hasKubeVirt := s.hasLonghorn, s.hasKubeVirt
	s.mu.Unlock()
	var volumes, replicas, engines cache.SharedIndexInformer
	if hasLonghorn {
		s.longhorn = NewLonghornInformers(c.Longhorn, &lhv1beta2.Volume{}, &lhv1beta2.Replica{}, &lhv1beta2.Engine{})
		// Each Longhorn event is counted (Data.LonghornVersion) in the
		// handler that then wakes the readers, not in another: a reader
		// woken by it must read the new count.
		volumes = s.longhorn.Longhorn().V1beta2().Volumes().Informer()
		_, _ = volumes.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.trackRobustness(obj); s.longhornEvent() },
			UpdateFunc: func(_, obj any) { s.trackRobustness(obj); s.longhornEvent() },
			DeleteFunc: func(obj any) { s.forgetRobustness(obj); s.longhornEvent() },
		})
		replicas = s.longhorn.Longhorn().V1beta2().Replicas().Informer()
		_, _ = replicas.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { s.longhornEvent() },
			UpdateFunc: func(any, any) { s.longhornEvent() },
			DeleteFunc: func(any) { s.longhornEvent() },
		})
		engines = s.longhorn.Longhorn().V1beta2().Engines().Informer()
		watched = append(watched, volumes, replicas, engines)
	}
	if hasKubeVirt {
		// KubeVirt ships no generated informers: build one from the typed client.
		vmis := c.KubeVirt.KubevirtV1().VirtualMachineInstances(metav1.NamespaceAll)
		// JSON, like Longhorn's kinds: read first with a LIST (listFirst).
		s.vmis = newListFirstInformer(&kvv1.VirtualMachineInstance{}, vmis.List, vmis.Watch)
		_ = s.vmis.SetTransform(TrimForCache)
		_, _ = s.vmis.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.trackVMI(obj) },
			UpdateFunc: func(_, obj any) { s.trackVMI(obj) },
			DeleteFunc: func(obj any) { s.forgetVMI(obj) },
		})
		watched = append(watched, s.vmis)
	}
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.sawEvent(); s.notify() },
		UpdateFunc: func(any, any) { s.sawEvent(); s.notify() },
		DeleteFunc: func(any) { s.sawEvent(); s.notify() },
	}
	leases := s.leases.Coordination().V1().Leases().Informer()
	kinds := s.readKinds()
	kindOf := make(map[cache.SharedIndexInformer]string, len(kinds))
	for kind, inf := range kinds {
		kindOf[inf] = kind
	}
	for _, inf := range watched {
		kind := kindOf[inf]
		_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			s.markError(err)
			// Kept by kind too: the health's last error is cleared by
			// the next request that succeeds (another kind's, a probe).
			s.mu.Lock()
			s.kindErrors[kind] = err.Error()
			s.mu.Unlock()
		})
		if inf == leases || inf == volumes || inf == replicas || inf == engines || inf == pods {
			continue
		}
		_, _ = inf.AddEventHandler(notify)
	}
	// A lease holder renews every few seconds and says nothing new: only a
	// change of holder (or of its terms) is a change. Expiry, which no event
	// announces, is a time the reader waits for (NextLeaseExpiry).
	// A renewal is still a watch event: proof the API server serves.
	_, _ = leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { s.sawEvent(); s.notify() },
		UpdateFunc: func(old, obj any) {
			s.sawEvent()
			o, ok1 := old.(*coordinationv1.Lease)
			n, ok2 := obj.(*coordinationv1.Lease)
			if ok1 && ok2 && LeaseRenewalOnly(o, n) {
				return
			}
			s.notify()
		},
		DeleteFunc: func(any) { s.sawEvent(); s.notify() },
	})
	// A pod outside the shown namespaces is kept only as what it is
	// counted by (CountedPod): its status writes (probes, restarts, IPs)
	// change nothing any reader uses and wake nobody. Its count is kept by
	// this handler, which then wakes the readers it wakes: such a reader
	// reads the pod counted.
	s.podCounting, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.podEvent(nil, obj, false) },
		UpdateFunc: func(old, obj any) { s.podEvent(old, obj, false) },
		DeleteFunc: func(obj any) { s.podEvent(nil, obj, true) },
	})
	// Longhorn rewrites an engine's status as its replicas' addresses,
	// modes, snapshots and sizes move (every few seconds per volume on a
	// busy site): only a change of a rebuild's progress is something shown.
	// Without this every such write re-derived the whole cluster in every
	// reader, per volume, while nothing on screen changed.
	if engines != nil {
		_, _ = engines.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { s.longhornEvent() },
			UpdateFunc: func(old, obj any) {
				s.sawEvent()
				o, ok1 := old.(*lhv1beta2.Engine)
				n, ok2 := obj.(*lhv1beta2.Engine)
				if ok1 && ok2 && maps.Equal(EngineRebuilds(o), EngineRebuilds(n)) {
					// Nothing a volume's status reads changed: not
					// counted either, or Longhorn's engine writes would
					// have every reader derive every volume again.
					return
				}
				s.longhornChanged()
				s.notify()
			},
			DeleteFunc: func(any) { s.longhornEvent() },
		})
	}
	var podCountsSynced func() bool
	if s.podCounting != nil {
		podCountsSynced = s.podCounting.HasSynced
	}
	s.mu.Lock()
	s.kinds, s.podCountsSynced = kinds, podCountsSynced
	s.mu.Unlock()
}

func (s *Snapshot) runInformers(ctx context.Context) {
	s.core.Start(ctx.Done())
	s.leases.Start(ctx.Done())
	s.appConfig.Start(ctx.Done())
	if s.longhorn != nil {
		s.longhorn.Start(ctx.Done())
	}
	if s.vmis != nil {
		go s.vmis.Run(ctx.Done())
	}
}

// readKinds names the informers of each kind the snapshot reads, as a
// person would say them, for the logs and for an error that says which
// are still being read. startInformers keeps them in kinds, under mu.
func (s *Snapshot) readKinds() map[string]cache.SharedIndexInformer {
	kinds := map[string]cache.SharedIndexInformer{
		"nodes":       s.core.Core().V1().Nodes().Informer(),
		"pods":        s.core.Core().V1().Pods().Informer(),
		"leases":      s.leases.Coordination().V1().Leases().Informer(),
		"config maps": s.appConfig.Core().V1().ConfigMaps().Informer(),
	}
	if !s.withoutEvents {
		kinds["events"] = s.core.Core().V1().Events().Informer()
	}
	if s.longhorn != nil {
		lh := s.longhorn.Longhorn().V1beta2()
		kinds["Longhorn volumes"], kinds["Longhorn replicas"], kinds["Longhorn engines"] = lh.Volumes().Informer(), lh.Replicas().Informer(), lh.Engines().Informer()
	}
	if s.vmis != nil {
		kinds["VMIs"] = s.vmis
	}
	return kinds
}

// unreadKinds are the kinds whose caches have not synced, sorted ("pod
// counts" while the counting handler has not had the pods' first list),
// and the last list or watch error of each that had one; none before the
// informers are made (discovery not done).
func (s *Snapshot) unreadKinds() (unread []string, failed map[string]string) {
	s.mu.Lock()
	kinds, podCountsSynced := s.kinds, s.podCountsSynced
	errs := maps.Clone(s.kindErrors)
	s.mu.Unlock()
	for kind, inf := range kinds {
		if !inf.HasSynced() {
			unread = append(unread, kind)
			if e, ok := errs[kind]; ok {
				if failed == nil {
					failed = map[string]string{}
				}
				failed[kind] = e
			}
		}
	}
	if podCountsSynced != nil && !podCountsSynced() {
		unread = append(unread, "pod counts")
	}
	slices.Sort(unread)
	return unread, failed
}

// logSyncs logs, at debug, when each kind's cache has synced: where a
// slow first read of a large site spends its time.
func (s *Snapshot) logSyncs(ctx context.Context, since time.Time) {
	if !s.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	s.mu.Lock()
	kinds := s.kinds
	s.mu.Unlock()
	for kind, inf := range kinds {
		go func() {
			if cache.WaitFor(ctx, "", inf.HasSyncedChecker()) {
				s.log.Debug("cache synced", "kind", kind, "objects", len(inf.GetStore().ListKeys()), "after", s.now().Sub(since).Round(time.Millisecond))
			}
		}()
	}
}

// waitInformers waits until every kind is read and the pods counted, or
// ctx ends (false). The snapshot's waits are woken by the informers' sync
// channels (cache.WaitFor): cache.WaitForCacheSync polls every 100 ms,
// which put up to a tenth of a second between the basics being read and
// the first screen, and again before the whole one.
func (s *Snapshot) waitInformers(ctx context.Context) bool {
	s.mu.Lock()
	kinds := s.kinds
	s.mu.Unlock()
	synced := make([]cache.DoneChecker, 0, len(kinds)+1)
	for _, inf := range kinds {
		synced = append(synced, inf.HasSyncedChecker())
	}
	// The node figures count the initial list's pods only once the
	// counting handler has had them (the cache holds them before).
	if s.podCounting != nil {
		synced = append(synced, s.podCounting.HasSyncedChecker())
	}
	return cache.WaitFor(ctx, "", synced...)
}
