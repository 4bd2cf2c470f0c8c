package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	lhinformers "github.com/longhorn/longhorn-manager/k8s/pkg/client/informers/externalversions"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	kvv1 "kubevirt.io/api/core/v1"
)

// Data is one consistent read of the snapshot: plain objects from the informer
// caches plus what the snapshot tracked itself. The model is derived from it by
// pure functions, so tests can build a Data by hand.
type Data struct {
	Nodes []*corev1.Node
	// Pods are the pods of the namespaces sitecon shows (Namespaces), as
	// the snapshot reads them; CountedPods is, per node, what every other
	// pod adds to its figures (they are counted, not listed: a site's
	// thousands of other pods would make every read walk them all). A
	// hand-built Data may list any pod in Pods and leave CountedPods nil:
	// NodePodCounts counts both.
	Pods        []*corev1.Pod
	CountedPods map[string]NodePodCount
	Leases      []*coordinationv1.Lease
	Events      []*corev1.Event
	ConfigMaps  []*corev1.ConfigMap
	VMIs        []*kvv1.VirtualMachineInstance
	Volumes     []*lhv1beta2.Volume
	Replicas    []*lhv1beta2.Replica
	Engines     []*lhv1beta2.Engine
	// Robustness is, per volume name, the robustness the snapshot last saw and
	// when the volume entered it. Read only: the snapshot's own map.
	Robustness map[string]RobustnessMark
	// LonghornVersion counts the changes the snapshot has seen to the
	// Longhorn objects and to Robustness; 0 in a Data not read from a
	// synced snapshot (nor from one at all). It is read before the lists,
	// the first sync counts as a change, and the snapshot counts a
	// change once its cache holds it and before it wakes any reader: a
	// read woken by a change holds it and a greater version than any read
	// before the change. So a reader that derived the volumes of a read
	// with version v may keep them for a later read with version v
	// (VolumeStatusCache): that later read was woken by something else,
	// and the wake-up of the Longhorn change it may already list follows.
	LonghornVersion uint64
	// HasLonghorn and HasKubeVirt say whether those APIs are installed at all;
	// without them the volume and VMI lists are empty, not unknown.
	HasLonghorn bool
	HasKubeVirt bool
	// ServerVersion is the API server's git version (v1.34.4+k3s1).
	ServerVersion string
	// AppMoves is, per app key (AppKey), the last move the snapshot saw.
	AppMoves map[string]AppMove
	Health   Health
}

// Since is a time something started. Exact is false when sitecon only saw it
// already in that state: the time is then a lower bound ("at least since").
type Since struct {
	Time  time.Time `json:"time"`
	Exact bool      `json:"exact"`
}

// RobustnessMark is a volume's robustness and since when it has held.
type RobustnessMark struct {
	Robustness lhv1beta2.VolumeRobustness
	Since      Since
}

