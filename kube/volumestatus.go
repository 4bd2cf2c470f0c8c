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

// VolumeStatusCache makes the volume statuses of successive reads of the
// snapshot, redoing only the volumes whose objects changed. An informer
// replaces an object it updates (its objects are read only), so a volume
// whose object, replicas (the same pointers) and rebuild progress are as
// in the last read has the status it had: at 2,000 volumes, grouping and
// sorting every replica and volume of the site on every read was most of
// a frame, while one volume had changed. The statuses returned are never
// written again (a frame on another goroutine may hold them): a read that
// changes one volume gets a new slice. The zero value is ready to use; it
// is not safe for concurrent use.
type VolumeStatusCache struct {
	// Finish, when set before the first read, is applied to each status
	// as it is derived, once for as long as its volume's objects do not
	// change (as PodRowCache's Finish).
	Finish  func(VolumeStatus) VolumeStatus
	entries map[string]*volumeEntry // by volume name
	// version is the last read's Data.LonghornVersion; timeless, that
	// none of its statuses depends on the time of the read: a read with
	// that version then has those statuses, and is not walked at all.
	version  uint64
	timeless bool
	// statuses are the last read's, sorted by name; order holds the
	// entry of each.
	statuses []VolumeStatus
	order    []*volumeEntry
}

// volumeEntry is one volume as the last read derived it.
type volumeEntry struct {
	vol *lhv1beta2.Volume
	// replicas are the volume's replicas in the status's order, with the
	// rebuild progress each was derived with.
	replicas []*lhv1beta2.Replica
	progress []int
	status   VolumeStatus
	// mark is the snapshot's record of the volume's robustness the status
	// was derived with; timeless, that the status does not depend on the
	// time of the read (its Since is that record, not now).
	mark     RobustnessMark
	timeless bool
	// next are the volume's replicas in the read being made; seen, that the
	// read lists the volume.
	next []*lhv1beta2.Replica
	seen bool
}

// Statuses derives every volume of d, with its replicas, sorted by name.
func (c *VolumeStatusCache) Statuses(d Data, now time.Time) []VolumeStatus {
	if d.LonghornVersion != 0 && d.LonghornVersion == c.version && c.timeless && c.statuses != nil {
		return c.statuses
	}
	c.version, c.timeless = d.LonghornVersion, true
	if c.entries == nil {
		c.entries = make(map[string]*volumeEntry, len(d.Volumes))
	}
	// An engine reports each replica's address, and the rebuild progress by
	// address.
	var progress map[string]int
	for _, e := range d.Engines {
		if p := EngineRebuilds(e); p != nil {
			if progress == nil {
				progress = map[string]int{}
			}
			maps.Copy(progress, p)
		}
	}
	for _, r := range d.Replicas {
		e := c.entries[r.Spec.VolumeName]
		if e == nil {
			// A replica of no volume the read lists is dropped below
			// with its entry.
			e = &volumeEntry{}
			c.entries[r.Spec.VolumeName] = e
		}
		e.next = append(e.next, r)
	}
	var changed []*volumeEntry
	added := false
	for _, v := range d.Volumes {
		e := c.entries[v.Name]
		if e == nil {
			e = &volumeEntry{}
			c.entries[v.Name] = e
		}
		if e.vol == nil {
			added = true
		}
		e.seen = true
		if e.vol != v || !e.timeless || d.Robustness[v.Name] != e.mark || !e.holds(e.next, progress) {
			e.derive(d, v, progress, now)
			if c.Finish != nil {
				e.status = c.Finish(e.status)
			}
			changed = append(changed, e)
		}
		c.timeless = c.timeless && e.timeless
		e.next = e.next[:0]
	}
	gone := false
	for name, e := range c.entries {
		if !e.seen {
			gone = gone || e.vol != nil
			delete(c.entries, name)
			continue
		}
		e.seen = false
	}
	switch {
	case added || gone || c.statuses == nil:
		c.order = c.order[:0]
		for _, e := range c.entries {
			c.order = append(c.order, e)
		}
		slices.SortFunc(c.order, func(a, b *volumeEntry) int { return strings.Compare(a.vol.Name, b.vol.Name) })
		c.statuses = make([]VolumeStatus, len(c.order))
		for i, e := range c.order {
			c.statuses[i] = e.status
		}
	case len(changed) > 0:
		// The same volumes: a new slice with the changed ones' statuses.
		c.statuses = slices.Clone(c.statuses)
		for i, e := range c.order {
			c.statuses[i] = e.status
		}
	}
	return c.statuses
}

// holds says whether the volume's replicas in this read, next (in any
// order), are those its status was derived from, each with the same
// rebuild progress.
func (e *volumeEntry) holds(next []*lhv1beta2.Replica, progress map[string]int) bool {
	if len(next) != len(e.replicas) {
		return false
	}
	for i, r := range e.replicas {
		if !slices.Contains(next, r) || replicaProgress(r, progress) != e.progress[i] {
			return false
		}
	}
	return true
}

// replicaProgress is a replica's rebuild progress, -1 when it is not
// rebuilding or its engine does not say.
func replicaProgress(r *lhv1beta2.Replica, progress map[string]int) int {
	if p, ok := progress[r.Name]; ok && ReplicaState(r) == ReplicaRebuilding {
		return p
	}
	return -1
}

// derive makes the volume's status from v and its replicas in this read
// (e.next).
func (e *volumeEntry) derive(d Data, v *lhv1beta2.Volume, progress map[string]int, now time.Time) {
	// By node, then name: two replicas on one node (a failed one and its
	// rebuild) keep their order from read to read.
	e.replicas = slices.Clone(e.next)
	slices.SortFunc(e.replicas, func(a, b *lhv1beta2.Replica) int {
		return cmp.Or(strings.Compare(a.Spec.NodeID, b.Spec.NodeID), strings.Compare(a.Name, b.Name))
	})
	e.progress = make([]int, len(e.replicas))
	var replicas []ReplicaStatus
	if len(e.replicas) > 0 {
		replicas = make([]ReplicaStatus, len(e.replicas))
	}
	for i, r := range e.replicas {
		e.progress[i] = replicaProgress(r, progress)
		replicas[i] = ReplicaStatus{Name: r.Name, Node: r.Spec.NodeID, State: ReplicaState(r), Progress: e.progress[i]}
	}
	vs := VolumeStatus{
		Name:         v.Name,
		State:        string(v.Status.State),
		Robustness:   string(v.Status.Robustness),
		Size:         v.Spec.Size,
		ActualSize:   v.Status.ActualSize,
		Node:         v.Status.CurrentNodeID,
		PVC:          v.Status.KubernetesStatus.PVCName,
		PVCNamespace: v.Status.KubernetesStatus.Namespace,
		Replicas:     replicas,
		WantReplicas: v.Spec.NumberOfReplicas,
	}
	if vs.Robustness == "" {
		vs.Robustness = string(lhv1beta2.VolumeRobustnessUnknown)
	}
	vs.Since, vs.SinceExact = robustnessSince(d, v, now)
	m, ok := d.Robustness[v.Name]
	e.vol, e.status, e.mark, e.timeless = v, vs, m, ok && m.Robustness == v.Status.Robustness
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
