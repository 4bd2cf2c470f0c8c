package kube

import (
	"cmp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Node readiness as the Ready condition says it: any node's Kubernetes
// readiness (NodeStatus.Status). Not the agent's published status of its
// own node (apps.PublishedNodeStatus: READY, NOTREADY, DOWN).
const (
	NodeReady    = "Ready"
	NodeNotReady = "NotReady"
	NodeUnknown  = "Unknown"
)

// ClusterStatus is everything `sitecon status` and the console show, derived
// from one Data read.
type ClusterStatus struct {
	Cluster ClusterIdentity `json:"cluster"`
	VIP     VIPStatus       `json:"vip"`
	// StatsLeader is the node whose agent publishes cluster-wide stats.
	StatsLeader LeaseHolder       `json:"statsLeader"`
	NodesReady  int               `json:"nodesReady"`
	NodesTotal  int               `json:"nodesTotal"`
	Nodes       []NodeStatus      `json:"nodes"`
	Namespaces  []NamespaceHealth `json:"namespaces"`
	Resources   ResourceTotals    `json:"resources"`
	Volumes     []VolumeStatus    `json:"volumes"`
	Apps        []AppStatus       `json:"apps"`
	// ServerVersion is the API server's version.
	ServerVersion string `json:"serverVersion,omitempty"`
	// Longhorn and KubeVirt say whether those APIs are installed.
	Longhorn bool   `json:"longhorn"`
	KubeVirt bool   `json:"kubevirt"`
	API      Health `json:"api"`
	// Stale is set while the API server does not answer (or answers but
	// is not ready): everything above is then the cluster as last read,
	// not as it is. Every reader says so; none shows it as healthy.
	Stale *Staleness `json:"stale,omitempty"`
}

// Staleness says since when the API server has not answered, what the
// data's age is, and why.
type Staleness struct {
	// Since is when the API server was first found not answering.
	Since time.Time `json:"since"`
	// AsOf is the last time it was seen serving: the data is the cluster
	// as of then.
	AsOf   time.Time `json:"asOf"`
	Reason string    `json:"reason"`
}

// staleness is nil while the API server answers; once it has stopped
// (after having answered, or never reached at all), what the data is worth.
func staleness(h Health) *Staleness {
	if h.Connected || h.Since.IsZero() {
		return nil
	}
	asOf := h.LastContact
	if asOf.IsZero() || asOf.After(h.Since) {
		asOf = h.Since
	}
	return &Staleness{Since: h.Since, AsOf: asOf, Reason: h.LastError}
}

// NodeLost says whether the node is known and not Ready (NotReady, or
// Unknown: its kubelet stopped reporting): what runs there is not known
// to run.
func (s ClusterStatus) NodeLost(name string) bool {
	for i := range s.Nodes {
		if s.Nodes[i].Name == name {
			return !s.Nodes[i].Ready
		}
	}
	return false
}

// ClusterIdentity names the cluster and its seed server, when known.
type ClusterIdentity struct {
	Name string `json:"name,omitempty"`
	UUID string `json:"uuid,omitempty"`
	// SeedAddress is join_server_ip; SeedNode is the node that has it.
	SeedAddress string `json:"seedAddress,omitempty"`
	SeedNode    string `json:"seedNode,omitempty"`
}

// VIPStatus is the control-plane virtual IP and the node holding it.
type VIPStatus struct {
	Address string     `json:"address,omitempty"`
	Owner   string     `json:"owner,omitempty"`
	Since   *time.Time `json:"since,omitempty"`
}

// LeaseHolder is who holds a Lease, since when, and whether the lease is
// still being renewed.
type LeaseHolder struct {
	Holder  string     `json:"holder,omitempty"`
	Since   *time.Time `json:"since,omitempty"`
	Expired bool       `json:"expired,omitempty"`
}

// NodeStatus is one node's readiness and identity.
type NodeStatus struct {
	Name  string `json:"name"`
	UUID  string `json:"uuid,omitempty"`
	Ready bool   `json:"ready"`
	// Status is Ready, NotReady or Unknown (the node stopped reporting).
	Status string `json:"status"`
	// Since is when the Ready condition last changed.
	Since          time.Time `json:"since"`
	Reason         string    `json:"reason,omitempty"`
	Roles          []string  `json:"roles"`
	Seed           bool      `json:"seed,omitempty"`
	Schedulable    bool      `json:"schedulable"`
	KubeletVersion string    `json:"kubeletVersion"`
	InternalIP     string    `json:"internalIP,omitempty"`
	Pods           int       `json:"pods"`
	// VersionSkew names a kubelet outside the Kubernetes version skew
	// policy relative to the API server (an edgeworker with its own k3s).
	VersionSkew string `json:"versionSkew,omitempty"`
	// CPU in millicores and memory in bytes: what the node offers to pods
	// and what the pods on it request.
	CPUAllocatable    int64 `json:"cpuAllocatableMilli"`
	CPURequested      int64 `json:"cpuRequestedMilli"`
	MemoryAllocatable int64 `json:"memoryAllocatableBytes"`
	MemoryRequested   int64 `json:"memoryRequestedBytes"`
	// Conditions are the node's conditions as its kubelet (or the node
	// controller, for a lost one) last wrote them; Taints its taints as
	// kubectl writes them (key=value:Effect).
	Conditions []Condition `json:"conditions,omitempty"`
	Taints     []string    `json:"taints,omitempty"`
	// CordonedSince is when the node was cordoned (its unschedulable
	// taint's time), nil when it is not or the taint does not say.
	CordonedSince *time.Time `json:"cordonedSince,omitempty"`
	// PodsLeaving counts its pods being deleted: a drain under way.
	PodsLeaving int `json:"podsLeaving,omitempty"`
}

// Condition is one condition of a node or a pod: its type and status, why
// (reason, message) and since when (its last transition).
type Condition struct {
	Type    string    `json:"type"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
	Since   time.Time `json:"since,omitzero"`
}

// NamespaceHealth counts the pods of one namespace by health.
type NamespaceHealth struct {
	Name     string `json:"name"`
	Ready    int    `json:"ready"`
	NotReady int    `json:"notReady"`
	Failed   int    `json:"failed"`
}

// ResourceTotals adds up what the nodes offer and what the volumes hold.
type ResourceTotals struct {
	MemoryCapacity     int64 `json:"memoryCapacityBytes"`
	MemoryAllocatable  int64 `json:"memoryAllocatableBytes"`
	StorageCapacity    int64 `json:"storageCapacityBytes"`
	StorageAllocatable int64 `json:"storageAllocatableBytes"`
	VolumeSize         int64 `json:"volumeSizeBytes"`
	VolumeActualSize   int64 `json:"volumeActualSizeBytes"`
}

// Derive computes the cluster status from one read of the snapshot. It is a
// pure function: same data and clock, same result.
func Derive(d Data, now time.Time) ClusterStatus { return new(Deriver).Derive(d, now) }

// Deriver computes the cluster status of successive reads of one
// snapshot, as Derive does, keeping what did not change between them (a
// reader that derives on every change, the console's frames): the
// volumes, each derived again only when its objects change
// (VolumeStatusCache). The zero value is ready to use; it is not safe for
// concurrent use.
type Deriver struct {
	// FinishVolume, when set before the first read, is applied to each
	// volume's status as it is derived (VolumeStatusCache's Finish).
	FinishVolume func(VolumeStatus) VolumeStatus
	volumes      VolumeStatusCache
}

// Derive is the package's Derive, for the next read.
func (dv *Deriver) Derive(d Data, now time.Time) ClusterStatus {
	st := ClusterStatus{
		ServerVersion: d.ServerVersion,
		Longhorn:      d.HasLonghorn,
		KubeVirt:      d.HasKubeVirt,
		API:           d.Health,
		Stale:         staleness(d.Health),
	}
	st.Cluster = clusterIdentity(d)
	st.VIP = vipStatus(d)
	st.StatsLeader = leaseHolder(d, AppNamespace, StatsLeaderLeaseName, now)
	loads := NodePodCounts(d)
	for _, n := range d.Nodes {
		ns := nodeStatus(n)
		l := loads[n.Name]
		ns.Pods, ns.CPURequested, ns.MemoryRequested, ns.PodsLeaving = l.Pods, l.CPU, l.Memory, l.Leaving
		ns.CPUAllocatable = milliQuantity(n.Status.Allocatable, corev1.ResourceCPU)
		ns.MemoryAllocatable = quantity(n.Status.Allocatable, corev1.ResourceMemory)
		ns.VersionSkew = KubeletSkew(ns.KubeletVersion, d.ServerVersion)
		ns.Seed = st.Cluster.SeedAddress != "" && ns.InternalIP == st.Cluster.SeedAddress
		if ns.Seed {
			st.Cluster.SeedNode = ns.Name
		}
		if ns.Ready {
			st.NodesReady++
		}
		st.Nodes = append(st.Nodes, ns)
		st.Resources.MemoryCapacity += quantity(n.Status.Capacity, corev1.ResourceMemory)
		st.Resources.MemoryAllocatable += quantity(n.Status.Allocatable, corev1.ResourceMemory)
		st.Resources.StorageCapacity += quantity(n.Status.Capacity, corev1.ResourceEphemeralStorage)
		st.Resources.StorageAllocatable += quantity(n.Status.Allocatable, corev1.ResourceEphemeralStorage)
	}
	st.NodesTotal = len(st.Nodes)
	slices.SortFunc(st.Nodes, func(a, b NodeStatus) int { return cmp.Compare(a.Name, b.Name) })
	st.Namespaces = namespaceHealth(d.Pods)
	dv.volumes.Finish = dv.FinishVolume
	st.Volumes = dv.volumes.Statuses(d, now)
	for _, v := range st.Volumes {
		st.Resources.VolumeSize += v.Size
		st.Resources.VolumeActualSize += v.ActualSize
	}
	st.Apps = appStatuses(d, st.NodeLost)
	return st
}

func clusterIdentity(d Data) ClusterIdentity {
	for _, cm := range d.ConfigMaps {
		if cm.Namespace == AppNamespace && cm.Name == ClusterConfigMapName {
			return ClusterIdentity{
				Name:        cm.Data[ClusterKeyName],
				UUID:        cm.Data[ClusterKeyID],
				SeedAddress: cm.Data[ClusterKeyJoinServerIP],
			}
		}
	}
	return ClusterIdentity{}
}

func vipStatus(d Data) VIPStatus {
	var v VIPStatus
	for _, cm := range d.ConfigMaps {
		if cm.Namespace == AppNamespace && cm.Name == ClusterConfigMapName {
			v.Address = cm.Data[ClusterKeyVIPAddress]
		}
	}
	for _, l := range d.Leases {
		if l.Namespace != VIPLeaseNamespace || l.Name != VIPLeaseName || l.Spec.HolderIdentity == nil {
			continue
		}
		v.Owner = *l.Spec.HolderIdentity
		if l.Spec.AcquireTime != nil {
			t := l.Spec.AcquireTime.Time
			v.Since = &t
		}
	}
	return v
}

func leaseHolder(d Data, namespace, name string, now time.Time) LeaseHolder {
	for _, l := range d.Leases {
		if l.Namespace != namespace || l.Name != name || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			continue
		}
		h := LeaseHolder{Holder: *l.Spec.HolderIdentity}
		if l.Spec.AcquireTime != nil {
			t := l.Spec.AcquireTime.Time
			h.Since = &t
		}
		if l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil {
			h.Expired = now.After(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
		}
		return h
	}
	return LeaseHolder{}
}

func nodeStatus(n *corev1.Node) NodeStatus {
	ns := NodeStatus{
		Name:           n.Name,
		UUID:           n.Labels[LabelNodeUUID],
		Status:         NodeUnknown,
		Roles:          NodeRoles(n),
		Schedulable:    !n.Spec.Unschedulable,
		KubeletVersion: n.Status.NodeInfo.KubeletVersion,
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && ns.InternalIP == "" {
			ns.InternalIP = a.Address
		}
	}
	for _, t := range n.Spec.Taints {
		ns.Taints = append(ns.Taints, t.ToString())
		if t.Key == corev1.TaintNodeUnschedulable && n.Spec.Unschedulable && t.TimeAdded != nil {
			at := t.TimeAdded.Time
			ns.CordonedSince = &at
		}
	}
	for _, c := range n.Status.Conditions {
		ns.Conditions = append(ns.Conditions, Condition{Type: string(c.Type), Status: string(c.Status), Reason: c.Reason,
			Message: c.Message, Since: c.LastTransitionTime.Time})
		if c.Type != corev1.NodeReady {
			continue
		}
		ns.Since = c.LastTransitionTime.Time
		switch c.Status {
		case corev1.ConditionTrue:
			ns.Ready, ns.Status = true, NodeReady
		case corev1.ConditionFalse:
			ns.Status = NodeNotReady
			ns.Reason = c.Message
		default:
			ns.Reason = c.Message
		}
	}
	return ns
}

func quantity(list corev1.ResourceList, name corev1.ResourceName) int64 {
	if q, ok := list[name]; ok {
		return q.Value()
	}
	return 0
}

// podRequests adds up a pod's CPU (millicores) and memory requests the way
// the scheduler counts them: the containers' sum, or the largest init
// container if that is more.
//
// It runs for every pod on every frame: the containers are read in place,
// not copied (a Container is about 500 bytes; copying each was most of a
// frame's time at 10,000 pods).
func podRequests(p *corev1.Pod) (cpu, mem int64) {
	for i := range p.Spec.Containers {
		req := p.Spec.Containers[i].Resources.Requests
		cpu += milliQuantity(req, corev1.ResourceCPU)
		mem += quantity(req, corev1.ResourceMemory)
	}
	for i := range p.Spec.InitContainers {
		req := p.Spec.InitContainers[i].Resources.Requests
		cpu = max(cpu, milliQuantity(req, corev1.ResourceCPU))
		mem = max(mem, quantity(req, corev1.ResourceMemory))
	}
	return cpu, mem
}

// milliQuantity is quantity in thousandths (CPU in millicores).
func milliQuantity(list corev1.ResourceList, name corev1.ResourceName) int64 {
	if q, ok := list[name]; ok {
		return q.MilliValue()
	}
	return 0
}

func podFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// PodReady reports the pod's Ready condition.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// namespaceHealth counts pods for each namespace sitecon watches over.
// Completed pods (jobs) are neither ready nor a problem, so they are not counted.
func namespaceHealth(pods []*corev1.Pod) []NamespaceHealth {
	out := make([]NamespaceHealth, len(Namespaces))
	for i, ns := range Namespaces {
		out[i].Name = ns
	}
	for _, p := range pods {
		i := slices.Index(Namespaces, p.Namespace)
		if i < 0 {
			continue
		}
		switch {
		case p.Status.Phase == corev1.PodSucceeded:
		case p.Status.Phase == corev1.PodFailed:
			out[i].Failed++
		case PodReady(p) && p.DeletionTimestamp == nil:
			out[i].Ready++
		default:
			out[i].NotReady++
		}
	}
	return out
}

// NextLeaseExpiry is when the stats leader's lease runs out if its holder
// stops renewing it (zero when there is none, or it has run out): the
// status changes then without any event, so a reader waits for that time.
func NextLeaseExpiry(d Data, now time.Time) time.Time {
	for _, l := range d.Leases {
		if l.Namespace != AppNamespace || l.Name != StatsLeaderLeaseName || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			continue
		}
		if at := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second); at.After(now) {
			return at
		}
	}
	return time.Time{}
}