// Snapshot is the informer-backed view of the cluster shared by everything in
// a process: one watch per resource kind, no polling after the initial sync.
// Subscribers get a coalesced notification on every change.
type Snapshot struct {
	clients *Clients
	log     *slog.Logger
	now     func() time.Time

	mu            sync.Mutex
	serverVersion string
	health        Health
	synced        bool
	// basicsSynced: the nodes, leases and the cluster's config maps are
	// read (BasicsData), the rest perhaps not yet.
	basicsSynced bool
	// kinds are the informers by kind (readKinds), once made;
	// podCountsSynced, whether the counting handler has had the pods'
	// first list; kindErrors, each kind's last list or watch error.
	kinds           map[string]cache.SharedIndexInformer
	podCountsSynced func() bool
	kindErrors      map[string]string
	hasLonghorn     bool
	hasKubeVirt     bool
	robustness      map[string]RobustnessMark
	// robustnessShared: a read holds robustness (writableRobustness).
	robustnessShared bool
	// longhornVersion counts the changes of the Longhorn objects and of
	// robustness (Data.LonghornVersion).
	longhornVersion uint64
	// counted is what the pods outside the shown namespaces add to each
	// node (Data.CountedPods), kept from the pod informer's events.
	counted *podCounts
	// podCounting is the pod handler that keeps counted: the snapshot is
	// synced once it has counted the initial list, not only once the
	// cache holds it.
	podCounting cache.ResourceEventHandlerRegistration
	// appNodes is where each app (by AppKey) was last seen running.
	appNodes map[string]string
	appMoves map[string]AppMove
	// appGone is when an app's object was deleted: its memory of where it
	// ran is kept for appMemory (a move is an old pod gone and a new one
	// running elsewhere), then dropped, so the maps follow the cluster's
	// apps, not every pod that ever ran.
	appGone map[string]time.Time
	// withoutEvents: no informer on the cluster's Events (see WithoutEvents).
	withoutEvents bool
	// countedPodsWakeNobody: see CountedPodsWakeNobody.
	countedPodsWakeNobody bool
	// returnSyncPeak: see ReturnSyncPeak.
	returnSyncPeak bool
	changes        Broadcast
	syncedCh       chan struct{}
	// lastEvent is when a watch last delivered something: proof that the
	// API server serves.
	lastEvent time.Time
	// quietProbe is how long the watches may be silent before the API
	// server is asked whether it is ready (QuietProbeAfter).
	quietProbe time.Duration
	// notReady: the API server said it is not ready (its etcd has no
	// quorum). It still answers from its watch cache, and an answer is no
	// proof the data can change: only /readyz passing again ends it.
	notReady bool

	core      informers.SharedInformerFactory
	leases    informers.SharedInformerFactory
	appConfig informers.SharedInformerFactory
	longhorn  lhinformers.SharedInformerFactory
	vmis      cache.SharedIndexInformer
}

// SnapshotOption changes what a snapshot watches.
type SnapshotOption func(*Snapshot)

// WithoutEvents leaves the cluster's Events out of the snapshot. Every
// component writes Events (a busy site many a second) and the cache holds
// them all for an hour: a reader that never shows them (the agent) should
// not pay for that watch. Data().Events is then nil.
func WithoutEvents() SnapshotOption { return func(s *Snapshot) { s.withoutEvents = true } }

// CountedPodsWakeNobody keeps the counts of the pods outside the shown
// namespaces (Data.CountedPods) without waking the readers when they
// change: for a process whose readers never read those counts (the
// agent decides on the shown namespaces' pods only). A site whose other
// namespaces churn (a CI runner's jobs, a batch) otherwise had every
// reader of the agent re-read the whole cluster on every such pod's
// every step. A reader woken by anything else reads the counts as they
// are then.
func CountedPodsWakeNobody() SnapshotOption {
	return func(s *Snapshot) { s.countedPodsWakeNobody = true }
}

// ReturnSyncPeak has the snapshot hand the memory of its first sync back
// to the operating system once its caches hold the cluster: the initial
// lists decode every object whole before the cache keeps its trimmed form
// (TrimForCache), and the Go runtime keeps that peak mapped for as long
// as its heap goal allows (twice the live heap at Go's default, 1.5
// times in the agent: agent.DefaultGCPercent). For a process that
// runs for days (the agent, the console): one forced collection, once.
func ReturnSyncPeak() SnapshotOption { return func(s *Snapshot) { s.returnSyncPeak = true } }

// WithClients has the snapshot read through clients made elsewhere
// instead of from the config: a test's fake clientset inside a synctest
// bubble, where no real API server can be. The health of such clients'
// requests is not tracked.
func WithClients(c *Clients) SnapshotOption { return func(s *Snapshot) { s.clients = c } }

// NewSnapshot prepares a snapshot over a cluster. Nothing talks to the API
// server until Start.
func NewSnapshot(cfg *rest.Config, log *slog.Logger, opts ...SnapshotOption) (*Snapshot, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Snapshot{
		log:        log,
		now:        time.Now,
		robustness: map[string]RobustnessMark{},
		counted:    newPodCounts(),
		appNodes:   map[string]string{},
		appMoves:   map[string]AppMove{},
		kindErrors: map[string]string{},
		appGone:    map[string]time.Time{},
		syncedCh:   make(chan struct{}),
		quietProbe: QuietProbeAfter,
	}
	for _, o := range opts {
		o(s)
	}
	if s.clients != nil {
		return s, nil
	}
	// Every response tells whether the API server is reachable, watches
	// included, so health needs no polling of its own while events flow
	// (probeWhenQuiet covers the silence of an API server whose etcd lost
	// quorum).
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &healthTransport{next: rt, s: s} })
	clients, err := NewClients(cfg)
	if err != nil {
		return nil, err
	}
	s.clients = clients
	return s, nil
}

