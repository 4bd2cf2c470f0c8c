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

// reconcile is one pass, in the steps a controller-runtime reconciler
// takes: read what is (observe), follow this node's status and the stats
// leader (followNodes, followLeader), decide per app (decideApps), publish
// what is seen (publishSeen), then, with a synced cache and an API server
// that answers, make the cluster match (act) and publish what acting
// found. It returns when it wants to run again without a change (0: no).
func (c *Controller) reconcile(ctx context.Context, woke time.Time) time.Duration {
	obs := c.observe()
	c.noteBadOverrides(obs.badOverrides)
	c.followNodes(obs.data, obs.synced, obs.now)
	c.followLeader(obs.now)
	verdicts := c.decideApps(obs)
	seen := c.publishSeen(obs, verdicts.states, woke)
	if !obs.synced || !obs.data.Health.Connected {
		// Nothing to act on: the decisions rest on a cache that is not
		// whole, or there is no API server to write to.
		return 0
	}
	next := c.act(ctx, obs, verdicts)
	if !reflect.DeepEqual(seen, verdicts.states) {
		// Acting found something new: an apply refused or mended, a
		// failover taken.
		c.publish(verdicts.states, obs.data, obs.nodes, obs.synced, woke)
	}
	return next
}

// observation is what one pass reads, once, so that every step of the pass
// decides from the same picture: the snapshot's data, the config, and the
// indexes the decisions look things up in.
type observation struct {
	data   kube.Data
	synced bool
	now    time.Time
	// set is the config, with the placement ConfigMap's unusable
	// overrides added to its errors.
	set AppSet
	// nodes by name; nodeByUUID maps a node-uuid label (lower case) to
	// its node's name.
	nodes      map[string]*corev1.Node
	nodeByUUID map[string]string
	// myUUID is this node's UUID, lower case (from the options, or else
	// from its Node's label).
	myUUID    string
	overrides map[string]PlacementOverride
	// badOverrides are the placement entries that do not parse, by app
	// UUID (lower case): refused, and reported (Node's config_errors).
	badOverrides map[string]string
	// apps is what the cluster shows of each app, by UUID.
	apps map[string]AppObservation
}

// observe reads the snapshot and the config set once for the pass and
// indexes them. It writes nothing: the steps after it act on what it read.
func (c *Controller) observe() observation {
	obs := observation{data: c.snap.Data(), synced: c.snap.Synced(), now: time.Now()}
	c.mu.Lock()
	obs.set = c.set
	c.mu.Unlock()

	obs.nodes = map[string]*corev1.Node{}
	obs.nodeByUUID = map[string]string{}
	for _, n := range obs.data.Nodes {
		obs.nodes[n.Name] = n
		if u := n.Labels[kube.LabelNodeUUID]; u != "" {
			obs.nodeByUUID[strings.ToLower(u)] = n.Name
		}
	}
	obs.myUUID = strings.ToLower(c.opts.NodeUUID)
	if own, ok := obs.nodes[c.opts.NodeName]; ok && obs.myUUID == "" {
		obs.myUUID = strings.ToLower(own.Labels[kube.LabelNodeUUID])
	}

	var placementCM *corev1.ConfigMap
	for _, cm := range obs.data.ConfigMaps {
		if cm.Name == PlacementConfigMapName {
			placementCM = cm
		}
	}
	overrides, badOverrides := ParseOverrides(placementCM)
	obs.overrides = overrides
	obs.badOverrides = map[string]string{}
	for uuid, msg := range badOverrides {
		obs.badOverrides[strings.ToLower(uuid)] = msg
	}
	obs.apps = ObserveApps(obs.data)
	return obs
}

// nodeIsReady says whether the named node is in the cluster and Ready.
func (obs observation) nodeIsReady(name string) bool {
	n, ok := obs.nodes[name]
	return ok && kube.NodeIsReady(n)
}

