package apps

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
)

// PlacementConfigMapName holds the on-site placement overrides, in
// kube.AppNamespace: data key = app UUID, value = a JSON PlacementOverride.
const PlacementConfigMapName = kube.PlacementConfigMapName

// PlacementOverride moves an app on site, without a controller. It holds
// while the app's designated_node_id is still ConfigDNId, the one the
// technician overrode. A config naming another node voids it; only a
// config newer than ConfigVersion, the version it was made against,
// clears it (see EffectiveDNId).
type PlacementOverride = kube.PlacementOverride

// ParseOverrides reads the placement ConfigMap; entries that do not parse are
// returned as errors by app UUID and otherwise ignored.
func ParseOverrides(cm *corev1.ConfigMap) (map[string]PlacementOverride, map[string]string) {
	out, bad := map[string]PlacementOverride{}, map[string]string{}
	if cm == nil {
		return out, bad
	}
	for app, raw := range cm.Data {
		o, err := kube.ParseOverride(raw)
		if err != nil {
			bad[app] = fmt.Sprintf("placement override for %s is not usable: %q", app, raw)
			continue
		}
		out[strings.ToLower(app)] = o
	}
	return out, bad
}

// EffectiveDNId is the node UUID that should run the app, and the override in
// force (nil when the config decides). A stale override is reported so the
// config's DNId node can remove it.
//
// An override is stale only when this node's config is newer than the one
// it was made against and names another node: the controller has spoken
// since. A node whose config is older has not heard of the config the
// technician saw: the override stands, and the node must not clear it. A
// config of the same version (or both unversioned) naming another node
// cannot tell which came last: the override is void here but kept.
func EffectiveDNId(app AppConfig, o *PlacementOverride) (dnid string, active *PlacementOverride, stale bool) {
	switch {
	case o == nil:
		return app.DesignatedNodeID, nil, false
	case strings.EqualFold(o.ConfigDNId, app.DesignatedNodeID), app.Version < o.ConfigVersion:
		return strings.ToLower(o.NodeUUID), o, false
	case app.Version > o.ConfigVersion:
		return app.DesignatedNodeID, nil, true
	default:
		return app.DesignatedNodeID, nil, false
	}
}

// CheckOverride re-checks an on-site override where the agents act on it,
// as sitecon migrate checked it when it was written: anyone who can edit a
// ConfigMap can write one, and a node changes after the move was asked for.
// The target must be a node of the cluster with every node_select_labels
// label of the app; until the app runs there it must also be Ready and not
// cordoned (an app already moved stays through its node's blip, as it would
// without the override). The refusal says why; empty: the override holds.
func CheckOverride(app AppConfig, o *PlacementOverride, target *corev1.Node, runningNode string) string {
	name := cmp.Or(o.Node, o.NodeUUID)
	if target == nil {
		return fmt.Sprintf("on-site move of %s to %s refused: no node of the cluster has UUID %s", app.DisplayName, name, o.NodeUUID)
	}
	for _, k := range slices.Sorted(maps.Keys(app.NodeSelectLabels)) {
		if v, ok := target.Labels[k]; !ok || v != app.NodeSelectLabels[k] {
			return fmt.Sprintf("on-site move of %s to %s refused: the node lacks the app's label %s=%s", app.DisplayName, target.Name, k, app.NodeSelectLabels[k])
		}
	}
	if runningNode == target.Name {
		return ""
	}
	if !kube.NodeIsReady(target) {
		return fmt.Sprintf("on-site move of %s to %s refused: the node is not Ready", app.DisplayName, target.Name)
	}
	if target.Spec.Unschedulable {
		return fmt.Sprintf("on-site move of %s to %s refused: the node is cordoned", app.DisplayName, target.Name)
	}
	return ""
}

// KubeStatus is how Kubernetes sees an app, from this node.
type KubeStatus string