// Clients returns the clients the snapshot watches with, for callers that act
// on what they read.
func (s *Snapshot) Clients() *Clients { return s.clients }

// Start finds which APIs the cluster serves and starts one informer per
// resource kind. It returns at once; until the API server answers, the
// snapshot retries in the background and reports why in Health.
func (s *Snapshot) Start(ctx context.Context) {
	go s.run(ctx)
}

func (s *Snapshot) run(ctx context.Context) {
	backoff := 500 * time.Millisecond
	for {
		err := s.discover()
		if err == nil {
			break
		}
		s.markError(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
	discovered := s.now()
	s.startInformers(ctx)
	s.logSyncs(ctx, discovered)
	go s.waitBasics(ctx)
	if !s.waitInformers(ctx) {
		return
	}
	s.log.Debug("caches synced", "after", s.now().Sub(discovered).Round(time.Millisecond))
	s.mu.Lock()
	s.synced = true
	// The first read with the lists is a change of its own
	// (Data.LonghornVersion).
	s.longhornVersion++
	s.lastEvent = s.now()
	s.mu.Unlock()
	close(s.syncedCh)
	s.notify()
	if s.returnSyncPeak {
		debug.FreeOSMemory()
	}
	s.probeWhenQuiet(ctx)
}

// QuietProbeAfter is how long a snapshot's watches may deliver nothing
// before it asks the API server whether it is ready. An API server whose
// etcd lost quorum keeps its watches open and silent and answers no LIST:
// without asking, the snapshot would look live forever. A live cluster is
// never quiet that long (kube-vip and the stats leader renew their Leases
// every few seconds), so in steady state nothing is asked.
const QuietProbeAfter = 15 * time.Second

// probeWhenQuiet asks the API server's /readyz whenever the watches have
// been silent for quietProbe, until ctx ends; a failed answer makes the
// snapshot stale with the checks that failed ("etcd failed").
func (s *Snapshot) probeWhenQuiet(ctx context.Context) {
	timer := time.NewTimer(s.quietProbe)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		s.mu.Lock()
		quiet, notReady := s.now().Sub(s.lastEvent), s.notReady
		s.mu.Unlock()
		if quiet < s.quietProbe && !notReady {
			timer.Reset(s.quietProbe - quiet)
			continue
		}
		err := s.probeReady(ctx)
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		wasNotReady := s.notReady
		s.notReady = err != nil
		s.mu.Unlock()
		next := s.quietProbe
		switch {
		case err != nil:
			s.markError(err)
			// Not ready: asked again sooner, and nothing but a passing
			// /readyz brings the snapshot back (markConnected holds).
			next = max(s.quietProbe/3, time.Second)
		case wasNotReady:
			s.markConnected()
		}
		timer.Reset(next)
	}
}

// probeReady asks /readyz; its error names the failed checks.
func (s *Snapshot) probeReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, probeKey{}, true), 10*time.Second)
	defer cancel()
	body, err := s.clients.Core.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err == nil {
		return nil
	}
	var failed []string
	for _, line := range strings.Split(string(body), "\n") {
		if check, ok := strings.CutPrefix(line, "[-]"); ok {
			failed = append(failed, check)
		}
	}
	if len(failed) == 0 {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			// The checks come back inside the status message.
			for _, line := range strings.Split(status.Status().Message, "\n") {
				if _, check, ok := strings.Cut(line, "[-]"); ok {
					failed = append(failed, check)
				}
			}
		}
	}
	if len(failed) == 0 {
		return unreachable(s.clients.Config.Host, err)
	}
	msg := fmt.Sprintf("the API server at %s answers but is not ready: %s", s.clients.Config.Host, strings.Join(failed, "; "))
	for _, check := range failed {
		if strings.HasPrefix(check, "etcd ") {
			msg += " (its etcd has no quorum or does not answer: are more than half the servers down?)"
			break
		}
	}
	return notReadyError(msg)
}

// notReadyError is an API server's answer that it is not ready, with the
// checks that failed: it answers, so the reason is its own, not the
// network's.
type notReadyError string

