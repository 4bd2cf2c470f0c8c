package agent

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
)

// PlacementConfigMapName holds the on-site placement overrides, in
// kube.AppNamespace: data key = app UUID, value = a JSON PlacementOverride.
const PlacementConfigMapName = kube.PlacementConfigMapName

// PlacementOverride moves an app on site, without a controller. It holds
// while the app's designated_node_id is still ConfigDNId, the one the
// technician overrode; a new one from the controller voids it.
type PlacementOverride = kube.PlacementOverride

// ParseOverrides reads the placement ConfigMap; entries that do not parse are
// returned as errors by app UUID and otherwise ignored.
func ParseOverrides(cm *corev1.ConfigMap) (map[string]PlacementOverride, map[string]string) {
	out, bad := map[string]PlacementOverride{}, map[string]string{}
	if cm == nil {
		return out, bad
	}
	for app, raw := range cm.Data {
		var o PlacementOverride
		if err := json.Unmarshal([]byte(raw), &o); err != nil || o.NodeUUID == "" {
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
func EffectiveDNId(app AppConfig, o *PlacementOverride) (dnid string, active *PlacementOverride, stale bool) {
	if o == nil {
		return app.DesignatedNodeID, nil, false
	}
	if !strings.EqualFold(o.ConfigDNId, app.DesignatedNodeID) {
		return app.DesignatedNodeID, nil, true
	}
	return strings.ToLower(o.NodeUUID), o, false
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
			// A VM app's truth is its VMI; the launcher only counts before
			// the VMI has a node.
			if o.ScheduledNode == "" {
				o.ScheduledNode = p.Spec.NodeName
			}
		default:
			o.Exists = true
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

func isLauncher(p *corev1.Pod) bool { return strings.HasPrefix(p.Name, "virt-launcher-") }

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
