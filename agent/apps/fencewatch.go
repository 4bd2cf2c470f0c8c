package apps

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/workloads"
	"github.com/sitecon/sitecon/kube"
)

// FenceOptions configure the fence watch (see DeriveFenceTimings).
type FenceOptions struct {
	// Disabled: the watch records and proves this node's contact with the
	// quorum (its peers need that to tell a cut-off pair from contact) but
	// never stops anything, and the failover timeout is used as given,
	// not raised to MinFailoverTimeout. The node's proof of life says so,
	// and the stats leader holds every force-delete of its pods.
	Disabled bool
	// APIReady checks that the API server answers ready (default: GET
	// /readyz, which fails while its etcd has no quorum).
	APIReady func(ctx context.Context) error
	// Stop stops the processes of the pods with these UIDs (default:
	// workloads.StopPods).
	Stop func(ctx context.Context, podUIDs []string) (workloads.Report, error)
	// Renew renews the stopped pods once the fence lifts (default:
	// delete those with no container running; see FenceWatch.Renew).
	Renew func(ctx context.Context, podUIDs []string) (done []string, err error)
	// PodsOnNode are the app namespace's pods this node's kubelet started,
	// read from the node alone (nil: none read; see FenceWatch.PodsOnNode).
	PodsOnNode func() ([]string, error)
}

// fenceSourcesEvery is how often the fence watch reads its peers and pods
// from the cluster cache while the API server answers (and its record
// follows them).
const fenceSourcesEvery = 10 * time.Second

// peerContactFresh is how recent a peer's own contact with a ready API
// server must be for its answer to count as this node's contact with the
// quorum: one of the peer's checks, its probe, and a second of spare.
const peerContactFresh = fenceCheckEvery + probeTimeout + time.Second

// FenceWatch checks every fenceCheckEvery whether this node is in contact
// with the side of the cluster that holds quorum: its API server ready, or
// failing that a peer's agent that proves (signed, LifeState) it reached a
// ready API server within peerContactFresh. Cut off past the bound, it
// stops this node's auto-migration apps' pods, again at every check while
// cut off (a kubelet that still runs starts them again). When it lifts,
// the pods it stopped are renewed (Renew): the kubelet's crash back-off,
// which each of those kills doubled, would keep the apps down for up to
// 5 minutes after the cut ended.
//
// It runs from the agent's start, before the API server has answered
// once: an agent restarted while its node is cut off fences too. Until
// the cluster cache holds the peers and the pods, it works from its
// durable record (RecordPath), written whenever they change.
type FenceWatch struct {
	Node string
	// Bound is the fence bound (DeriveFenceTimings' FenceAfter).
	Bound time.Duration
	// Disabled: see FenceOptions.Disabled.
	Disabled bool
	APIReady func(ctx context.Context) error
	// Peers are the other nodes as the cluster cache shows them (nil until
	// it has them).
	Peers func() []*corev1.Node
	// AutoPods are the UIDs of this node's auto apps' pods and of its
	// pinned apps' pods; known is false while nobody can tell (the apps
	// part not started, the cache empty).
	AutoPods func() (auto, pinned []string, known bool)
	// PodsOnNode are the app namespace's pods this node's kubelet
	// started, read from the node itself (the kubelet's pod log
	// directories): the fence stops each of them not known to be a pinned
	// app's, too, so that a pod the cache or the record missed (an agent
	// restarted cut off, its record unwritable on a full disk, or written
	// before the pods were known) is stopped all the same. nil: none.
	PodsOnNode func() ([]string, error)
	Probe      NodeProbe
	Stop       func(ctx context.Context, podUIDs []string) (workloads.Report, error)
	// Renew, once the fence lifts and the API server answers, deletes
	// the pods with these UIDs that the fence stopped and that have not
	// run again, so that their controllers start them afresh: the
	// kubelet would start them only after its crash back-off, which every
	// kill of a long cut doubles up to 5 minutes. It returns the UIDs
	// dealt with (deleted, gone, or running again). nil: none.
	Renew func(ctx context.Context, podUIDs []string) (done []string, err error)
	// Status receives this node's contact and fence, which its proof of
	// life signs.
	Status *config.LifeStatus
	// RecordPath is the durable record of the peers and the auto pods
	// ("": none; a restart cut off then knows neither).
	RecordPath string
	// Changed is called when the fence's reason changes (to "" when
	// lifted), and Timeline receives the fence and its lifting; both set
	// by Attach, under mu.
	Changed  func()
	Timeline *Timeline
	// BootClock reads the boot's ID and clock (default: bootClock).
	BootClock func() (bootID string, sinceBoot time.Duration, err error)
	Log       *slog.Logger

	mu sync.Mutex
	// writeMu orders the record's writes (flushRecord).
	writeMu    sync.Mutex
	reason     string
	record     fenceRecord
	controller *Controller
	// contact is the last contact with the quorum on the boot's clock, as
	// last written to the record (or read from it).
	contact *fenceContact
	// snap is the cluster cache, once connected (Connect).
	snap *kube.Snapshot
}

