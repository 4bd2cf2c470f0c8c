package apps

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/workloads"
	"github.com/sitecon/sitecon/kube"
)

// Options configure the apps part of the agent.
type Options struct {
	NodeName string
	// NodeUUID is this node's UUID; empty: read from its Node's node-uuid label.
	NodeUUID string
	// AppsDir holds apps/*.json and volumes/*.json; watched for changes.
	AppsDir string
	// StateDir receives apps.json, node.json, events.json and, on the
	// stats leader only, cluster.json. Empty: no files.
	StateDir  string
	Placement PlacementOptions
	// FailoverTimeout is how long a pod may hang terminating on an
	// unreachable node before the leader force-deletes it (default 60 s).
	FailoverTimeout time.Duration
	// Fence configures the fence watch: a node cut off from the others
	// stops its auto apps' workloads before the leader may force-delete
	// them (DeriveFenceTimings).
	Fence FenceOptions
	// NodeProbe looks for a sign of life from a lost node before one of its
	// pods is force-deleted (default: a LifeProbe with LifeKey and
	// ProbeDial: its agent's proof of life on its cluster address).
	NodeProbe NodeProbe
	// LifeKey checks the lost node's proof of life (from the cluster id
	// and token); without one no node can be shown dead.
	LifeKey config.LifeKey
	// ProbeDial opens the life probe's connections (nil: a plain dialer).
	ProbeDial func(ctx context.Context, network, addr string) (net.Conn, error)
	Metrics   *Metrics
	// RereadInterval is how often the apps directory is read in full
	// whatever the watch says (default 30 s).
	RereadInterval time.Duration
	// FileAbsentGrace is how long an app or volume file its readable
	// directory no longer lists keeps its last good version before the
	// app or volume leaves the config and its workload is removed
	// (default DefaultFileAbsentGrace; see HoldAbsentFiles).
	FileAbsentGrace time.Duration
	// ConflictWindow is how long another node's layout of an app from a
	// config that disagrees with this node's (and is not older) stands
	// before this node writes over it, when this node's config wins the
	// tie (default 5 min); see DecideLayoutWrite.
	ConflictWindow time.Duration
	// Leader reports the stats-leader election; only the leader acts on
	// failover and writes cluster-wide stats.
	Leader func() LeaderState
	// NodeIdentity: the agent reaches the cluster with its node's own
	// identity (a worker's), which may write no cluster-wide state
	// (kube.EnsureAgentAccess): it removes no placement override.
	NodeIdentity bool
	Log          *slog.Logger
}

// DefaultConflictWindow is how long a layout from a disagreeing config
// stands: long enough that two nodes with disagreeing configs restart an
// app at most once per window, short enough that a config changed without
// a version number takes effect within minutes.
const DefaultConflictWindow = 5 * time.Minute

// AppState is what this node publishes about one app.
type AppState struct {
	UUID                string             `json:"uuid"`
	Name                string             `json:"name"`
	Kind                string             `json:"kind"`
	Pinned              bool               `json:"pinned"`
	EffectiveDNId       string             `json:"effective_dnid"`
	DNIdNode            string             `json:"dnid_node,omitempty"`
	Override            *PlacementOverride `json:"override,omitempty"`
	Activate            bool               `json:"activate"`
	IsDNIdNode          bool               `json:"is_dnid_node"`
	ScheduledOnThisNode bool               `json:"scheduled_on_this_node"`
	KubeStatus          KubeStatus         `json:"kube_status"`
	ClusterAppRunning   bool               `json:"cluster_app_running"`
	// Node is where Kubernetes runs the app (or has scheduled it).
	Node    string `json:"node,omitempty"`
	VMIName string `json:"vmi_name,omitempty"`
	// Lost reports a pinned app whose node is gone: it is not moved.
	Lost *LostApp `json:"lost,omitempty"`
	// Failover is the last failover verdict that was not "wait".
	Failover string `json:"failover,omitempty"`
	Error    string `json:"error,omitempty"`
	// ChangedAt is when cluster_app_running last changed on this node.
	ChangedAt time.Time `json:"changed_at"`
}

