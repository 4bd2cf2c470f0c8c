package kube

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	lhinformers "github.com/longhorn/longhorn-manager/k8s/pkg/client/informers/externalversions"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
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

// WatchesVMIs says whether the cache watches VMIs (KubeVirt was served
// when it started): without, VMIs is empty though the cluster may have
// some.
func (s *Snapshot) WatchesVMIs() bool { return s.vmis != nil }

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
