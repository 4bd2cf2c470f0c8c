package kube

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	kvv1 "kubevirt.io/api/core/v1"
)

// Labels sitecon reads on Kubernetes objects.
const (
	// LabelNodeUUID carries the EVE device UUID on its Node.
	LabelNodeUUID = "node-uuid"
	// LabelAppUUID carries the EVE app instance UUID on an app's pods and VMIs.
	LabelAppUUID = "sitecon.io/app-uuid"
	// LabelAppName carries the app's display name.
	LabelAppName = "sitecon.io/app-name"
	// LabelEdgeworker marks a generic Linux host joined as a k3s agent.
	LabelEdgeworker = "node-role.sitecon.io/edgeworker"

	nodeRolePrefix = "node-role.kubernetes.io/"
	// VirtLauncherPrefix begins the name of the pod KubeVirt runs each VMI in.
	VirtLauncherPrefix = "virt-launcher-"
)

// Keys of the sitecon-cluster ConfigMap.
const (
	ClusterKeyName         = "cluster_name"
	ClusterKeyID           = "cluster_id"
	ClusterKeyJoinServerIP = "join_server_ip"
	ClusterKeyVIPAddress   = "vip_address"
)

// Node readiness as the Ready condition says it.
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

// VolumeStatus is one Longhorn volume with its replicas.
type VolumeStatus struct {
	Name       string `json:"name"`
	State      string `json:"state"`
	Robustness string `json:"robustness"`
	// Since is when the volume entered its robustness; SinceExact is false
	// when it was already so when sitecon started watching (a lower bound).
	Since      time.Time       `json:"since"`
	SinceExact bool            `json:"sinceExact"`
	Size       int64           `json:"sizeBytes"`
	ActualSize int64           `json:"actualSizeBytes"`
	Node       string          `json:"node,omitempty"`
	PVC        string          `json:"pvc,omitempty"`
	Replicas   []ReplicaStatus `json:"replicas"`
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

// App kinds.
const (
	AppKindVM        = "vm"
	AppKindContainer = "container"
)

// AppStatus is one user app (VMI or container pod) and where it runs.
type AppStatus struct {
	Name      string `json:"name"`
	UUID      string `json:"uuid,omitempty"`
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Node      string `json:"node,omitempty"`
	Phase     string `json:"phase"`
	Ready     bool   `json:"ready"`
	// Object is the pod or VMI name.
	Object string `json:"object"`
	// Mode is auto (may move: preferred affinity) or pinned (required);
	// DesignatedNode is the node its affinity names.
	Mode           string `json:"mode,omitempty"`
	DesignatedNode string `json:"designatedNode,omitempty"`
	// LastMove is the last time the snapshot saw the app start running on
	// another node than before.
	LastMove *AppMove `json:"lastMove,omitempty"`
	// VNCPort is a VM's VNC console port on its node (0: none).
	VNCPort int `json:"vncPort,omitempty"`
	// Requires are the node requirements of its affinity besides the node
	// name (its node-select labels): a node it moves to must meet them.
	Requires []corev1.NodeSelectorRequirement `json:"requires,omitempty"`
	// Terminating are the app's older pods or VMIs still going away (a pod
	// hanging on a lost node while its replacement runs): a note on the
	// app, never where it runs.
	Terminating []AppObject `json:"terminating,omitempty"`
}

// AppObject is one pod or VMI of an app and the node it is on.
type AppObject struct {
	Object string `json:"object"`
	Node   string `json:"node,omitempty"`
}

// AppMove is an app seen running on a new node.
type AppMove struct {
	At   time.Time `json:"at"`
	From string    `json:"from"`
	To   string    `json:"to"`
}

// Derive computes the cluster status from one read of the snapshot. It is a
// pure function: same data and clock, same result.
func Derive(d Data, now time.Time) ClusterStatus {
	st := ClusterStatus{
		ServerVersion: d.ServerVersion,
		Longhorn:      d.HasLonghorn,
		KubeVirt:      d.HasKubeVirt,
		API:           d.Health,
	}
	st.Cluster = clusterIdentity(d)
	st.VIP = vipStatus(d)
	st.StatsLeader = leaseHolder(d, AppNamespace, StatsLeaderLeaseName, now)
	type load struct {
		pods     int
		cpu, mem int64
	}
	loads := make(map[string]*load, len(d.Nodes))
	for _, p := range d.Pods {
		if p.Spec.NodeName != "" && !podFinished(p) {
			l := loads[p.Spec.NodeName]
			if l == nil {
				l = &load{}
				loads[p.Spec.NodeName] = l
			}
			cpu, mem := podRequests(p)
			l.pods, l.cpu, l.mem = l.pods+1, l.cpu+cpu, l.mem+mem
		}
	}
	for _, n := range d.Nodes {
		ns := nodeStatus(n)
		if l := loads[n.Name]; l != nil {
			ns.Pods, ns.CPURequested, ns.MemoryRequested = l.pods, l.cpu, l.mem
		}
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
	st.Volumes = volumeStatuses(d, now)
	for _, v := range st.Volumes {
		st.Resources.VolumeSize += v.Size
		st.Resources.VolumeActualSize += v.ActualSize
	}
	st.Apps = appStatuses(d)
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
	for _, c := range n.Status.Conditions {
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

// NodeRoles lists a node's roles from its node-role labels, sorted, with
// "edgeworker" for a generic host; a node with none is a plain "agent".
func NodeRoles(n *corev1.Node) []string {
	var roles []string
	for k, v := range n.Labels {
		if k == LabelEdgeworker && v == "true" {
			roles = append(roles, "edgeworker")
		} else if role, ok := strings.CutPrefix(k, nodeRolePrefix); ok && role != "" {
			roles = append(roles, role)
		}
	}
	if len(roles) == 0 {
		roles = []string{"agent"}
	}
	slices.Sort(roles)
	return roles
}

// IsServer reports whether a node runs the control plane (k3s server).
func IsServer(n *corev1.Node) bool {
	for _, r := range NodeRoles(n) {
		if r == "control-plane" || r == "master" {
			return true
		}
	}
	return false
}

// IsEtcdMember reports whether the node runs an etcd member (k3s labels
// every server with embedded etcd so). Quorum is counted over these, not
// over control-plane nodes: a server on an external datastore has no vote.
func IsEtcdMember(n *corev1.Node) bool { return n.Labels[LabelEtcd] == "true" }

func quantity(list corev1.ResourceList, name corev1.ResourceName) int64 {
	if q, ok := list[name]; ok {
		return q.Value()
	}
	return 0
}

// podRequests adds up a pod's CPU (millicores) and memory requests the way
// the scheduler counts them: the containers' sum, or the largest init
// container if that is more.
func podRequests(p *corev1.Pod) (cpu, mem int64) {
	for _, c := range p.Spec.Containers {
		cpu += milliQuantity(c.Resources.Requests, corev1.ResourceCPU)
		mem += quantity(c.Resources.Requests, corev1.ResourceMemory)
	}
	for _, c := range p.Spec.InitContainers {
		cpu = max(cpu, milliQuantity(c.Resources.Requests, corev1.ResourceCPU))
		mem = max(mem, quantity(c.Resources.Requests, corev1.ResourceMemory))
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

func volumeStatuses(d Data, now time.Time) []VolumeStatus {
	// An engine reports each replica's address, and the rebuild progress by
	// address.
	progress := map[string]int{}
	for _, e := range d.Engines {
		for name, addr := range e.Status.CurrentReplicaAddressMap {
			if rs, ok := e.Status.RebuildStatus[addr]; ok && rs != nil && rs.IsRebuilding {
				progress[name] = rs.Progress
			}
		}
	}
	// The replicas sorted by volume and node, each volume's a run of them:
	// one slice for all, pointers sorted rather than rows.
	sortedReplicas := slices.Clone(d.Replicas)
	slices.SortFunc(sortedReplicas, func(a, b *lhv1beta2.Replica) int {
		return cmp.Or(strings.Compare(a.Spec.VolumeName, b.Spec.VolumeName), strings.Compare(a.Spec.NodeID, b.Spec.NodeID))
	})
	all := make([]ReplicaStatus, len(sortedReplicas))
	replicas := make(map[string][]ReplicaStatus, len(d.Volumes))
	for i := 0; i < len(sortedReplicas); {
		j := i
		for ; j < len(sortedReplicas) && sortedReplicas[j].Spec.VolumeName == sortedReplicas[i].Spec.VolumeName; j++ {
			r := sortedReplicas[j]
			rs := ReplicaStatus{Name: r.Name, Node: r.Spec.NodeID, State: ReplicaState(r), Progress: -1}
			if p, ok := progress[r.Name]; ok && rs.State == ReplicaRebuilding {
				rs.Progress = p
			}
			all[j] = rs
		}
		replicas[sortedReplicas[i].Spec.VolumeName] = all[i:j:j]
		i = j
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

// appStatuses gives one row per app. While Kubernetes replaces an app's pod
// or VMI (the old one hangs terminating on a lost node), the live object is
// the app: its node is where the app runs, and actions such as migrate read
// it from there; the terminating ones are noted on it.
func appStatuses(d Data) []AppStatus {
	type candidate struct {
		AppStatus
		key      string // the app's key within its namespace
		leaving  bool
		rankTime time.Time
	}
	isApp := func(p *corev1.Pod) bool {
		// VM apps are reported through their VMI, not their launcher pod.
		return p.Namespace == AppNamespace && !strings.HasPrefix(p.Name, VirtLauncherPrefix)
	}
	n := len(d.VMIs)
	for _, p := range d.Pods {
		if isApp(p) {
			n++
		}
	}
	all := make([]candidate, 0, n)
	for _, vmi := range d.VMIs {
		designated, mode := affinityTarget(vmi.Spec.Affinity)
		phase := string(vmi.Status.Phase)
		if vmi.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		key := AppKey(vmi.Labels, vmi.Name)
		all = append(all, candidate{key: key, leaving: vmi.DeletionTimestamp != nil,
			rankTime: vmi.CreationTimestamp.Time, AppStatus: AppStatus{
				Mode: mode, DesignatedNode: designated, LastMove: lastMove(d, key), Requires: nodeRequirements(vmi.Spec.Affinity),
				VNCPort:   vncPort(vmi.Annotations),
				Name:      appName(vmi.Labels, vmi.Name),
				UUID:      vmi.Labels[LabelAppUUID],
				Namespace: vmi.Namespace,
				Kind:      AppKindVM,
				Node:      vmi.Status.NodeName,
				Phase:     phase,
				Ready:     vmi.Status.Phase == kvv1.Running && vmi.DeletionTimestamp == nil,
				Object:    vmi.Name,
			}})
	}
	for _, p := range d.Pods {
		if !isApp(p) {
			continue
		}
		phase := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		designated, mode := affinityTarget(p.Spec.Affinity)
		key := AppKey(p.Labels, p.Name)
		all = append(all, candidate{key: key, leaving: p.DeletionTimestamp != nil,
			rankTime: p.CreationTimestamp.Time, AppStatus: AppStatus{
				Mode: mode, DesignatedNode: designated, LastMove: lastMove(d, key), Requires: nodeRequirements(p.Spec.Affinity),
				Name:      appName(p.Labels, p.Name),
				UUID:      p.Labels[LabelAppUUID],
				Namespace: p.Namespace,
				Kind:      AppKindContainer,
				Node:      p.Spec.NodeName,
				Phase:     phase,
				Ready:     PodReady(p) && p.DeletionTimestamp == nil,
				Object:    p.Name,
			}})
	}
	// Within an app, live objects before terminating ones, ready before not,
	// newest first: the first is the one the app's row shows. Pointers are
	// sorted, not the candidates.
	sorted := make([]*candidate, len(all))
	for i := range all {
		sorted[i] = &all[i]
	}
	slices.SortFunc(sorted, func(a, b *candidate) int {
		// cmp.Or would work out every comparison first: most end at the key.
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Or(compareBool(a.leaving, b.leaving), compareBool(!a.Ready, !b.Ready),
			b.rankTime.Compare(a.rankTime), strings.Compare(a.Object, b.Object))
	})
	sameApp := func(a, b *candidate) bool { return a.key == b.key && a.Namespace == b.Namespace }
	rows := make([]*AppStatus, 0, len(sorted))
	for i := 0; i < len(sorted); {
		row := &sorted[i].AppStatus
		j := i + 1
		for ; j < len(sorted) && sameApp(sorted[j], sorted[i]); j++ {
			if sorted[j].leaving {
				row.Terminating = append(row.Terminating, AppObject{Object: sorted[j].Object, Node: sorted[j].Node})
				continue
			}
			// Two live objects for one app (a replica set surging) are both
			// running somewhere: each keeps its row.
			rows = append(rows, &sorted[j].AppStatus)
		}
		rows = append(rows, row)
		i = j
	}
	slices.SortFunc(rows, func(a, b *AppStatus) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Object, b.Object))
	})
	if len(rows) == 0 {
		return nil // no apps: null in `sitecon status -o json`, as always
	}
	out := make([]AppStatus, len(rows))
	for i, r := range rows {
		out[i] = *r
	}
	return out
}

// compareBool orders false before true.
func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}

func vncPort(annotations map[string]string) int {
	port, err := strconv.Atoi(annotations[AnnotationVNCPort])
	if err != nil || port <= 0 || port > 65535 {
		return 0
	}
	return port
}

func lastMove(d Data, key string) *AppMove {
	m, ok := d.AppMoves[key]
	if !ok {
		return nil
	}
	move := m // on the heap only when there is one
	return &move
}

// AppKey identifies an app across the pods and VMIs that run it: its UUID
// label, else its name label, else the object's own name.
func AppKey(labels map[string]string, object string) string {
	if u := labels[LabelAppUUID]; u != "" {
		return u
	}
	if n := labels[LabelAppName]; n != "" {
		return n
	}
	return object
}

func appName(labels map[string]string, fallback string) string {
	if n := labels[LabelAppName]; n != "" {
		return n
	}
	return fallback
}

// NodeReadyCondition is the node's Ready condition, or nil when the node
// has none yet (a node that never reported).
func NodeReadyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// NodeIsReady says whether the node's Ready condition is True: the one
// readiness test everything that acts on nodes uses.
func NodeIsReady(n *corev1.Node) bool {
	c := NodeReadyCondition(n)
	return c != nil && c.Status == corev1.ConditionTrue
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
