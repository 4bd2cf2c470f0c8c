package apps

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
)

// PublishedApp is what this node's agent publishes about one configured
// app: its own gating verdict (activate, is_dnid_node, cluster_app_running)
// beside what Kubernetes shows of the app from here. It is a contract with
// its readers (the local socket's /v1/apps and apps.json, which the
// console's agent summary reads too): the JSON names and values stay as
// they are. Not kube.AppStatus, which is the cluster's view of an app as
// the console and `sitecon status` show it (every app found in the
// cluster, seen from no node in particular).
type PublishedApp struct {
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

// PublishedNode is this node's status as its agent publishes it (the local
// socket's /v1/node, node.json): see PublishedNodeStatus.
type PublishedNode struct {
	Node   string              `json:"node"`
	UUID   string              `json:"uuid,omitempty"`
	Status PublishedNodeStatus `json:"status"`
	Since  time.Time           `json:"since"`
	Reason string              `json:"reason,omitempty"`
	// ConfigErrors are the app and volume files that could not be used, by path.
	ConfigErrors map[string]string `json:"config_errors,omitempty"`
	// Fence says why this node stopped its auto apps' workloads (cut off
	// from the cluster past the fence bound); empty when it did not.
	Fence string `json:"fence,omitempty"`
}

// PublishedNodeStatus is the agent's published status of its own node:
// READY, NOTREADY (the cluster says so) or DOWN (the API server does not
// answer), the three a cluster node's status takes in EVE. The values are
// a contract with the readers of /v1/node and node.json and stay as they
// are. Not kube.NodeReady / NodeNotReady / NodeUnknown ("Ready", ...): those
// are any node's Kubernetes readiness, as its Ready condition says it,
// which cannot say DOWN.
type PublishedNodeStatus string

// The published node statuses.
const (
	PublishedReady    PublishedNodeStatus = "READY"
	PublishedNotReady PublishedNodeStatus = "NOTREADY"
	PublishedDown     PublishedNodeStatus = "DOWN"
)

// followNodes records node readiness transitions and this node's status.
func (c *Controller) followNodes(d kube.Data, synced bool, now time.Time) {
	st := PublishedNode{Node: c.opts.NodeName, UUID: c.opts.NodeUUID}
	switch {
	case !d.Health.Connected:
		st.Status, st.Since, st.Reason = PublishedDown, d.Health.Since, d.Health.LastError
		if st.Reason == "" {
			st.Reason = "not connected yet"
		}
	case !synced:
		st.Status, st.Since, st.Reason = PublishedDown, now, "reading the cluster"
	default:
		st.Status, st.Since, st.Reason = PublishedNotReady, now, "no Node object named "+c.opts.NodeName
	}
	for _, n := range d.Nodes {
		ready := kube.NodeIsReady(n)
		if synced && d.Health.Connected && n.Name == c.opts.NodeName {
			st.Status, st.Since, st.Reason = PublishedNotReady, readySince(n), "the cluster marks it not ready"
			if ready {
				st.Status, st.Reason = PublishedReady, ""
			}
			st.UUID = cmp.Or(st.UUID, n.Labels[kube.LabelNodeUUID])
		}
		if was, seen := c.nodeReady[n.Name]; seen && was != ready {
			msg := n.Name + " is Ready"
			if !ready {
				msg = n.Name + " is not Ready"
			}
			c.timeline.Add(TimelineEvent{Time: now, Kind: EventNode, Node: n.Name, Message: msg, Warning: !ready})
		}
		if synced {
			c.nodeReady[n.Name] = ready
		}
	}
	if synced {
		// A node gone from the cluster (removed, replaced under another
		// name) is forgotten: over years of churn the memory would grow.
		maps.DeleteFunc(c.nodeReady, func(name string, _ bool) bool {
			return !slices.ContainsFunc(d.Nodes, func(n *corev1.Node) bool { return n.Name == name })
		})
	}
	c.mu.Lock()
	if c.node.Status == st.Status && c.node.Reason == st.Reason {
		st.Since = c.node.Since
	}
	changed := !reflect.DeepEqual(c.node, st)
	c.node = st
	c.mu.Unlock()
	if changed {
		c.writeState("node.json", c.Node())
		c.notify()
	}
}

// publishVolumes publishes the volumes when they changed (volumes.json,
// /v1/volumes).
func (c *Controller) publishVolumes(vols []VolumeState) {
	c.mu.Lock()
	changed := !reflect.DeepEqual(c.volumes, vols)
	c.volumes = vols
	c.mu.Unlock()
	if changed {
		c.writeState("volumes.json", vols)
		c.notify()
	}
}

// publish stores the app states, notes moves, and writes the state files.
func (c *Controller) publish(states []PublishedApp, d kube.Data, nodes map[string]*corev1.Node, synced bool, woke time.Time) {
	now := time.Now()
	c.mu.Lock()
	prev := map[string]PublishedApp{}
	for _, st := range c.apps {
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
	changed := !reflect.DeepEqual(c.apps, states)
	c.apps = states
	c.mu.Unlock()

	counts := map[KubeStatus]int{}
	for _, st := range states {
		counts[st.KubeStatus]++
		c.noteMove(st, now)
		if st.Lost != nil && !c.lostSeen[st.UUID] {
			msg := fmt.Sprintf("pinned app %s is on lost node %s (since %s); not moved", st.Name, st.Lost.Node, st.Lost.Since.Format(time.TimeOnly))
			c.timeline.Add(TimelineEvent{Time: now, Kind: EventRefusal, App: st.Name, Node: st.Lost.Node, Warning: true, Message: msg})
			// One Kubernetes Event for the cluster: from the stats leader.
			if obj := c.placed.workload(st.UUID); obj != nil && c.opts.Leader().IsLeader {
				c.recorder.Event(obj, corev1.EventTypeWarning, "PinnedAppNodeLost", msg)
			}
		}
		c.lostSeen[st.UUID] = st.Lost != nil
	}
	// states holds every configured app: an app that left the config is
	// forgotten, so the memory follows the config, not its history.
	configured := map[string]bool{}
	for _, st := range states {
		configured[st.UUID] = true
	}
	maps.DeleteFunc(c.lastRunning, func(uuid, _ string) bool { return !configured[uuid] })
	maps.DeleteFunc(c.lostSeen, func(uuid string, _ bool) bool { return !configured[uuid] })
	for _, s := range []KubeStatus{KubeUnknown, KubeAPIUnreachable, KubeNotInCluster, KubeNotRunning, KubeRunning} {
		c.opts.Metrics.Apps.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
	if runningChanged {
		c.opts.Metrics.DetectionLatency.Observe(now.Sub(woke).Seconds())
	}
	if changed {
		c.writeState("apps.json", states)
		c.notify()
	}
	if v := c.timeline.Version(); v != c.timelineWritten {
		c.timelineWritten = v
		c.writeState("events.json", c.timeline.Events())
	}
	// The cluster-wide view changes with every lease renewal and Longhorn
	// status; on device flash, once per clusterStateInterval is plenty (EVE
	// itself publishes cluster stats every 10 s).
	if synced && c.opts.Leader().IsLeader && now.Sub(c.clusterWritten) >= clusterStateInterval {
		c.clusterWritten = now
		c.writeState("cluster.json", kube.Derive(d, now))
	}
}

// clusterStateInterval spaces the leader's cluster.json writes.
const clusterStateInterval = 10 * time.Second

// noteMove records an app starting to run on another node than before.
func (c *Controller) noteMove(st PublishedApp, now time.Time) {
	running := ""
	if st.KubeStatus == KubeRunning {
		running = st.Node
	}
	if running == "" {
		return
	}
	prev := c.lastRunning[st.UUID]
	c.lastRunning[st.UUID] = running
	if prev == "" || prev == running {
		return
	}
	c.opts.Metrics.Migrations.Inc()
	msg := fmt.Sprintf("%s moved from %s to %s", st.Name, prev, running)
	c.timeline.Add(TimelineEvent{Time: now, Kind: EventMove, App: st.Name, Node: running, Message: msg})
	// One Kubernetes Event per move: from the node it moved to.
	if st.ClusterAppRunning {
		if obj := c.placed.workload(st.UUID); obj != nil {
			c.recorder.Event(obj, corev1.EventTypeNormal, "AppMoved", msg)
		}
	}
}

func (c *Controller) writeState(name string, v any) {
	if c.opts.StateDir == "" {
		return
	}
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return
	}
	if err := config.WriteFileAtomic(filepath.Join(c.opts.StateDir, name), append(data, '\n'), 0o644); err != nil {
		c.log.Warn("state file", "file", name, "err", err)
	}
}