// appVerdicts are the pass's decisions for every configured app.
type appVerdicts struct {
	// states are what this node publishes about each app, sorted by UUID;
	// acting adds to them what it finds (errors, failover verdicts).
	states    []PublishedApp
	decisions map[string]AppDecision
	// staleOverrides are the apps whose on-site override the controller
	// has overruled and this node is to remove.
	staleOverrides []string
}

// decideApps decides, app by app, which node each app belongs on and what
// this node does about it. Apart from noting override refusals on the
// timeline it changes nothing: the decisions are published before they are
// acted on.
func (c *Controller) decideApps(obs observation) appVerdicts {
	v := appVerdicts{decisions: map[string]AppDecision{}}
	for _, uuid := range slices.Sorted(maps.Keys(obs.set.Apps)) {
		app := obs.set.Apps[uuid]
		o := obs.apps[uuid]
		o.Synced, o.Connected = obs.synced, obs.data.Health.Connected
		placement := c.resolveOverride(obs, app, uuid, o)
		if placement.removeStale {
			v.staleOverrides = append(v.staleOverrides, uuid)
		}
		c.noteOverrideRefusal(uuid, app.DisplayName, placement.refusal, obs.now)
		dec := DecideApp(app, placement.dnid, obs.myUUID, c.opts.NodeName, o)
		v.decisions[uuid] = dec
		v.states = append(v.states, publishedApp(obs, uuid, app, o, placement, dec))
	}
	// The refusals are remembered per configured app: an app that left
	// the config is forgotten.
	for uuid := range c.overrideRefused {
		if _, ok := obs.set.Apps[uuid]; !ok {
			delete(c.overrideRefused, uuid)
		}
	}
	return v
}

// overrideVerdict is where an app is designated once its on-site override,
// if any, has been weighed.
type overrideVerdict struct {
	// dnid is the designated node's UUID in effect; active the override
	// that designates it (nil: the config's DNId).
	dnid   string
	active *PlacementOverride
	// refusal says why an override was not followed ("": it was, or
	// there is none).
	refusal string
	// removeStale: the override is stale and this node removes it.
	removeStale bool
}

// resolveOverride weighs an app's on-site override against its config.
// An override is re-checked here, not only by whoever wrote it; a refused
// one is reported and the config's DNId stands.
func (c *Controller) resolveOverride(obs observation, app AppConfig, uuid string, o AppObservation) overrideVerdict {
	var ov *PlacementOverride
	if x, ok := obs.overrides[uuid]; ok {
		ov = &x
	}
	var v overrideVerdict
	var stale bool
	v.dnid, v.active, stale = EffectiveDNId(app, ov)
	if msg := obs.badOverrides[uuid]; msg != "" && ov == nil {
		// An entry that does not parse names no node: the config's DNId
		// stands, and the entry is refused where it can be seen.
		v.refusal = msg
	}
	// A worker leaves a stale override where it is: it has no effect
	// (the config's DNId stands) and its identity may not remove it.
	v.removeStale = stale && app.DesignatedNodeID == obs.myUUID && !c.opts.NodeIdentity
	// Without a synced cache there are no nodes to check against: nothing
	// is placed then anyway.
	if v.active != nil && obs.synced {
		if v.refusal = CheckOverride(app, v.active, obs.nodes[obs.nodeByUUID[v.dnid]], cmp.Or(o.RunningNode, o.ScheduledNode)); v.refusal != "" {
			v.dnid, v.active = app.DesignatedNodeID, nil
		}
	}
	return v
}

// publishedApp is what this node publishes about one app, from what the
// cluster shows of it and what was decided.
func publishedApp(obs observation, uuid string, app AppConfig, o AppObservation, placement overrideVerdict, dec AppDecision) PublishedApp {
	st := PublishedApp{
		UUID: uuid, Name: app.DisplayName, Kind: app.Kind, Pinned: app.Pinned(),
		EffectiveDNId: placement.dnid, DNIdNode: obs.nodeByUUID[placement.dnid], Override: placement.active,
		Activate: dec.Activate, IsDNIdNode: dec.IsDNIdNode, ScheduledOnThisNode: dec.ScheduledOnThisNode,
		KubeStatus: dec.KubeStatus, ClusterAppRunning: dec.ClusterAppRunning,
		Node: cmp.Or(o.RunningNode, o.ScheduledNode), VMIName: o.VMIName,
	}
	if dec.Place && obs.synced && st.DNIdNode == "" {
		st.Error = fmt.Sprintf("designated node %s is not in the cluster", placement.dnid)
	}
	if placement.refusal != "" {
		st.Error = placement.refusal
	}
	st.Lost = PinnedLost(app, st.Node, st.DNIdNode, obs.nodes)
	return st
}