func (e notReadyError) Error() string { return string(e) }

// probeKey marks the probe's own request: its outcome is judged by
// probeWhenQuiet, which can say which checks failed.
type probeKey struct{}

// sawEvent records a watch event: the API server serves, whatever a
// failed probe said before.
func (s *Snapshot) sawEvent() {
	s.mu.Lock()
	s.lastEvent = s.now()
	if s.health.Connected {
		s.health.LastContact = s.lastEvent
	}
	stale := !s.health.Connected && s.synced
	s.mu.Unlock()
	if stale {
		s.markConnected()
	}
}

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
		s.longhorn = newLonghornInformers(c.Longhorn, &lhv1beta2.Volume{}, &lhv1beta2.Replica{}, &lhv1beta2.Engine{})
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

// waitBasics marks the basics read (BasicsData) once the informers of
// nodes, leases and config maps have synced, and wakes the readers: on a
// large site they are read in a tenth of a second, while the pods and
// the Longhorn objects take seconds.
func (s *Snapshot) waitBasics(ctx context.Context) {
	if !cache.WaitFor(ctx, "", s.core.Core().V1().Nodes().Informer().HasSyncedChecker(),
		s.leases.Coordination().V1().Leases().Informer().HasSyncedChecker(), s.appConfig.Core().V1().ConfigMaps().Informer().HasSyncedChecker()) {
		return
	}
	s.mu.Lock()
	s.basicsSynced = true
	s.mu.Unlock()
	s.notify()
}

// BasicsRead reports whether the nodes, the leases and the cluster's
// config maps have been read (BasicsData gives them until Synced, then
// Data), without reading them.
func (s *Snapshot) BasicsRead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.basicsSynced
}

// BasicsData reads the nodes, the leases and the cluster's config maps
// while the rest of the cluster is still being read: what the console's
// overview shows first (the nodes' readiness, the VIP, the seed, the
// stats leader). False until those are read, and once the snapshot has
// synced (read Data then). Nothing else is in it: no reader may take its
// empty pod, volume or VMI lists for the cluster's.
func (s *Snapshot) BasicsData() (Data, bool) {
	s.mu.Lock()
	d := Data{HasLonghorn: s.hasLonghorn, HasKubeVirt: s.hasKubeVirt, ServerVersion: s.serverVersion, Health: s.health}
	ok := s.basicsSynced && !s.synced
	s.mu.Unlock()
	if !ok {
		return Data{}, false
	}
	s.listBasics(&d)
	return d, true
}

// listBasics reads the nodes, the leases and the cluster's config maps
// into d, for Data and BasicsData alike.
func (s *Snapshot) listBasics(d *Data) {
	all := labels.Everything()
	d.Nodes, _ = s.core.Core().V1().Nodes().Lister().List(all)
	d.Leases, _ = s.leases.Coordination().V1().Leases().Lister().List(all)
	d.ConfigMaps, _ = s.appConfig.Core().V1().ConfigMaps().Lister().List(all)
}

// WaitForSync blocks until every informer has synced once or ctx ends. On
// failure the error says why the API server could not be read.
func (s *Snapshot) WaitForSync(ctx context.Context) error {
	select {
	case <-s.syncedCh:
		return nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// An API server whose etcd has no quorum answers discovery
			// but no list, or a list with a bare 500: its /readyz says
			// why, and is asked once more, briefly, to say it.
			probe, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			defer cancel()
			// The health's last error is read before the probe, whose
			// answer clears it.
			lastError := s.Health().LastError
			var notReady notReadyError
			err := s.probeReady(probe)
			if errors.As(err, &notReady) {
				return err
			}
			if err == nil {
				unread, failed := s.unreadKinds()
				if len(failed) > 0 {
					// A list that fails (refused, or a kind the server
					// does not serve) does not come with more time.
					kind := slices.Sorted(maps.Keys(failed))[0]
					return fmt.Errorf("the API server at %s is ready, but reading its %s failed: %s", s.clients.Config.Host, kind, failed[kind])
				}
				s.mu.Lock()
				discovered := s.kinds != nil
				s.mu.Unlock()
				if discovered || lastError == "" {
					// Ready, and no list of a kind still unread failed:
					// a large cluster on a busy machine, not an API
					// server that does not answer.
					return StillReadingError{Host: s.clients.Config.Host, Kinds: unread}
				}
				// Discovery itself failed (s.run retries it): its error.
			}
			if lastError != "" {
				return errors.New(lastError)
			}
		}
		h := s.Health()
		if h.LastError != "" {
			return errors.New(h.LastError)
		}
		return fmt.Errorf("no answer from the API server at %s in time: %w", s.clients.Config.Host, ctx.Err())
	}
}