// Kube statuses, as EVE reports them.
const (
	KubeUnknown        KubeStatus = "unknown"         // not synced yet
	KubeAPIUnreachable KubeStatus = "api-unreachable" // the API server does not answer
	KubeNotInCluster   KubeStatus = "not-in-cluster"  // no pod or VMI for it
	KubeNotRunning     KubeStatus = "not-running"     // there is one, not running
	KubeRunning        KubeStatus = "running"
)

// AppObservation is what the cluster shows of one app: where its live pod or
// VMI is scheduled and where it runs. Terminating pods are not counted.
type AppObservation struct {
	Synced, Connected bool
	// Exists: a non-terminating pod or VMI carries the app's UUID.
	Exists        bool
	ScheduledNode string
	RunningNode   string
	VMIName       string
	// Stuck are the app's terminating pods, for failover.
	Stuck []*corev1.Pod
	// Placed are its other pods that have not finished (VM launchers
	// included): the failover guard's timer starts when their node is
	// lost, before the taint evicts them.
	Placed []*corev1.Pod
}

// ObserveApps reads, per app UUID, what the cluster shows. VM apps are read
// from their VMI; container apps from their pods.
func ObserveApps(d kube.Data) map[string]AppObservation {
	out := map[string]AppObservation{}
	get := func(uuid string) AppObservation {
		o := out[uuid]
		o.Synced, o.Connected = true, d.Health.Connected
		return o
	}
	for _, vmi := range d.VMIs {
		uuid := vmi.Labels[kube.LabelAppUUID]
		if uuid == "" || vmi.Namespace != kube.AppNamespace || vmi.DeletionTimestamp != nil {
			continue
		}
		o := get(uuid)
		o.Exists, o.VMIName = true, vmi.Name
		if vmi.Status.NodeName != "" {
			o.ScheduledNode = vmi.Status.NodeName
		}
		if vmi.Status.Phase == kvv1.Running {
			o.RunningNode = vmi.Status.NodeName
		}
		out[uuid] = o
	}
	for _, p := range d.Pods {
		uuid := p.Labels[kube.LabelAppUUID]
		if uuid == "" || p.Namespace != kube.AppNamespace {
			continue
		}
		o := get(uuid)
		switch {
		case p.DeletionTimestamp != nil:
			o.Stuck = append(o.Stuck, p)
		case p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed:
		case isLauncher(p):
			o.Placed = append(o.Placed, p)
			// A VM app's truth is its VMI; the launcher only counts before
			// the VMI has a node.
			if o.ScheduledNode == "" {
				o.ScheduledNode = p.Spec.NodeName
			}
		default:
			o.Exists = true
			o.Placed = append(o.Placed, p)
			if p.Spec.NodeName != "" && (o.ScheduledNode == "" || p.Status.Phase == corev1.PodRunning) {
				o.ScheduledNode = p.Spec.NodeName
			}
			if p.Status.Phase == corev1.PodRunning && kube.PodReady(p) {
				o.RunningNode = p.Spec.NodeName
			}
		}
		out[uuid] = o
	}
	return out
}

func isLauncher(p *corev1.Pod) bool { return strings.HasPrefix(p.Name, kube.VirtLauncherPrefix) }

// AppDecision is one node's verdict on one app.
type AppDecision struct {
	// Activate: this node runs the app (EVE's activate for the local app).
	Activate bool
	// Place: this node lays the app out in Kubernetes (it is the effective DNId).
	Place               bool
	IsDNIdNode          bool
	ScheduledOnThisNode bool
	ClusterAppRunning   bool
	KubeStatus          KubeStatus
}