// Reason is why the watch stopped the auto apps' workloads ("": it did not).
func (w *FenceWatch) Reason() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reason
}

// Run checks until ctx ends.
func (w *FenceWatch) Run(ctx context.Context) {
	if w.Log == nil {
		w.Log = slog.New(slog.DiscardHandler)
	}
	w.loadRecord()
	start := time.Now()
	var st FenceState
	// A restart in the same boot counts the bound from the node's last
	// contact, not from its own start: the leader's timer counts from the
	// node's silence, and the restart (and bring-up) would make the fence
	// that much late.
	if ago, ok := w.lastContactAgo(); ok {
		st.ResumeFrom(ago, 0, start)
		w.Log.Info("counting the fence bound from this node's last contact with the quorum before the restart", "ago", ago.Round(time.Second), "bound", w.Bound)
	}
	tick := time.NewTicker(fenceCheckEvery)
	defer tick.Stop()
	// The peers and pods are read from the cache (a whole Data read, all
	// kinds) every fenceSourcesEvery while the API server answers, and at
	// every check while it does not: not once a second on a quiet site.
	var (
		peers     []*corev1.Node
		pods      []string
		pinned    []string
		podsKnown bool
		read      time.Time
		inContact bool
		// stopped are the pods stopped in this cut; renew those left to
		// renew since the fence lifted (renewSince).
		stopped    = map[string]bool{}
		renew      []string
		renewSince time.Time
		// said is the Node's settings the watch last fenced by
		// (effective), "" while its own.
		said string
	)
	for {
		if read.IsZero() || !inContact || time.Since(read) >= fenceSourcesEvery {
			peers, pods, pinned, podsKnown = w.sources()
			read = time.Now()
		}
		check := fenceCheckWith(ctx, w.APIReady, peers, w.Probe)
		now := time.Now()
		check.Mono, check.Wall = now.Sub(start), now
		inContact = check.APIReachable
		if check.APIReachable {
			w.Status.QuorumContact(now)
		}
		if check.APIReachable || check.PeerInContact {
			ago := time.Duration(0)
			if !check.APIReachable {
				ago = max(check.ContactAgo, 0)
			}
			w.noteContact(ago)
		}
		wasFenced := st.Fenced()
		bound, disabled, nodeSays := w.effective()
		if nodeSays != said {
			said = nodeSays
			w.followNodeSays(nodeSays, bound, disabled)
		}
		v := st.Observe(check, bound)
		switch {
		case v.Action == FenceStop && disabled:
			if !wasFenced {
				w.Log.Warn("cut off from the cluster, but this agent runs without fencing: its auto apps keep running, and the leader holds their failover", "reason", v.Reason)
			}
		case v.Action == FenceStop:
			// Said before it is done: whoever sees the pods gone finds
			// the reason already in the node's status.
			w.setReason(v.Reason)
			toStop, unknown, coveredAll, readErr := w.podsToStop(pods, pinned)
			stopCtx, cancel := context.WithTimeout(ctx, fenceStopBudget)
			rep, err := w.Stop(stopCtx, toStop)
			cancel()
			for _, uid := range toStop {
				stopped[uid] = true
			}
			renew = nil
			// The node's signed word that it fenced holds only while the
			// stop itself worked and the pods to stop were known, from the
			// cluster or from the node itself.
			w.Status.SetFenced(err == nil && (podsKnown || coveredAll), now)
			if !wasFenced {
				w.addEvent(TimelineEvent{Time: now, Kind: EventRefusal, Node: w.Node, Message: v.Reason, Warning: true})
			}
			// Once per cut while nothing changes: a node that knows no
			// pods yet (a first boot waiting for its seed) says so once,
			// not every second.
			if !wasFenced || len(rep.Killed) > 0 || err != nil {
				w.Log.Warn("fenced: cut off from the cluster", "reason", v.Reason, "pods", len(toStop), "pods known", podsKnown,
					"not known as a pinned app's", unknown, "killed", len(rep.Killed), "err", err, "node's own list", readErr)
			}
		case v.Action == FenceLift:
			w.Log.Info("fence lifted", "reason", v.Reason)
			w.Status.SetFenced(false, now)
			w.addEvent(TimelineEvent{Time: now, Kind: EventRefusal, Node: w.Node, Message: v.Reason})
			w.setReason("")
			renew, renewSince = slices.Sorted(maps.Keys(stopped)), now
			clear(stopped)
		}
		if len(renew) > 0 && !st.Fenced() && check.APIReachable && w.Renew != nil {
			renew = w.renewStopped(ctx, renew, now.Sub(renewSince))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// podsToStop are the pods a fence stops: the auto apps' pods, and every
// app pod the kubelet started here (PodsOnNode) that is not known to be a
// pinned app's. unknown counts the latter; coveredAll says the node's own
// list was read, so that nothing it runs in the app namespace was missed.
func (w *FenceWatch) podsToStop(auto, pinned []string) (toStop []string, unknown int, coveredAll bool, readErr error) {
	toStop = slices.Clone(auto)
	if w.PodsOnNode == nil {
		return toStop, 0, false, nil
	}
	onNode, err := w.PodsOnNode()
	if err != nil {
		// Said with the fence (once per cut): it stops only the pods the
		// cluster or its record named.
		return toStop, 0, false, fmt.Errorf("the app pods this node runs could not be read from the node: %w", err)
	}
	for _, uid := range onNode {
		if !slices.Contains(pinned, uid) && !slices.Contains(toStop, uid) {
			toStop = append(toStop, uid)
			unknown++
		}
	}
	return toStop, unknown, true, nil
}

func (w *FenceWatch) setReason(why string) {
	w.mu.Lock()
	changed := w.reason != why
	w.reason = why
	notify := w.Changed
	w.mu.Unlock()
	if changed && notify != nil {
		notify()
	}
}

// addEvent puts ev on the attached controller's timeline, if any.
func (w *FenceWatch) addEvent(ev TimelineEvent) {
	w.mu.Lock()
	tl := w.Timeline
	w.mu.Unlock()
	if tl != nil {
		tl.Add(ev)
	}
}

// sources are the peers and the auto pods to fence: from the cluster
// cache and the apps part when they have them (the record follows them),
// else from the record. podsKnown is false when neither knows the pods.
func (w *FenceWatch) sources() (peers []*corev1.Node, pods, pinned []string, podsKnown bool) {
	for _, n := range w.Peers() {
		if n.Name != w.Node {
			peers = append(peers, n)
		}
	}
	pods, pinned, podsKnown = w.AutoPods()
	rec := fenceRecord{Node: w.Node, AutoPods: slices.Sorted(slices.Values(pods)), PinnedPods: slices.Sorted(slices.Values(pinned)), PodsKnown: &podsKnown}
	for _, n := range peers {
		if addr := internalIP(n); addr != "" {
			rec.Peers = append(rec.Peers, fencePeer{Name: n.Name, Address: addr})
		}
	}
	w.mu.Lock()
	last := w.record
	rec.Contact = w.contact
	w.mu.Unlock()
	if len(peers) == 0 {
		rec.Peers = last.Peers
		for _, p := range last.Peers {
			peers = append(peers, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: p.Name},
				Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: p.Address}}}})
		}
	}
	if !podsKnown {
		rec.AutoPods, pods = last.AutoPods, last.AutoPods
		rec.PinnedPods, pinned = last.PinnedPods, last.PinnedPods
		podsKnown = last.podsKnown()
		rec.PodsKnown = &podsKnown
	}
	if !slices.Equal(rec.AutoPods, last.AutoPods) || !slices.Equal(rec.PinnedPods, last.PinnedPods) || !slices.Equal(rec.Peers, last.Peers) || podsKnown != last.podsKnown() {
		w.saveRecord(rec)
	}
	return peers, pods, pinned, podsKnown
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// fenceCheckWith is one check: the API server first, then, only when it is
// not ready, every peer at once, each bounded by probeTimeout. A peer is
// contact only when its agent proves, signed, that it reached a ready API
// server within peerContactFresh: a peer that is itself cut off (the other
// half of a cut-off pair) is no contact.
func fenceCheckWith(ctx context.Context, apiReady func(context.Context) error, peers []*corev1.Node, probe NodeProbe) FenceCheck {
	apiCtx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if apiReady(apiCtx) == nil {
		return FenceCheck{APIReachable: true}
	}
	// The peers are asked after the API check: their ages are counted
	// from then, so the time the probes take only makes them older.
	asked := time.Now()
	contactAgo := make(chan time.Duration, len(peers))
	var wg sync.WaitGroup
	for _, n := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			if ago, ok := peerInContact(probe(pctx, n)); ok {
				contactAgo <- ago
			}
		}()
	}
	wg.Wait()
	close(contactAgo)
	check := FenceCheck{}
	for ago := range contactAgo {
		if !check.PeerInContact || ago < check.ContactAgo {
			check.PeerInContact, check.ContactAgo = true, ago
		}
	}
	// As of the check's end (its Mono): the probes' own time added.
	check.ContactAgo += time.Since(asked)
	return check
}