// StillReadingError is WaitForSync's error when its time ran out while
// the API server answered and was ready, and no list had failed: the
// cluster was still being read. A large cluster on a busy machine, not
// an API server that is down; a longer wait would read it.
type StillReadingError struct {
	Host string
	// Kinds are those still being read ("pods", "Longhorn replicas").
	Kinds []string
}

func (e StillReadingError) Error() string {
	if len(e.Kinds) == 0 {
		return fmt.Sprintf("the API server at %s answers and is ready, but the cluster was still being read", e.Host)
	}
	return fmt.Sprintf("the API server at %s answers and is ready, but %s were still being read", e.Host, strings.Join(e.Kinds, ", "))
}

// Synced reports whether the initial sync has completed.
func (s *Snapshot) Synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// Subscribe returns a channel that receives a value after any change. Bursts
// coalesce into one pending notification, so a slow reader never blocks the
// informers. Call the returned function to unsubscribe.
func (s *Snapshot) Subscribe() (<-chan struct{}, func()) { return s.changes.Subscribe() }

func (s *Snapshot) notify() { s.changes.Notify() }

// Node reads one node from the cache (read only); false until synced or
// when there is no such node.
func (s *Snapshot) Node(name string) (*corev1.Node, bool) {
	if !s.Synced() {
		return nil, false
	}
	n, err := s.core.Core().V1().Nodes().Lister().Get(name)
	return n, err == nil
}

// Nodes reads the node cache alone (read only; nil until synced).
func (s *Snapshot) Nodes() []*corev1.Node {
	if !s.Synced() {
		return nil
	}
	nodes, _ := s.core.Core().V1().Nodes().Lister().List(labels.Everything())
	return nodes
}

// Pods reads the pod cache alone (read only; nil until synced), the
// shown namespaces' pods as Data.Pods: for a reader that follows pods on
// every change, without copying the rest.
func (s *Snapshot) Pods() []*corev1.Pod {
	if !s.Synced() {
		return nil
	}
	return s.shownPods()
}

// VMIs reads the VMI cache alone (read only); nil until synced or
// without KubeVirt.
func (s *Snapshot) VMIs() []*kvv1.VirtualMachineInstance {
	s.mu.Lock()
	synced := s.synced
	s.mu.Unlock()
	if !synced || s.vmis == nil {
		return nil
	}
	var out []*kvv1.VirtualMachineInstance
	for _, obj := range s.vmis.GetStore().List() {
		if vmi, ok := obj.(*kvv1.VirtualMachineInstance); ok {
			out = append(out, vmi)
		}
	}
	return out
}

// podEvent keeps the counts of the pods outside the shown namespaces and
// wakes the readers, for one event of the pod informer: an add (old nil),
// an update, or a delete (gone). An update that changes nothing a pod is
// counted by (quietPodWrite) wakes nobody.
func (s *Snapshot) podEvent(old, obj any, gone bool) {
	s.sawEvent()
	if quietPodWrite(old, obj) {
		return
	}
	s.mu.Lock()
	if gone {
		s.counted.gone(obj)
	} else {
		s.counted.set(obj)
	}
	s.mu.Unlock()
	if s.countedPodsWakeNobody && !shownPodEvent(obj) {
		return
	}
	s.notify()
}

// quietPodWrite says whether a pod informer's update (old to obj, as the
// cache holds them) changed nothing any reader reads: a counted pod
// (CountedPod) whose node and count stayed. Such a pod's status and its
// containers' states move often (restarts, probes, IPs, readiness, a
// pending pod starting) and no reader reads them.
func quietPodWrite(old, obj any) bool {
	o, ok1 := old.(*CountedPod)
	n, ok2 := obj.(*CountedPod)
	return ok1 && ok2 && o.Node == n.Node && o.Count == n.Count
}