// LostApp says where a pinned app is stranded and since when.
type LostApp struct {
	Node  string    `json:"node"`
	Since time.Time `json:"since"`
}

// NodeState is this node's cluster status: READY, NOTREADY (the cluster says
// so) or DOWN (the API server does not answer).
type NodeState struct {
	Node   string    `json:"node"`
	UUID   string    `json:"uuid,omitempty"`
	Status string    `json:"status"`
	Since  time.Time `json:"since"`
	Reason string    `json:"reason,omitempty"`
	// ConfigErrors are the app and volume files that could not be used, by path.
	ConfigErrors map[string]string `json:"config_errors,omitempty"`
	// Fence says why this node stopped its auto apps' workloads (cut off
	// from the cluster past the fence bound); empty when it did not.
	Fence string `json:"fence,omitempty"`
}

// Node statuses.
const (
	NodeReady    = "READY"
	NodeNotReady = "NOTREADY"
	NodeDown     = "DOWN"
)

// Controller is the agent's apps part: it gates, places and follows the
// apps from the watch-driven snapshot, and publishes what it finds. (The
// node agent itself is agent.Agent; this is one of the parts it runs.)
type Controller struct {
	opts     Options
	snap     *kube.Snapshot
	dyn      dynamic.Interface
	log      *slog.Logger
	recorder record.EventRecorder
	// broadcaster sends the recorder's Events; shut down when Run ends, so
	// an agent restarted for a new config leaves no sender behind.
	broadcaster record.EventBroadcaster
	timeline    *Timeline
	kick        chan struct{}

	mu       sync.Mutex
	set      AppSet
	lastGood AppFiles
	// absentSince is when each file held by HoldAbsentFiles was first
	// found absent, and firstRead when the directory was first read; only
	// loadFiles writes them, before the loop's first pass.
	absentSince map[string]time.Time
	firstRead   time.Time
	apps        []AppState
	volumes     []VolumeState
	node        NodeState
	changes     kube.Broadcast

	// Only the reconcile loop touches these.
	placed      *placedCache
	lastRunning map[string]string
	nodeReady   map[string]bool
	// stuck is the stats leader's own record of each pod stuck on a lost
	// node, by UID; pruned with the pods (and cleared when not leading).
	stuck map[types.UID]*stuckPod
	// releaseChecked are the VolumeAttachments left on lost nodes that the
	// leader looked at and did not release, by UID; podsOnLost the app
	// pods on lost nodes at the last pass, and releasesListed when the
	// attachments were last listed (see releaseLeftBehind).
	releaseChecked map[types.UID]releaseCheck
	podsOnLost     map[types.UID]bool
	releasesListed time.Time
	lostSeen       map[string]bool
	leaderSeen     string
	// The placement reconcilers (see place): the layout writer and the
	// orphan remover keep their own memory; restarting failed pinned VMs
	// needs none, only the effects all three act through.
	effects placeEffects
	writer  *layoutWriter
	orphans *orphanRemover
	// overrideRefused is the refusal last reported per app UUID.
	overrideRefused map[string]string
	// fence is why the fence watch stopped the auto apps' workloads.
	fence string
	// placementErrors are what the last pass's placement found wrong, by
	// app UUID: published with what is seen, before the next pass acts.
	placementErrors map[string]string
	// clusterWritten is when the leader last wrote cluster.json.
	clusterWritten time.Time
	// timelineWritten is the timeline version last written to events.json.
	timelineWritten int
	// pass is what Pending reports.
	pass passes
}

// DefaultFailoverTimeout is how long a pod may hang terminating on a lost
// node before the failover guard judges it, unless configured.
const DefaultFailoverTimeout = 60 * time.Second