// peerInContact: the peer's own agent proved that it runs and that it
// reached a ready API server within peerContactFresh; ago is how long
// before it answered.
func peerInContact(life NodeLife) (ago time.Duration, ok bool) {
	if life.Evidence != LifeProven && life.Evidence != LifeFenced || life.State == nil {
		return 0, false
	}
	ago, ok = life.State.QuorumContactAgo()
	return ago, ok && ago <= peerContactFresh
}

// NewFenceWatch is the fence watch of the node opts names, with its
// durable record in opts.StateDir. It runs before the cluster cache
// exists (the agent starts it first, before its bring-up asks its peers
// or starts k3s): until Connect, the API server counts as unreachable and
// the peers and pods are the record's. Once connected, until an apps
// controller attaches (Attach), the auto pods are every app pod the cache
// shows on this node once it has synced (no config tells a pinned one).
func NewFenceWatch(opts Options, status *config.LifeStatus) *FenceWatch {
	opts = opts.withFenceDefaults(nil)
	w := &FenceWatch{Node: opts.NodeName, Bound: DeriveFenceTimings(opts.FailoverTimeout).FenceAfter, Disabled: opts.Fence.Disabled,
		Probe: opts.NodeProbe, Stop: opts.Fence.Stop, Status: status, Log: opts.Log}
	apiReady := opts.Fence.APIReady
	w.APIReady = func(ctx context.Context) error {
		w.mu.Lock()
		snap := w.snap
		w.mu.Unlock()
		switch {
		case apiReady != nil:
			return apiReady(ctx)
		case snap == nil:
			return errors.New("not connected to the cluster yet (this agent's bring-up has not linked it)")
		}
		return snapAPIReady(snap)(ctx)
	}
	w.Peers = func() []*corev1.Node {
		w.mu.Lock()
		snap := w.snap
		w.mu.Unlock()
		if snap == nil {
			return nil
		}
		if d, ok := snap.BasicsData(); ok {
			return d.Nodes
		}
		return snap.Data().Nodes
	}
	if opts.StateDir != "" {
		w.RecordPath = filepath.Join(opts.StateDir, FenceRecordFile)
	}
	w.Renew = opts.Fence.Renew
	if w.Renew == nil {
		w.Renew = w.renewStoppedPods
	}
	w.PodsOnNode = opts.Fence.PodsOnNode
	w.AutoPods = func() ([]string, []string, bool) {
		w.mu.Lock()
		c, snap := w.controller, w.snap
		w.mu.Unlock()
		switch {
		case c != nil:
			return c.autoPodsHere()
		case snap == nil:
			return nil, nil, false
		}
		return appPodsHere(snap, opts.NodeName, nil)
	}
	return w
}

