package apps

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sitecon/sitecon/kube"
)

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