// New prepares the apps controller over a started snapshot.
func New(opts Options, snap *kube.Snapshot) (*Controller, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.FailoverTimeout == 0 {
		opts.FailoverTimeout = DefaultFailoverTimeout
	}
	if !opts.Fence.Disabled {
		// The leader's timer and the fence bound come from one
		// derivation: a timer too short to fence before is raised.
		opts.FailoverTimeout = DeriveFenceTimings(opts.FailoverTimeout).ForceDeleteAfter
	}
	if opts.Fence.APIReady == nil {
		opts.Fence.APIReady = apiReady(snap)
	}
	if opts.Fence.Stop == nil {
		opts.Fence.Stop = workloads.StopPods
	}
	if opts.NodeProbe == nil {
		opts.NodeProbe = LifeProbe{Key: opts.LifeKey, Dial: opts.ProbeDial}.Node
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	if opts.RereadInterval == 0 {
		opts.RereadInterval = 30 * time.Second
	}
	if opts.FileAbsentGrace == 0 {
		opts.FileAbsentGrace = DefaultFileAbsentGrace
	}
	if opts.Leader == nil {
		opts.Leader = func() LeaderState { return LeaderState{} }
	}
	if opts.ConflictWindow == 0 {
		opts.ConflictWindow = DefaultConflictWindow
	}
	dyn, err := dynamic.NewForConfig(snap.Clients().Config)
	if err != nil {
		return nil, err
	}
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: snap.Clients().Core.CoreV1().Events("")})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "sitecon-agent", Host: opts.NodeName})
	timeline := NewTimeline(500)
	fx := placeEffects{dyn: dyn, node: opts.NodeName, timeline: timeline, recorder: recorder, log: opts.Log, metrics: opts.Metrics}
	return &Controller{
		opts: opts, snap: snap, dyn: dyn, log: opts.Log, broadcaster: broadcaster,
		recorder:        recorder,
		timeline:        timeline,
		effects:         fx,
		writer:          newLayoutWriter(fx, opts.ConflictWindow),
		orphans:         &orphanRemover{placeEffects: fx},
		kick:            make(chan struct{}, 1),
		lastRunning:     map[string]string{},
		nodeReady:       map[string]bool{},
		stuck:           map[types.UID]*stuckPod{},
		releaseChecked:  map[types.UID]releaseCheck{},
		lostSeen:        map[string]bool{},
		overrideRefused: map[string]string{},
		node:            NodeState{Node: opts.NodeName, Status: NodeDown, Since: time.Now(), Reason: "not connected yet"},
	}, nil
}

// Apps returns the published app states, sorted by name.
func (a *Controller) Apps() []AppState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.apps)
}

// Volumes returns the configured volumes as last published.
func (a *Controller) Volumes() []VolumeState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.volumes)
}

// Node returns this node's published status.
func (a *Controller) Node() NodeState {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.node
	n.ConfigErrors = maps.Clone(a.set.Errors)
	n.Fence = a.fence
	return n
}

// Timeline returns the agent's events, newest first.
func (a *Controller) Timeline() []TimelineEvent { return a.timeline.Events() }

// Subscribe returns a channel that receives a value after the published
// state changed (coalesced), and a function to unsubscribe.
func (a *Controller) Subscribe() (<-chan struct{}, func()) { return a.changes.Subscribe() }

func (a *Controller) notify() { a.changes.Notify() }