// Connect gives the watch the cluster cache, once the bring-up linked it:
// from then on the API check, the peers and the pods are the cache's.
func (w *FenceWatch) Connect(snap *kube.Snapshot) {
	w.mu.Lock()
	w.snap = snap
	w.mu.Unlock()
}

// Attach lets the apps controller c say which pods are auto apps' (its
// configs know the pinned ones) and receive the fence's changes.
func (w *FenceWatch) Attach(c *Controller) {
	w.mu.Lock()
	w.controller = c
	w.Changed, w.Timeline = c.notify, c.timeline
	w.mu.Unlock()
}

// autoPodsHere are the UIDs of the pods on this node, as last seen, of
// apps that migrate, and of the pinned apps (whose pods stay: nobody else
// will run them). An app pod whose app this node has no config for is
// stopped too: it cannot be shown pinned, and the majority side may move it.
func (c *Controller) autoPodsHere() ([]string, []string, bool) {
	c.mu.Lock()
	set := c.set
	c.mu.Unlock()
	return appPodsHere(c.snap, c.opts.NodeName, func(uuid string) bool {
		app, ok := set.Apps[uuid]
		return ok && app.Pinned()
	})
}

// appPodsHere are the UIDs of the app pods on node, the pinned apps' (and
// any pod of no app, which nothing moves) apart; known is false until the cache has synced once (an empty list
// before then is not the cluster's).
func appPodsHere(snap *kube.Snapshot, node string, isPinned func(uuid string) bool) (auto, pinned []string, known bool) {
	if !snap.Synced() {
		return nil, nil, false
	}
	auto = []string{}
	for _, p := range snap.Data().Pods {
		if p.Namespace != kube.AppNamespace || p.Spec.NodeName != node {
			continue
		}
		uuid := p.Labels[kube.LabelAppUUID]
		switch {
		case uuid == "" || isPinned != nil && isPinned(uuid):
			// Spared: a pinned app's, or no app's (nothing moves it).
			pinned = append(pinned, string(p.UID))
		default:
			auto = append(auto, string(p.UID))
		}
	}
	return auto, pinned, true
}

// snapAPIReady is the default API check: GET /readyz through the cache's
// clients.
func snapAPIReady(snap *kube.Snapshot) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		return snap.Clients().Core.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	}
}
