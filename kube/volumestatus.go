package kube

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
)

// VolumeStatus is one Longhorn volume with its replicas.
type VolumeStatus struct {
	Name       string `json:"name"`
	State      string `json:"state"`
	Robustness string `json:"robustness"`
	// Since is when the volume entered its robustness; SinceExact is false
	// when it was already so when sitecon started watching (a lower bound).
	Since      time.Time `json:"since"`
	SinceExact bool      `json:"sinceExact"`
	Size       int64     `json:"sizeBytes"`
	ActualSize int64     `json:"actualSizeBytes"`
	Node       string    `json:"node,omitempty"`
	PVC        string    `json:"pvc,omitempty"`
	// PVCNamespace is the claim's namespace: a claim's name is its own
	// only there.
	PVCNamespace string          `json:"pvcNamespace,omitempty"`
	Replicas     []ReplicaStatus `json:"replicas"`
	// WantReplicas is the replica count the volume asks for.
	WantReplicas int `json:"wantReplicas"`
}

// Label names a volume for people: its claim when Kubernetes has one (the
// Longhorn name of a provisioned volume is a generated pvc-<uuid>), else the
// Longhorn name.
func (v VolumeStatus) Label() string { return cmp.Or(v.PVC, v.Name) }

// Volume robustness as Longhorn reports it (VolumeStatus.Robustness).
const (
	RobustnessHealthy  = string(lhv1beta2.VolumeRobustnessHealthy)
	RobustnessDegraded = string(lhv1beta2.VolumeRobustnessDegraded)
	RobustnessFaulted  = string(lhv1beta2.VolumeRobustnessFaulted)
	RobustnessUnknown  = string(lhv1beta2.VolumeRobustnessUnknown)
)

// Replica states as sitecon reports them.
const (
	ReplicaHealthy    = "healthy"
	ReplicaRebuilding = "rebuilding"
	ReplicaFailed     = "failed"
	ReplicaStopped    = "stopped"
)

// ReplicaStatus is one replica of a volume and the node holding it.
type ReplicaStatus struct {
	Name  string `json:"name"`
	Node  string `json:"node"`
	State string `json:"state"`
	// Progress is a rebuilding replica's rebuild, 0-100, from its volume's
	// engine; -1 when the engine does not say.
	Progress int `json:"progress"`
}

func volumeStatuses(d Data, now time.Time) []VolumeStatus {
	// An engine reports each replica's address, and the rebuild progress by
	// address.
	progress := map[string]int{}
	for _, e := range d.Engines {
		maps.Copy(progress, EngineRebuilds(e))
	}
	// Each volume's replicas, by node. Grouped through a map, then each
	// group (a volume's two or three) sorted: sorting every replica of the
	// site by volume name on every read was most of a frame at 2,000
	// volumes.
	groups := make(map[string][]*lhv1beta2.Replica, len(d.Volumes))
	for _, r := range d.Replicas {
		groups[r.Spec.VolumeName] = append(groups[r.Spec.VolumeName], r)
	}
	all := make([]ReplicaStatus, 0, len(d.Replicas))
	replicas := make(map[string][]ReplicaStatus, len(groups))
	for name, group := range groups {
		// By node, then name: two replicas on one node (a failed one and
		// its rebuild) keep their order from read to read.
		slices.SortFunc(group, func(a, b *lhv1beta2.Replica) int {
			return cmp.Or(strings.Compare(a.Spec.NodeID, b.Spec.NodeID), strings.Compare(a.Name, b.Name))
		})
		start := len(all)
		for _, r := range group {
			rs := ReplicaStatus{Name: r.Name, Node: r.Spec.NodeID, State: ReplicaState(r), Progress: -1}
			if p, ok := progress[r.Name]; ok && rs.State == ReplicaRebuilding {
				rs.Progress = p
			}
			all = append(all, rs)
		}
		replicas[name] = all[start:len(all):len(all)]
	}
	volumes := slices.Clone(d.Volumes)
	slices.SortFunc(volumes, func(a, b *lhv1beta2.Volume) int { return strings.Compare(a.Name, b.Name) })
	out := make([]VolumeStatus, len(volumes))
	for i, v := range volumes {
		vs := VolumeStatus{
			Name:         v.Name,
			State:        string(v.Status.State),
			Robustness:   string(v.Status.Robustness),
			Size:         v.Spec.Size,
			ActualSize:   v.Status.ActualSize,
			Node:         v.Status.CurrentNodeID,
			PVC:          v.Status.KubernetesStatus.PVCName,
			PVCNamespace: v.Status.KubernetesStatus.Namespace,
			Replicas:     replicas[v.Name],
			WantReplicas: v.Spec.NumberOfReplicas,
		}
		if vs.Robustness == "" {
			vs.Robustness = string(lhv1beta2.VolumeRobustnessUnknown)
		}
		vs.Since, vs.SinceExact = robustnessSince(d, v, now)
		out[i] = vs
	}
	return out
}

// EngineRebuilds is all sitecon reads from an engine: the rebuild progress
// (0-100) of each of its replicas being rebuilt, by replica name. An engine
// also reports addresses, modes, snapshots and sizes, which Longhorn
// rewrites as they move; none of it is shown.
func EngineRebuilds(e *lhv1beta2.Engine) map[string]int {
	var progress map[string]int
	for name, addr := range e.Status.CurrentReplicaAddressMap {
		if rs, ok := e.Status.RebuildStatus[addr]; ok && rs != nil && rs.IsRebuilding {
			if progress == nil {
				progress = map[string]int{}
			}
			progress[name] = rs.Progress
		}
	}
	return progress
}

// robustnessSince is when the volume entered its robustness: the transition
// the snapshot saw; else Longhorn's lastDegradedAt for a degraded volume; else
// now as a lower bound (it was already so when watching began).
func robustnessSince(d Data, v *lhv1beta2.Volume, now time.Time) (time.Time, bool) {
	if m, ok := d.Robustness[v.Name]; ok {
		if m.Robustness == v.Status.Robustness {
			return m.Since.Time, m.Since.Exact
		}
		// The cache already holds a change whose event handler has not run
		// yet: the transition is happening now.
		return now, true
	}
	if v.Status.Robustness == lhv1beta2.VolumeRobustnessDegraded {
		if t, err := time.Parse(time.RFC3339, v.Status.LastDegradedAt); err == nil {
			return t, true
		}
	}
	return now, false
}

// ReplicaState reduces a Longhorn replica to what a technician needs: failed
// (failedAt set), rebuilding (running but never yet healthy), healthy, or stopped.
func ReplicaState(r *lhv1beta2.Replica) string {
	switch {
	case r.Spec.FailedAt != "" || r.Status.CurrentState == lhv1beta2.InstanceStateError:
		return ReplicaFailed
	case r.Status.CurrentState == lhv1beta2.InstanceStateRunning && r.Spec.HealthyAt == "":
		return ReplicaRebuilding
	case r.Status.CurrentState == lhv1beta2.InstanceStateRunning:
		return ReplicaHealthy
	default:
		return ReplicaStopped
	}
}