func (a *Controller) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Run follows the config directory and the cluster until ctx ends.
func (a *Controller) Run(ctx context.Context) error {
	defer a.broadcaster.Shutdown()
	// A fresh install has an apps directory without its subdirectories:
	// make them. When the apps directory itself is missing (a partition not
	// mounted yet), nothing is made under its mount point: the read reports
	// it unknown and removals wait until it appears.
	if _, err := os.Stat(a.opts.AppsDir); err == nil {
		for _, sub := range []string{appsSubdir, volumesSubdir} {
			if err := os.MkdirAll(filepath.Join(a.opts.AppsDir, sub), 0o755); err != nil {
				a.log.Error("apps directory", "err", err)
			}
		}
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch apps directory: %w", err)
	}
	defer watcher.Close()
	dirs := &watchedDirs{watcher: watcher, log: a.log}
	dirs.arm(a.opts.AppsDir)
	if !a.opts.Fence.Disabled {
		go a.fenceWatch(ctx)
	}
	changes, unsubscribe := a.snap.Subscribe()
	defer unsubscribe()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// The watch can miss a change (a directory replaced between two
	// events, an overflowed queue, a remount): a full read backs it up.
	reread := time.NewTicker(a.opts.RereadInterval)
	defer reread.Stop()
	// Editors write a file in several steps: read once things settle.
	var settle <-chan time.Time
	// absence is the end of the first hold of an absent file: read again
	// then, and the file still absent leaves the config.
	absence := time.NewTimer(time.Hour)
	defer absence.Stop()
	load := func() {
		dirs.arm(a.opts.AppsDir)
		if next := a.loadFiles(time.Now()); next > 0 {
			absence.Reset(next)
		}
	}
	if next := a.loadFiles(time.Now()); next > 0 {
		absence.Reset(next)
	}
	woke := time.Now()
	for {
		a.pass.begin(changes)
		next := a.reconcile(ctx, woke)
		a.pass.end(next)
		if next > 0 {
			timer.Reset(next)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-a.kick:
		case <-timer.C:
		case ev := <-watcher.Events:
			if ev.Op != fsnotify.Chmod {
				settle = time.After(100 * time.Millisecond)
			}
			continue
		case err := <-watcher.Errors:
			a.log.Warn("apps directory watch", "err", err)
			settle = time.After(100 * time.Millisecond)
			continue
		case <-settle:
			settle = nil
			load()
		case <-reread.C:
			load()
		case <-absence.C:
			load()
		}
		woke = time.Now()
	}
}

// watchedDirs keeps inotify watches on the apps directory and its
// subdirectories. A watch follows an inode: a directory renamed away and
// replaced by another keeps the watch on the old one, so every read re-arms
// the watches on whatever is at the paths now.
type watchedDirs struct {
	watcher *fsnotify.Watcher
	log     *slog.Logger
	inodes  map[string]uint64 // by path: the directory the watch is on
}

func (w *watchedDirs) arm(root string) {
	if w.inodes == nil {
		w.inodes = map[string]uint64{}
	}
	for _, path := range []string{root, filepath.Join(root, appsSubdir), filepath.Join(root, volumesSubdir)} {
		var ino uint64
		if st, err := os.Stat(path); err == nil {
			if sys, ok := st.Sys().(*syscall.Stat_t); ok {
				ino = sys.Ino
			}
		}
		have, watched := w.inodes[path]
		if watched && have == ino && ino != 0 {
			continue
		}
		if watched {
			_ = w.watcher.Remove(path)
			delete(w.inodes, path)
		}
		if ino == 0 {
			continue // not there: the next read reports it and re-arms
		}
		if err := w.watcher.Add(path); err != nil {
			w.log.Warn("watch apps directory", "dir", path, "err", err)
			continue
		}
		w.inodes[path] = ino
	}
}

// loadFiles reads the apps directory into the set the agent acts on. It
// returns when a file held absent (HoldAbsentFiles) is due to leave the
// config if it is still absent (0: none held).
func (a *Controller) loadFiles(now time.Time) time.Duration {
	read := ReadAppFiles(a.opts.AppsDir)
	if a.firstRead.IsZero() {
		a.firstRead = now
	}
	a.mu.Lock()
	prevErrors := a.set.Errors
	var next time.Duration
	read, a.absentSince, next = HoldAbsentFiles(read, a.lastGood, a.absentSince, now, a.opts.FileAbsentGrace)
	a.set, a.lastGood = MergeAppFiles(read, a.lastGood)
	errs := maps.Clone(a.set.Errors)
	a.mu.Unlock()
	a.opts.Metrics.AppConfigFailures.Set(float64(len(errs)))
	for _, path := range slices.Sorted(maps.Keys(errs)) {
		if prevErrors[path] != errs[path] {
			a.log.Error("app config file not usable; keeping its last good version", "file", path, "err", errs[path])
			a.timeline.Add(TimelineEvent{Time: now, Kind: EventConfig, Message: filepath.Base(path) + ": " + errs[path], Warning: true})
		}
	}
	return next
}