// publishSeen publishes what is seen before acting on it: where an app runs
// (cluster_app_running) must not wait on the writes of act, which a slow
// API server can hold up. It carries what placement found wrong last time,
// so an error that holds is not dropped and put back every pass. It returns
// what it published, for the pass to tell whether acting changed it.
func (c *Controller) publishSeen(obs observation, states []PublishedApp, woke time.Time) []PublishedApp {
	seen := slices.Clone(states)
	for i := range seen {
		if msg := c.placementErrors[seen[i].UUID]; msg != "" && seen[i].Error == "" {
			seen[i].Error = msg
		}
	}
	c.publishVolumes(VolumeStates(obs.set.Volumes, obs.myUUID, c.opts.NodeName, obs.nodeByUUID, obs.data))
	// publish stamps the states it is given: it gets its own copy.
	c.publish(slices.Clone(seen), obs.data, obs.nodes, obs.synced, woke)
	return seen
}

// act makes the cluster match the decisions: it lays out this node's apps
// (place), removes the overrides the controller overruled, and, on the
// stats leader, judges the pods stuck on lost nodes (failover). What it
// finds goes into verdicts.states. It returns when it wants to run again
// (0: no).
func (c *Controller) act(ctx context.Context, obs observation, verdicts appVerdicts) time.Duration {
	if c.placed == nil {
		// The watches on what this node laid out live as long as the
		// controller, not as long as one pass.
		watchNADs, err := c.watchNADs()
		if err != nil {
			c.log.Warn("discovery of network attachments", "err", err)
			return applyRetry
		}
		c.placed = newPlacedCache(c.dyn, obs.data.HasKubeVirt, watchNADs, c.wake)
		c.placed.start(ctx)
	}
	// Every write of this pass shares one deadline: a hung API server
	// delays the next pass, never forever.
	ctx, cancel := context.WithTimeout(ctx, actTimeout)
	defer cancel()
	next := time.Duration(0)
	// The record first: the workers' layouts wait on it.
	if c.recordDesignations(ctx, obs, verdicts.states) {
		next = applyRetry
	}
	if retry := c.place(ctx, obs.set, verdicts.decisions, verdicts.states, recordIn(obs.data), obs.myUUID, c.claimWriter(obs), obs.nodeIsReady, obs.data.VMIs, obs.now); retry > 0 {
		next = retry
	}
	for _, uuid := range verdicts.staleOverrides {
		c.removeOverride(ctx, uuid)
	}
	if wait := c.failoverIfLeader(ctx, obs, verdicts.states); wait > 0 && (next == 0 || wait < next) {
		next = wait
	}
	return next
}

// watchNADs says whether this agent watches (and so lays out) network
// attachments: the cluster serves them (Multus's CRD is installed) and the
// agent is a server's, not a worker's, whose identity is granted no
// attachment (kube.AgentLayoutRules): an attachment is shared by every
// node, so one node's identity must not write it for all. Discovery that
// fails is an error, not "absent": the caller tries again.
func (c *Controller) watchNADs() (bool, error) {
	if c.opts.NodeIdentity {
		return false, nil
	}
	list, err := c.snap.Clients().Core.Discovery().ServerResourcesForGroupVersion(GVRNAD.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == GVRNAD.Resource }), nil
}

