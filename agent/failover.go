package agent

import (
	"fmt"
	"slices"
	"strings"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
)

// FailoverAction is what to do about an app pod stuck terminating.
type FailoverAction string

// Failover actions.
const (
	// FailoverWait: not yet (the node may still be reachable, or the
	// timeout has not passed).
	FailoverWait FailoverAction = "wait"
	// FailoverForceDelete: the node is lost and every volume of the app has
	// a healthy replica elsewhere; removing the pod lets its replacement
	// attach the volumes.
	FailoverForceDelete FailoverAction = "force-delete"
	// FailoverRefuse: removing the pod could lose data; report and leave it.
	FailoverRefuse FailoverAction = "refuse"
	// FailoverPinned: a pinned app on a lost node is reported, never moved.
	FailoverPinned FailoverAction = "pinned"
)

// FailoverVerdict is the action and why.
type FailoverVerdict struct {
	Action FailoverAction
	Reason string
	// Since is when the node was found unreachable.
	Since time.Time
}

// AppVolume is one Longhorn volume of an app with its replicas.
type AppVolume struct {
	Claim    string
	Volume   *lhv1beta2.Volume // nil when Longhorn has none for the claim
	Replicas []*lhv1beta2.Replica
}

// DecideFailover judges one terminating pod of an app. The pod is only
// force-deleted once its node has carried the unreachable taint for timeout,
// and only when every volume of the app keeps a healthy replica on another
// node.
func DecideFailover(app AppConfig, pod *corev1.Pod, node *corev1.Node, volumes []AppVolume, timeout time.Duration, now time.Time) FailoverVerdict {
	var taint *corev1.Taint
	if node != nil {
		for i := range node.Spec.Taints {
			if node.Spec.Taints[i].Key == corev1.TaintNodeUnreachable {
				taint = &node.Spec.Taints[i]
			}
		}
	}
	if taint == nil {
		return FailoverVerdict{Action: FailoverWait, Reason: fmt.Sprintf("node %s is not unreachable; its kubelet finishes the pod", pod.Spec.NodeName)}
	}
	since := pod.DeletionTimestamp.Time
	if taint.TimeAdded != nil && taint.TimeAdded.After(since) {
		since = taint.TimeAdded.Time
	}
	if app.Pinned() {
		return FailoverVerdict{Action: FailoverPinned, Since: since,
			Reason: fmt.Sprintf("pinned app %s is on lost node %s; it stays until the node returns", app.DisplayName, pod.Spec.NodeName)}
	}
	if now.Sub(since) < timeout {
		return FailoverVerdict{Action: FailoverWait, Since: since,
			Reason: fmt.Sprintf("node %s unreachable for %s of %s", pod.Spec.NodeName, now.Sub(since).Round(time.Second), timeout)}
	}
	var unsafe []string
	for _, v := range volumes {
		if v.Volume == nil {
			unsafe = append(unsafe, v.Claim+" (no Longhorn volume found)")
			continue
		}
		if !slices.ContainsFunc(v.Replicas, func(r *lhv1beta2.Replica) bool {
			return r.Spec.NodeID != pod.Spec.NodeName && kube.ReplicaState(r) == kube.ReplicaHealthy
		}) {
			unsafe = append(unsafe, v.Volume.Name)
		}
	}
	if len(unsafe) > 0 {
		return FailoverVerdict{Action: FailoverRefuse, Since: since,
			Reason: fmt.Sprintf("not force-deleting %s: no healthy replica off %s for %s", pod.Name, pod.Spec.NodeName, strings.Join(unsafe, ", "))}
	}
	return FailoverVerdict{Action: FailoverForceDelete, Since: since,
		Reason: fmt.Sprintf("force-deleting %s stuck on lost node %s; every volume has a healthy replica elsewhere", pod.Name, pod.Spec.NodeName)}
}

// AppVolumes finds the Longhorn volumes behind an app's claims: Longhorn
// records the PVC it serves in the volume's kubernetesStatus.
func AppVolumes(app AppConfig, configs map[string]VolumeConfig, d kube.Data) []AppVolume {
	var out []AppVolume
	for _, ref := range app.VolumeRefs {
		cfg, ok := configs[ref]
		if !ok {
			out = append(out, AppVolume{Claim: ref})
			continue
		}
		av := AppVolume{Claim: ClaimName(cfg)}
		for _, v := range d.Volumes {
			ks := v.Status.KubernetesStatus
			if ks.PVCName == av.Claim && ks.Namespace == kube.AppNamespace {
				av.Volume = v
			}
		}
		if av.Volume != nil {
			for _, r := range d.Replicas {
				if r.Spec.VolumeName == av.Volume.Name {
					av.Replicas = append(av.Replicas, r)
				}
			}
		}
		out = append(out, av)
	}
	return out
}
