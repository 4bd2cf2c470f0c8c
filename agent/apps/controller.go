package apps

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	// FailoverTimeout is how long the leader times a pod on an
	// unreachable node (from its first sighting there) before it may
	// force-delete it, once evicted (default DefaultFailoverTimeout).
	FailoverTimeout time.Duration
	// Fence configures the fence watch: a node cut off from the others
	// stops its auto apps' workloads before the leader may force-delete
	// them (DeriveFenceTimings).
	Fence FenceOptions
	// FenceWatch is this node's running fence watch, started by the agent
	// before the cluster answers (NewFenceWatch); the controller attaches
	// to it. Nil: no fence watch (tests of the apps part alone).
	FenceWatch *FenceWatch
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
	apps        []PublishedApp
	volumes     []VolumeState
	node        PublishedNode
	changes     kube.Broadcast

	// Only the reconcile loop touches these.
	placed      *placedCache
	lastRunning map[string]string
	nodeReady   map[string]bool
	// stuck is the stats leader's own record of each pod stuck on a lost
	// node, by UID; pruned with the pods (and cleared when not leading).
	stuck map[types.UID]*stuckPod
	// nodeSilence is, for each lost node this leader probed, its first
	// silent probe since the node's last sign of life (monotonic): a
	// release of its volumes counts the silence from there (probeNode).
	nodeSilence map[string]time.Time
	// timeoutWarned is the last failover-timeout warning logged.
	timeoutWarned string
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
	// portRefused is the host-port refusal last reported per app UUID.
	portRefused map[string]string
	// overrideErrors are the placement ConfigMap's unusable entries as the
	// last pass found them (under mu; Node adds them to config_errors).
	overrideErrors map[string]string
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

// DefaultFailoverTimeout is how long the failover guard times a pod on a
// lost node before it judges it, unless configured: short enough for the
// failover budget (agent.FailoverBudget), long enough that the fence bound
// it derives (16.2 s) outlasts a 10 s blink of the node's link.
const DefaultFailoverTimeout = 28 * time.Second

// EffectiveFailoverTimeout is the failover timeout opts run with: the
// leader's timer and the fence bound come from one derivation, so a timer
// too short to fence before is raised (unless the node does not fence).
func (opts Options) EffectiveFailoverTimeout() time.Duration {
	t := cmp.Or(opts.FailoverTimeout, DefaultFailoverTimeout)
	if !opts.Fence.Disabled {
		t = DeriveFenceTimings(t).ForceDeleteAfter
	}
	return t
}

// withFenceDefaults fills what the fence watch and the failover guard
// share: the timeout, the API check (with a cache; the fence watch makes
// its own until it is connected), the stop and the life probe.
func (opts Options) withFenceDefaults(snap *kube.Snapshot) Options {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	opts.FailoverTimeout = opts.EffectiveFailoverTimeout()
	if opts.Fence.APIReady == nil && snap != nil {
		opts.Fence.APIReady = snapAPIReady(snap)
	}
	if opts.Fence.Stop == nil {
		opts.Fence.Stop = workloads.StopPods
	}
	if opts.NodeProbe == nil {
		// The timeout a fence counts with is compared where the cluster's
		// is known: the failover pass (FencedWithin).
		opts.NodeProbe = LifeProbe{Key: opts.LifeKey, Dial: opts.ProbeDial}.Node
	}
	return opts
}

// New prepares the apps controller over a started snapshot.
func New(opts Options, snap *kube.Snapshot) (*Controller, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	opts = opts.withFenceDefaults(snap)
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
		nodeSilence:     map[string]time.Time{},
		releaseChecked:  map[types.UID]releaseCheck{},
		lostSeen:        map[string]bool{},
		overrideRefused: map[string]string{},
		portRefused:     map[string]string{},
		node:            PublishedNode{Node: opts.NodeName, Status: PublishedDown, Since: time.Now(), Reason: "not connected yet"},
	}, nil
}

// Apps returns the published app states, sorted by name.
func (c *Controller) Apps() []PublishedApp {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.apps)
}

// Volumes returns the configured volumes as last published.
func (c *Controller) Volumes() []VolumeState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.volumes)
}

// Node returns this node's published status.
func (c *Controller) Node() PublishedNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.node
	n.ConfigErrors = maps.Clone(c.set.Errors)
	if len(c.overrideErrors) > 0 {
		if n.ConfigErrors == nil {
			n.ConfigErrors = map[string]string{}
		}
		maps.Copy(n.ConfigErrors, c.overrideErrors)
	}
	if c.opts.FenceWatch != nil {
		n.Fence = c.opts.FenceWatch.Reason()
	}
	return n
}

// Timeline returns the agent's events, newest first.
func (c *Controller) Timeline() []TimelineEvent { return c.timeline.Events() }

// Subscribe returns a channel that receives a value after the published
// state changed (coalesced), and a function to unsubscribe.
func (c *Controller) Subscribe() (<-chan struct{}, func()) { return c.changes.Subscribe() }

func (c *Controller) notify() { c.changes.Notify() }

func (c *Controller) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}