// failoverIfLeader judges the pods stuck on lost nodes when this node is
// the stats leader: one node judges, so two cannot force-delete on
// different evidence. A node that does not lead forgets its sightings: a
// leader's timer is its own, and one that leads again later starts afresh.
func (c *Controller) failoverIfLeader(ctx context.Context, obs observation, states []PublishedApp) time.Duration {
	if !c.opts.Leader().IsLeader {
		clear(c.stuck)
		clear(c.nodeSilence)
		clear(c.releaseChecked)
		c.releasesListed = time.Time{}
		return 0
	}
	return c.failover(ctx, obs.set, obs.apps, obs.nodes, obs.data, states, obs.now)
}

// claimWriter says whose volumes' claims this node writes (lays out, and
// hands over when the volume moves), by designated node UUID. Its own,
// unless it reaches the cluster with its node's own identity: Kubernetes'
// NodeRestriction admits no claim from a node (only a claim's status), so
// a worker cannot write its volumes' claims. The stats leader, a server,
// writes those: the claims of the volumes designated to a node without the
// server role. Both write the same layout (its designated node stamped as
// the layout's), so where both can, as on a site whose agents all hold
// admin credentials, the second finds it written and writes nothing.
func (c *Controller) claimWriter(obs observation) func(dnid string) bool {
	leads := !c.opts.NodeIdentity && c.opts.Leader().IsLeader
	return func(dnid string) bool {
		if strings.EqualFold(dnid, obs.myUUID) {
			return !c.opts.NodeIdentity
		}
		n := obs.nodes[obs.nodeByUUID[strings.ToLower(dnid)]]
		return leads && n != nil && !kube.IsServer(n)
	}
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

func (c *Controller) followLeader(now time.Time) {
	l := c.opts.Leader()
	if l.IsLeader {
		c.opts.Metrics.Leader.Set(1)
	} else {
		c.opts.Metrics.Leader.Set(0)
	}
	if l.Leader != c.leaderSeen {
		if l.Leader != "" {
			c.timeline.Add(TimelineEvent{Time: now, Kind: EventLeader, Node: l.Leader, Message: "stats leader is " + l.Leader})
		}
		c.leaderSeen = l.Leader
	}
	if !l.IsLeader && c.opts.StateDir != "" {
		// Only the leader's cluster-wide stats are to be trusted.
		_ = os.Remove(filepath.Join(c.opts.StateDir, "cluster.json"))
	}
}

// noteOverrideRefusal puts a refused override on the timeline (and in the
// log and an Event) once per reason, and forgets it when it clears.
func (c *Controller) noteOverrideRefusal(uuid, app, refusal string, now time.Time) {
	if c.overrideRefused[uuid] == refusal {
		return
	}
	if refusal == "" {
		delete(c.overrideRefused, uuid)
		return
	}
	c.overrideRefused[uuid] = refusal
	c.log.Warn("on-site override refused", "app", app, "reason", refusal)
	c.timeline.Add(TimelineEvent{Time: now, Kind: EventRefusal, App: app, Node: c.opts.NodeName, Message: refusal, Warning: true})
}

// noteBadOverrides keeps the pass's unusable placement entries for Node
// (config_errors, keyed as the ConfigMap's name and the entry's key).
func (c *Controller) noteBadOverrides(bad map[string]string) {
	errs := map[string]string{}
	for uuid, msg := range bad {
		errs[PlacementConfigMapName+"/"+uuid] = msg
	}
	c.mu.Lock()
	c.overrideErrors = errs
	c.mu.Unlock()
}

// removeOverride drops a placement override the controller has overruled.
func (c *Controller) removeOverride(ctx context.Context, uuid string) {
	patch, _ := json.Marshal(map[string]any{"data": map[string]any{uuid: nil}})
	_, err := c.snap.Clients().Core.CoreV1().ConfigMaps(kube.AppNamespace).Patch(ctx, PlacementConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil && !apierrors.IsNotFound(err) {
		c.opts.Metrics.APIErrors.Inc()
		c.log.Error("remove stale placement override", "app", uuid, "err", err)
		return
	}
	c.timeline.Add(TimelineEvent{Time: time.Now(), Kind: EventPlacement, App: uuid,
		Message: "on-site placement override cleared: the controller set a new designated node"})
}