// reconcile publishes the state, lays out this node's apps and acts on
// failover. It returns when it wants to run again without a change (0: no).
func (a *Controller) reconcile(ctx context.Context, woke time.Time) time.Duration {
	d := a.snap.Data()
	synced := a.snap.Synced()
	now := time.Now()
	a.mu.Lock()
	set := a.set
	a.mu.Unlock()

	nodes := map[string]*corev1.Node{}
	nodeByUUID := map[string]string{}
	for _, n := range d.Nodes {
		nodes[n.Name] = n
		if u := n.Labels[kube.LabelNodeUUID]; u != "" {
			nodeByUUID[strings.ToLower(u)] = n.Name
		}
	}
	myUUID := strings.ToLower(a.opts.NodeUUID)
	if own, ok := nodes[a.opts.NodeName]; ok && myUUID == "" {
		myUUID = strings.ToLower(own.Labels[kube.LabelNodeUUID])
	}
	a.followNodes(d, synced, now)
	a.followLeader(now)

	var placementCM *corev1.ConfigMap
	for _, cm := range d.ConfigMaps {
		if cm.Name == PlacementConfigMapName {
			placementCM = cm
		}
	}
	overrides, badOverrides := ParseOverrides(placementCM)
	for uuid, msg := range badOverrides {
		set.Errors = maps.Clone(set.Errors)
		set.Errors[PlacementConfigMapName+"/"+uuid] = msg
	}
	observed := ObserveApps(d)
	var states []AppState
	var staleOverrides []string
	decisions := map[string]AppDecision{}
	for _, uuid := range slices.Sorted(maps.Keys(set.Apps)) {
		app := set.Apps[uuid]
		o := observed[uuid]
		o.Synced, o.Connected = synced, d.Health.Connected
		var ov *PlacementOverride
		if x, ok := overrides[uuid]; ok {
			ov = &x
		}
		dnid, active, stale := EffectiveDNId(app, ov)
		// A worker leaves a stale override where it is: it has no effect
		// (the config's DNId stands) and its identity may not remove it.
		if stale && app.DesignatedNodeID == myUUID && !a.opts.NodeIdentity {
			staleOverrides = append(staleOverrides, uuid)
		}
		// An override is re-checked here, not only by whoever wrote it; a
		// refused one is reported and the config's DNId stands. Without a
		// synced cache there are no nodes to check against: nothing is
		// placed then anyway.
		refusal := ""
		if active != nil && synced {
			if refusal = CheckOverride(app, active, nodes[nodeByUUID[dnid]], cmp.Or(o.RunningNode, o.ScheduledNode)); refusal != "" {
				dnid, active = app.DesignatedNodeID, nil
			}
		}
		a.noteOverrideRefusal(uuid, app.DisplayName, refusal, now)
		dec := DecideApp(app, dnid, myUUID, a.opts.NodeName, o)
		decisions[uuid] = dec
		st := AppState{
			UUID: uuid, Name: app.DisplayName, Kind: app.Kind, Pinned: app.Pinned(),
			EffectiveDNId: dnid, DNIdNode: nodeByUUID[dnid], Override: active,
			Activate: dec.Activate, IsDNIdNode: dec.IsDNIdNode, ScheduledOnThisNode: dec.ScheduledOnThisNode,
			KubeStatus: dec.KubeStatus, ClusterAppRunning: dec.ClusterAppRunning,
			Node: cmp.Or(o.RunningNode, o.ScheduledNode), VMIName: o.VMIName,
		}
		if dec.Place && synced && st.DNIdNode == "" {
			st.Error = fmt.Sprintf("designated node %s is not in the cluster", dnid)
		}
		if refusal != "" {
			st.Error = refusal
		}
		st.Lost = PinnedLost(app, st.Node, st.DNIdNode, nodes)
		states = append(states, st)
	}
	for uuid := range a.overrideRefused {
		if _, ok := set.Apps[uuid]; !ok {
			delete(a.overrideRefused, uuid)
		}
	}
	// Publish what is seen before acting on it: where an app runs
	// (cluster_app_running) must not wait on the writes below, which a slow
	// API server can hold up. It carries what placement found wrong last
	// time, so an error that holds is not dropped and put back every pass.
	seen := slices.Clone(states)
	for i := range seen {
		if msg := a.placementErrors[seen[i].UUID]; msg != "" && seen[i].Error == "" {
			seen[i].Error = msg
		}
	}
	a.publishVolumes(VolumeStates(set.Volumes, myUUID, a.opts.NodeName, nodeByUUID, d))
	a.publish(slices.Clone(seen), d, nodes, synced, woke)
	next := time.Duration(0)
	if synced && d.Health.Connected {
		if a.placed == nil {
			// The watches on what this node laid out live as long as the
			// agent, not as long as one pass.
			a.placed = newPlacedCache(a.dyn, d.HasKubeVirt, a.wake)
			a.placed.start(ctx)
		}
		// Every write of this pass shares one deadline: a hung API server
		// delays the next pass, never forever.
		ctx, cancel := context.WithTimeout(ctx, actTimeout)
		defer cancel()
		if retry := a.place(ctx, set, decisions, states, myUUID, func(name string) bool {
			n, ok := nodes[name]
			return ok && kube.NodeIsReady(n)
		}, d.VMIs, now); retry > 0 {
			next = retry
		}
		for _, uuid := range staleOverrides {
			a.removeOverride(ctx, uuid)
		}
		if a.opts.Leader().IsLeader {
			if wait := a.failover(ctx, set, observed, nodes, d, states, now); wait > 0 && (next == 0 || wait < next) {
				next = wait
			}
		} else {
			// A leader's timer is its own sighting: one that leads again
			// later starts afresh.
			clear(a.stuck)
			clear(a.releaseChecked)
			a.releasesListed = time.Time{}
		}
		if !reflect.DeepEqual(seen, states) {
			// Acting found something new: an apply refused or mended, a
			// failover taken.
			a.publish(states, d, nodes, synced, woke)
		}
	}
	return next
}