// shownPodEvent says whether a pod informer's event is of a pod of a
// shown namespace (a deletion found on a relist carries its key).
func shownPodEvent(obj any) bool {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		ns, _, err := cache.SplitMetaNamespaceKey(d.Key)
		return err != nil || ShownNamespace(ns)
	}
	switch p := obj.(type) {
	case *CountedPod:
		return ShownNamespace(p.Namespace)
	case *corev1.Pod:
		return ShownNamespace(p.Namespace)
	}
	return true
}

// longhornEvent is one event of a Longhorn informer that changed what a
// reader reads: counted, then the readers woken, in that order.
func (s *Snapshot) longhornEvent() {
	s.longhornChanged()
	s.sawEvent()
	s.notify()
}

// longhornChanged counts one event of a Longhorn informer
// (Data.LonghornVersion).
func (s *Snapshot) longhornChanged() {
	s.mu.Lock()
	s.longhornVersion++
	s.mu.Unlock()
}

// shownPods lists the pods of the shown namespaces from the pod cache's
// namespace index: the site's other pods are not walked. It is the one
// read of the pod cache through its lister, and must stay within the
// shown namespaces: the cache holds every other pod as a *CountedPod, on
// which the lister's assertion to *corev1.Pod would panic.
func (s *Snapshot) shownPods() []*corev1.Pod {
	lister := s.core.Core().V1().Pods().Lister()
	// Not nil once synced, even with no pod: a reader takes nil for not
	// synced yet.
	out := []*corev1.Pod{}
	for _, ns := range Namespaces {
		pods, _ := lister.Pods(ns).List(labels.Everything())
		out = append(out, pods...)
	}
	return out
}

// Data reads the caches. Objects are shared with the informers: read only.
func (s *Snapshot) Data() Data {
	s.mu.Lock()
	d := Data{
		HasLonghorn:   s.hasLonghorn,
		HasKubeVirt:   s.hasKubeVirt,
		ServerVersion: s.serverVersion,
		Health:        s.health,
		Robustness:    s.robustness,
	}
	synced := s.synced
	if synced {
		// Read before the listers: see Data.LonghornVersion. An unsynced
		// read lists no volume, and its count must not let a later read
		// that does keep its empty list.
		d.LonghornVersion = s.longhornVersion
	}
	s.robustnessShared = true
	d.CountedPods = maps.Clone(s.counted.byNode)
	d.AppMoves = make(map[string]AppMove, len(s.appMoves))
	for app, m := range s.appMoves {
		d.AppMoves[app] = m
	}
	s.mu.Unlock()
	if !synced {
		return d
	}
	s.listBasics(&d)
	all := labels.Everything()
	d.Pods = s.shownPods()
	if !s.withoutEvents {
		d.Events, _ = s.core.Core().V1().Events().Lister().List(all)
	}
	if s.longhorn != nil {
		d.Volumes, _ = s.longhorn.Longhorn().V1beta2().Volumes().Lister().List(all)
		d.Replicas, _ = s.longhorn.Longhorn().V1beta2().Replicas().Lister().List(all)
		d.Engines, _ = s.longhorn.Longhorn().V1beta2().Engines().Lister().List(all)
	}
	if s.vmis != nil {
		for _, obj := range s.vmis.GetStore().List() {
			if vmi, ok := obj.(*kvv1.VirtualMachineInstance); ok {
				d.VMIs = append(d.VMIs, vmi)
			}
		}
	}
	return d
}

// Status derives the cluster status from the current data.
func (s *Snapshot) Status() ClusterStatus {
	return Derive(s.Data(), s.now())
}

// LeaseRenewalOnly says whether new differs from old only by its renew
// time (and the object's own bookkeeping): the holder renewing, nothing a
// reader shows.
func LeaseRenewalOnly(old, new *coordinationv1.Lease) bool {
	a, b := old.Spec.DeepCopy(), new.Spec.DeepCopy()
	a.RenewTime, b.RenewTime = nil, nil
	return apiequality.Semantic.DeepEqual(a, b) && old.Namespace == new.Namespace && old.Name == new.Name &&
		apiequality.Semantic.DeepEqual(old.Labels, new.Labels) && apiequality.Semantic.DeepEqual(old.Annotations, new.Annotations)
}