// DecideApp gates an app on this node. The DNId node runs it as the user set
// it unless Kubernetes runs it on another node; any other node runs it only
// while Kubernetes has it scheduled there.
func DecideApp(app AppConfig, dnid, thisUUID, thisNode string, o AppObservation) AppDecision {
	d := AppDecision{
		IsDNIdNode:          strings.EqualFold(dnid, thisUUID),
		ScheduledOnThisNode: o.ScheduledNode != "" && o.ScheduledNode == thisNode,
		ClusterAppRunning:   o.RunningNode != "" && o.RunningNode == thisNode,
	}
	d.Place = d.IsDNIdNode
	runningElsewhere := o.RunningNode != "" && o.RunningNode != thisNode
	if d.IsDNIdNode {
		d.Activate = app.Activate && !runningElsewhere
	} else {
		d.Activate = app.Activate && d.ScheduledOnThisNode
	}
	switch {
	case !o.Synced:
		d.KubeStatus = KubeUnknown
	case !o.Connected:
		d.KubeStatus = KubeAPIUnreachable
	case !o.Exists:
		d.KubeStatus = KubeNotInCluster
	case o.RunningNode == "":
		d.KubeStatus = KubeNotRunning
	default:
		d.KubeStatus = KubeRunning
	}
	return d
}

// VolumeDecision is one node's verdict on one volume: only its DNId node
// creates it; the others record it as replicated.
type VolumeDecision struct {
	Create     bool
	Replicated bool
}

// DecideVolume gates a volume on this node.
func DecideVolume(v VolumeConfig, thisUUID string) VolumeDecision {
	mine := strings.EqualFold(v.DesignatedNodeID, thisUUID)
	return VolumeDecision{Create: mine, Replicated: !mine}
}

// VolumeState is one configured volume as this node publishes it: the
// gating verdict (is_dnid_node: this node creates it and its claim;
// replicated: another node does, and Longhorn keeps replicas here at most)
// and what the cluster's Longhorn says of it.
type VolumeState struct {
	UUID             string `json:"uuid"`
	Name             string `json:"name"`
	DesignatedNodeID string `json:"designated_node_id"`
	// DNIdNode is the designated node's Kubernetes name, if it is in the cluster.
	DNIdNode   string `json:"dnid_node,omitempty"`
	IsDNIdNode bool   `json:"is_dnid_node"`
	Replicated bool   `json:"replicated"`
	// Claim is the PVC, in the apps namespace, the DNId node creates.
	Claim string `json:"claim"`
	// LonghornVolume, State and Robustness are empty until Longhorn has
	// provisioned the claim.
	LonghornVolume string `json:"longhorn_volume,omitempty"`
	State          string `json:"state,omitempty"`
	Robustness     string `json:"robustness,omitempty"`
	// HealthyReplicaHere: this node holds a healthy replica of it.
	HealthyReplicaHere bool `json:"healthy_replica_here"`
}

// VolumeStates gates every configured volume on this node and reads its
// Longhorn volume (found by claim) and this node's replica from d.
func VolumeStates(volumes map[string]VolumeConfig, thisUUID, thisNode string, nodeByUUID map[string]string, d kube.Data) []VolumeState {
	byClaim := map[string]*lhv1beta2.Volume{}
	for _, lv := range d.Volumes {
		if ks := lv.Status.KubernetesStatus; ks.Namespace == kube.AppNamespace && ks.PVCName != "" {
			byClaim[ks.PVCName] = lv
		}
	}
	// One pass over the replicas: this runs on every reconcile pass.
	healthyHere := map[string]bool{} // by Longhorn volume name
	for _, r := range d.Replicas {
		if r.Spec.NodeID == thisNode && kube.ReplicaState(r) == kube.ReplicaHealthy {
			healthyHere[r.Spec.VolumeName] = true
		}
	}
	var out []VolumeState
	for _, uuid := range slices.Sorted(maps.Keys(volumes)) {
		v := volumes[uuid]
		dec := DecideVolume(v, thisUUID)
		st := VolumeState{UUID: v.UUID, Name: v.Name, DesignatedNodeID: v.DesignatedNodeID,
			DNIdNode: nodeByUUID[strings.ToLower(v.DesignatedNodeID)], IsDNIdNode: dec.Create, Replicated: dec.Replicated, Claim: ClaimName(v)}
		if lv := byClaim[st.Claim]; lv != nil {
			st.LonghornVolume, st.State, st.Robustness = lv.Name, string(lv.Status.State), string(lv.Status.Robustness)
			st.HealthyReplicaHere = healthyHere[lv.Name]
		}
		out = append(out, st)
	}
	return out
}