// actTimeout bounds the API writes of one reconcile pass.
const actTimeout = 30 * time.Second

// PinnedLost reports a pinned app stranded on a node that is not Ready:
// the node it runs or is scheduled on, or, when nothing of it is (its pod
// was evicted and the replacement waits Pending, held by the required
// affinity), its designated node. Auto apps are never lost: they move.
func PinnedLost(app AppConfig, node, dnidNode string, nodes map[string]*corev1.Node) *LostApp {
	if !app.Pinned() {
		return nil
	}
	where := cmp.Or(node, dnidNode)
	if n, ok := nodes[where]; ok && !kube.NodeIsReady(n) {
		return &LostApp{Node: where, Since: readySince(n)}
	}
	return nil
}

func readySince(n *corev1.Node) time.Time {
	if c := kube.NodeReadyCondition(n); c != nil {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

// followNodes records node readiness transitions and this node's status.
func (a *Controller) followNodes(d kube.Data, synced bool, now time.Time) {
	st := NodeState{Node: a.opts.NodeName, UUID: a.opts.NodeUUID}
	switch {
	case !d.Health.Connected:
		st.Status, st.Since, st.Reason = NodeDown, d.Health.Since, d.Health.LastError
		if st.Reason == "" {
			st.Reason = "not connected yet"
		}
	case !synced:
		st.Status, st.Since, st.Reason = NodeDown, now, "reading the cluster"
	default:
		st.Status, st.Since, st.Reason = NodeNotReady, now, "no Node object named "+a.opts.NodeName
	}
	for _, n := range d.Nodes {
		ready := kube.NodeIsReady(n)
		if synced && d.Health.Connected && n.Name == a.opts.NodeName {
			st.Status, st.Since, st.Reason = NodeNotReady, readySince(n), "the cluster marks it not ready"
			if ready {
				st.Status, st.Reason = NodeReady, ""
			}
			st.UUID = cmp.Or(st.UUID, n.Labels[kube.LabelNodeUUID])
		}
		if was, seen := a.nodeReady[n.Name]; seen && was != ready {
			msg := n.Name + " is Ready"
			if !ready {
				msg = n.Name + " is not Ready"
			}
			a.timeline.Add(TimelineEvent{Time: now, Kind: EventNode, Node: n.Name, Message: msg, Warning: !ready})
		}
		if synced {
			a.nodeReady[n.Name] = ready
		}
	}
	if synced {
		// A node gone from the cluster (removed, replaced under another
		// name) is forgotten: over years of churn the memory would grow.
		maps.DeleteFunc(a.nodeReady, func(name string, _ bool) bool {
			return !slices.ContainsFunc(d.Nodes, func(n *corev1.Node) bool { return n.Name == name })
		})
	}
	a.mu.Lock()
	if a.node.Status == st.Status && a.node.Reason == st.Reason {
		st.Since = a.node.Since
	}
	changed := !reflect.DeepEqual(a.node, st)
	a.node = st
	a.mu.Unlock()
	if changed {
		a.writeState("node.json", a.Node())
		a.notify()
	}
}

func (a *Controller) followLeader(now time.Time) {
	l := a.opts.Leader()
	if l.IsLeader {
		a.opts.Metrics.Leader.Set(1)
	} else {
		a.opts.Metrics.Leader.Set(0)
	}
	if l.Leader != a.leaderSeen {
		if l.Leader != "" {
			a.timeline.Add(TimelineEvent{Time: now, Kind: EventLeader, Node: l.Leader, Message: "stats leader is " + l.Leader})
		}
		a.leaderSeen = l.Leader
	}
	if !l.IsLeader && a.opts.StateDir != "" {
		// Only the leader's cluster-wide stats are to be trusted.
		_ = os.Remove(filepath.Join(a.opts.StateDir, "cluster.json"))
	}
}

// publish stores the app states, notes moves, and writes the state files.
// publishVolumes publishes the volumes when they changed (volumes.json,
// /v1/volumes).
func (a *Controller) publishVolumes(vols []VolumeState) {
	a.mu.Lock()
	changed := !reflect.DeepEqual(a.volumes, vols)
	a.volumes = vols
	a.mu.Unlock()
	if changed {
		a.writeState("volumes.json", vols)
		a.notify()
	}
}

func (a *Controller) publish(states []AppState, d kube.Data, nodes map[string]*corev1.Node, synced bool, woke time.Time) {
	now := time.Now()
	a.mu.Lock()
	prev := map[string]AppState{}
	for _, st := range a.apps {
		prev[st.UUID] = st
	}
	runningChanged := false
	for i := range states {
		st := &states[i]
		p, had := prev[st.UUID]
		st.ChangedAt = now
		if had && p.ClusterAppRunning == st.ClusterAppRunning {
			st.ChangedAt = p.ChangedAt
		} else if had {
			runningChanged = true
		}
		if st.Failover == "" && had {
			st.Failover = p.Failover
		}
	}
	changed := !reflect.DeepEqual(a.apps, states)
	a.apps = states
	a.mu.Unlock()

	counts := map[KubeStatus]int{}
	for _, st := range states {
		counts[st.KubeStatus]++
		a.noteMove(st, now)
		if st.Lost != nil && !a.lostSeen[st.UUID] {
			msg := fmt.Sprintf("pinned app %s is on lost node %s (since %s); not moved", st.Name, st.Lost.Node, st.Lost.Since.Format(time.TimeOnly))
			a.timeline.Add(TimelineEvent{Time: now, Kind: EventRefusal, App: st.Name, Node: st.Lost.Node, Warning: true, Message: msg})
			// One Kubernetes Event for the cluster: from the stats leader.
			if obj := a.placed.workload(st.UUID); obj != nil && a.opts.Leader().IsLeader {
				a.recorder.Event(obj, corev1.EventTypeWarning, "PinnedAppNodeLost", msg)
			}
		}
		a.lostSeen[st.UUID] = st.Lost != nil
	}
	// states holds every configured app: an app that left the config is
	// forgotten, so the memory follows the config, not its history.
	configured := map[string]bool{}
	for _, st := range states {
		configured[st.UUID] = true
	}
	maps.DeleteFunc(a.lastRunning, func(uuid, _ string) bool { return !configured[uuid] })
	maps.DeleteFunc(a.lostSeen, func(uuid string, _ bool) bool { return !configured[uuid] })
	for _, s := range []KubeStatus{KubeUnknown, KubeAPIUnreachable, KubeNotInCluster, KubeNotRunning, KubeRunning} {
		a.opts.Metrics.Apps.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
	if runningChanged {
		a.opts.Metrics.DetectionLatency.Observe(now.Sub(woke).Seconds())
	}
	if changed {
		a.writeState("apps.json", states)
		a.notify()
	}
	if v := a.timeline.Version(); v != a.timelineWritten {
		a.timelineWritten = v
		a.writeState("events.json", a.timeline.Events())
	}
	// The cluster-wide view changes with every lease renewal and Longhorn
	// status; on device flash, once per clusterStateInterval is plenty (EVE
	// itself publishes cluster stats every 10 s).
	if synced && a.opts.Leader().IsLeader && now.Sub(a.clusterWritten) >= clusterStateInterval {
		a.clusterWritten = now
		a.writeState("cluster.json", kube.Derive(d, now))
	}
}

// clusterStateInterval spaces the leader's cluster.json writes.
const clusterStateInterval = 10 * time.Second

// noteMove records an app starting to run on another node than before.
func (a *Controller) noteMove(st AppState, now time.Time) {
	running := ""
	if st.KubeStatus == KubeRunning {
		running = st.Node
	}
	if running == "" {
		return
	}
	prev := a.lastRunning[st.UUID]
	a.lastRunning[st.UUID] = running
	if prev == "" || prev == running {
		return
	}
	a.opts.Metrics.Migrations.Inc()
	msg := fmt.Sprintf("%s moved from %s to %s", st.Name, prev, running)
	a.timeline.Add(TimelineEvent{Time: now, Kind: EventMove, App: st.Name, Node: running, Message: msg})
	// One Kubernetes Event per move: from the node it moved to.
	if st.ClusterAppRunning {
		if obj := a.placed.workload(st.UUID); obj != nil {
			a.recorder.Event(obj, corev1.EventTypeNormal, "AppMoved", msg)
		}
	}
}

func (a *Controller) writeState(name string, v any) {
	if a.opts.StateDir == "" {
		return
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return
	}
	if err := config.WriteFileAtomic(filepath.Join(a.opts.StateDir, name), append(data, '\n'), 0o644); err != nil {
		a.log.Warn("state file", "file", name, "err", err)
	}
}

// noteOverrideRefusal puts a refused override on the timeline (and in the
// log and an Event) once per reason, and forgets it when it clears.
func (a *Controller) noteOverrideRefusal(uuid, app, refusal string, now time.Time) {
	if a.overrideRefused[uuid] == refusal {
		return
	}
	if refusal == "" {
		delete(a.overrideRefused, uuid)
		return
	}
	a.overrideRefused[uuid] = refusal
	a.log.Warn("on-site override refused", "app", app, "reason", refusal)
	a.timeline.Add(TimelineEvent{Time: now, Kind: EventRefusal, App: app, Node: a.opts.NodeName, Message: refusal, Warning: true})
}

// removeOverride drops a placement override the controller has overruled.
func (a *Controller) removeOverride(ctx context.Context, uuid string) {
	patch, _ := json.Marshal(map[string]any{"data": map[string]any{uuid: nil}})
	_, err := a.snap.Clients().Core.CoreV1().ConfigMaps(kube.AppNamespace).Patch(ctx, PlacementConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil && !apierrors.IsNotFound(err) {
		a.opts.Metrics.APIErrors.Inc()
		a.log.Error("remove stale placement override", "app", uuid, "err", err)
		return
	}
	a.timeline.Add(TimelineEvent{Time: time.Now(), Kind: EventPlacement, App: uuid,
		Message: "on-site placement override cleared: the controller set a new designated node"})
}
