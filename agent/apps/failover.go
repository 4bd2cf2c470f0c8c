package apps

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/sitecon/sitecon/kube"
)

// FailoverAction is what to do about an app pod stuck terminating.
type FailoverAction string

// Failover actions.
const (
	// FailoverWait: not yet (the node may still be reachable, or the
	// leader's own timer has not run out).
	FailoverWait FailoverAction = "wait"
	// FailoverHold: the timer ran out but the lost node still shows a sign
	// of life on the cluster network. A partitioned node still runs the
	// old pod; a second copy of the app would write the same data.
	FailoverHold FailoverAction = "hold"
	// FailoverForceDelete: the node is silent and a fresh read shows every
	// volume of the pod with an up-to-date replica elsewhere; removing the
	// pod lets its replacement attach the volumes.
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
	// Since is when this leader first saw the pod on the unreachable node
	// (its own clock, monotonic).
	Since time.Time
	// NeedEvidence: the timer ran out and nothing was read yet; read the
	// evidence (ReadFailoverEvidence, NodeProbe) and decide again with it.
	NeedEvidence bool
	// Life is the lost node's life evidence the verdict rests on ("" when
	// none was read).
	Life LifeEvidence
}

// FailoverInput is everything DecideFailover judges one stuck pod on.
type FailoverInput struct {
	App AppConfig
	Pod *corev1.Pod
	// Node is the pod's node as the cache shows it (nil: not found).
	Node *corev1.Node
	// FirstSeen is when this leader first saw the pod on the node while
	// the node carried the unreachable taint (evicted or not yet), taken from
	// time.Now() so that Now.Sub(FirstSeen) runs on the monotonic clock.
	// API-server timestamps (deletionTimestamp, the taint's timeAdded) are
	// another machine's clock and are never compared with this one.
	FirstSeen time.Time
	Now       time.Time
	Timeout   time.Duration
	// Evidence is read right before a delete; nil until then.
	Evidence *FailoverEvidence
}

// FailoverEvidence is what the leader reads right before a force-delete:
// nothing in it comes from the watch cache, whose Longhorn objects the lost
// node's own longhorn-manager may have written last.
type FailoverEvidence struct {
	// Alive: the lost node showed a sign of life on the cluster network
	// (NodeLife). Probe says what was tried and what came back, for the
	// report: which evidence holds the failover back or lets it go.
	Alive bool
	Probe string
	// Life is the kind of evidence the probe found.
	Life LifeEvidence
	// Volumes holds one entry per claim the pod mounts, read from the API
	// server (not needed, and not read, while the node is alive).
	Volumes []ClaimVolume
	// LeaderTimeout is the leader's own failover timeout: silence shows
	// that the node's copy stopped only when the node fences with it.
	LeaderTimeout time.Duration
	// SilentFor is how long this leader has found the node silent, from
	// its first silent probe since the node's last sign of life: a
	// release needs the whole LeaderTimeout of it (or the node's signed
	// word that it fenced), as a force-delete does.
	SilentFor time.Duration
	// ProbedAt is when the probe began (NodeLife.At).
	ProbedAt time.Time
	// ReplicaNodes are the Nodes the claims' replicas are on, by name,
	// read from the API server with them (absent: no such Node). A
	// replica counts only on a live node.
	ReplicaNodes map[string]*corev1.Node
}

// ClaimVolume is a fresh read of one of the pod's claims down to Longhorn.
type ClaimVolume struct {
	Claim string
	// VolumeName is the claim's spec.volumeName: the PV, and the Longhorn
	// volume of the same name (Longhorn's CSI driver names them alike).
	VolumeName string
	// Problem is why the claim could not be followed (a failed read, a
	// claim not bound): unknown is not safe.
	Problem  string
	Volume   *lhv1beta2.Volume
	Replicas []*lhv1beta2.Replica
}

// podClaims are the claims a pod mounts, in its own spec's order.
func podClaims(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && !slices.Contains(out, v.PersistentVolumeClaim.ClaimName) {
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

// unreachableTaint is the node lifecycle controller's unreachable taint on
// node, nil when the node is not marked unreachable (or not known).
func unreachableTaint(node *corev1.Node) *corev1.Taint {
	if node == nil {
		return nil
	}
	for i := range node.Spec.Taints {
		if node.Spec.Taints[i].Key == corev1.TaintNodeUnreachable {
			return &node.Spec.Taints[i]
		}
	}
	return nil
}

// DecideFailover judges one pod of an app on an unreachable node. The pod
// is force-deleted only once it is terminating (the taint evicted it; an
// app no volume holds is never evicted, MovedByTheFailoverAlone), this
// leader has seen it on the unreachable node for the timeout by its own
// clock, the node gives no sign of life, and
// a fresh read shows every claim the pod mounts with an up-to-date copy on
// a live node other than the lost one (upToDateCopy).
func DecideFailover(in FailoverInput) FailoverVerdict {
	pod, node := in.Pod, in.Pod.Spec.NodeName
	if unreachableTaint(in.Node) == nil {
		return FailoverVerdict{Action: FailoverWait, Reason: fmt.Sprintf("node %s is not unreachable; its kubelet finishes the pod", node)}
	}
	since := in.FirstSeen
	if in.App.Pinned() {
		return FailoverVerdict{Action: FailoverPinned, Since: since,
			Reason: fmt.Sprintf("pinned app %s is on lost node %s; it stays until the node returns", in.App.DisplayName, node)}
	}
	if pod.DeletionTimestamp == nil && !in.App.MovedByTheFailoverAlone() {
		// The timer runs from the first sighting on the lost node, in the
		// shadow of the pod's toleration (--move-after); the pod itself
		// goes only once the taint evicted it and its replacement exists,
		// waiting for the volume. An app no volume holds is never
		// evicted: the guard deletes its pod itself, on the same rule.
		return FailoverVerdict{Action: FailoverWait, Since: since,
			Reason: fmt.Sprintf("pod %s on lost node %s not evicted yet (it tolerates the node's loss for a while); the timer runs since the first sighting", pod.Name, node)}
	}
	if waited := in.Now.Sub(since); since.IsZero() || waited < in.Timeout {
		return FailoverVerdict{Action: FailoverWait, Since: since,
			Reason: fmt.Sprintf("node %s seen unreachable for %s of %s", node, max(waited, 0).Round(time.Second), in.Timeout)}
	}
	ev := in.Evidence
	if ev == nil {
		return FailoverVerdict{Action: FailoverWait, Since: since, NeedEvidence: true,
			Reason: fmt.Sprintf("node %s unreachable for %s: reading the evidence", node, in.Timeout)}
	}
	v := decideOnEvidence(pod, in.Node, since, in.Timeout, ev)
	v.Life = ev.Life
	return v
}

// oldCopyStopped says why the evidence does not show that the lost node's
// copy has stopped ("" when it does): a sign of life holds; silence shows
// it only when the node fences with this leader's timeout (its fence came
// first); its own signed word that it fenced shows it (LifeProbe checked
// its timeout).
func oldCopyStopped(node *corev1.Node, leaderTimeout time.Duration, ev *FailoverEvidence) string {
	switch {
	case ev.Alive:
		return fmt.Sprintf("lost node %s shows a sign of life: %s; it may still run the pod", node.Name, ev.Probe)
	case ev.Life == LifeFenced:
		return ""
	}
	if why := fenceUncertain(node, leaderTimeout); why != "" {
		return fmt.Sprintf("lost node %s is silent (%s), but %s", node.Name, ev.Probe, why)
	}
	return ""
}

// decideOnEvidence is DecideFailover once the evidence is read.
func decideOnEvidence(pod *corev1.Pod, nodeObj *corev1.Node, since time.Time, leaderTimeout time.Duration, ev *FailoverEvidence) FailoverVerdict {
	node := nodeObj.Name
	if why := oldCopyStopped(nodeObj, leaderTimeout, ev); why != "" {
		return FailoverVerdict{Action: FailoverHold, Since: since,
			Reason: fmt.Sprintf("not force-deleting %s: %s; %s", pod.Name, why, confirmOffAdvice(node))}
	}
	var unsafe []string
	for _, claim := range podClaims(pod) {
		i := slices.IndexFunc(ev.Volumes, func(v ClaimVolume) bool { return v.Claim == claim })
		if i < 0 {
			unsafe = append(unsafe, claim+" (not read)")
			continue
		}
		if why := claimUnsafe(ev.Volumes[i], node, ev.ReplicaNodes); why != "" {
			unsafe = append(unsafe, why)
		}
	}
	if len(unsafe) > 0 {
		return FailoverVerdict{Action: FailoverRefuse, Since: since,
			Reason: fmt.Sprintf("not force-deleting %s: no up-to-date replica off %s for %s", pod.Name, node, strings.Join(unsafe, ", "))}
	}
	volumes := "every volume has an up-to-date replica elsewhere"
	if len(podClaims(pod)) == 0 {
		volumes = "it mounts no volume"
	}
	return FailoverVerdict{Action: FailoverForceDelete, Since: since,
		Reason: fmt.Sprintf("force-deleting %s stuck on lost node %s (no sign of life: %s); %s", pod.Name, node, ev.Probe, volumes)}
}

// claimUnsafe says why a claim's data could be lost with the pod's node
// ("" when an up-to-date copy is on a live node other than the lost one,
// see upToDateCopy).
func claimUnsafe(cv ClaimVolume, lostNode string, nodes map[string]*corev1.Node) string {
	switch {
	case cv.Problem != "":
		return fmt.Sprintf("%s (%s)", cv.Claim, cv.Problem)
	case cv.Volume == nil:
		return fmt.Sprintf("%s (no Longhorn volume %s)", cv.Claim, cv.VolumeName)
	}
	if slices.ContainsFunc(cv.Replicas, func(r *lhv1beta2.Replica) bool { return upToDateCopy(r, cv.Volume.Name, lostNode, nodes) }) {
		return ""
	}
	return fmt.Sprintf("%s (volume %s: no running, healthy replica on a live node)", cv.Claim, cv.Volume.Name)
}

// upToDateCopy: the replica is an up-to-date copy of the volume that
// survives the lost node. It is on another node, that node is live
// (Ready, read with the evidence), and its own status, not written by the
// lost node's manager, says it runs with its data whole: not failed,
// healthy since its creation or last rebuild (spec.healthyAt, cleared
// while it rebuilds), running. The volume's engines are not asked: the
// engine of a volume attached to the lost node ran there, and its
// replica modes are that node's last word.
func upToDateCopy(r *lhv1beta2.Replica, volume, lostNode string, nodes map[string]*corev1.Node) bool {
	if r.Spec.VolumeName != volume || r.Spec.NodeID == "" || r.Spec.NodeID == lostNode || r.Status.OwnerID == lostNode {
		return false
	}
	if n := nodes[r.Spec.NodeID]; n == nil || !kube.NodeIsReady(n) {
		return false
	}
	return kube.ReplicaState(r) == kube.ReplicaHealthy
}

// DecideRelease says whether to delete va, a VolumeAttachment on node, of
// the PV bound to claim (in the apps namespace): the attach/detach
// controller does not detach a volume from an unhealthy node that last
// reported it in use (node.status.volumesInUse, which a lost node never
// updates again) until maxWaitForUnmountDuration (6 min) has passed since
// its pod went, so without this the replacement pod waits that long. It
// is released on the evidence a force-delete needs, read afresh: the node
// carries the unreachable taint, no pod on it mounts the claim any more
// (podsOnNode, read from the API server: the pod was force-deleted, by
// this leader, by one that lost the lead or died before releasing, or by
// a person), the node is silent, and the claim has an up-to-date copy on
// a live node elsewhere (claimUnsafe). Nothing remembered enters it, so
// whoever leads finishes a release another leader decided.
//
// Not the node.kubernetes.io/out-of-service taint, which would release the
// volumes too: it is node-wide, so it would release the volumes of every
// pod on the node, those the guard refused included, and it makes the pod
// garbage collector force-delete every terminating pod there.
func DecideRelease(va *storagev1.VolumeAttachment, node *corev1.Node, claim string, podsOnNode []*corev1.Pod, ev *FailoverEvidence) (bool, string) {
	pv := ""
	if va.Spec.Source.PersistentVolumeName != nil {
		pv = *va.Spec.Source.PersistentVolumeName
	}
	switch {
	case node == nil || va.Spec.NodeName != node.Name || pv == "":
		return false, fmt.Sprintf("VolumeAttachment %s is not on %s, or of no PV", va.Name, cmpNodeName(node))
	case va.DeletionTimestamp != nil:
		return false, fmt.Sprintf("VolumeAttachment %s is being removed already", va.Name)
	case unreachableTaint(node) == nil:
		return false, fmt.Sprintf("node %s is not unreachable; its kubelet has the volume detached", node.Name)
	}
	for _, p := range podsOnNode {
		if p.Namespace == kube.AppNamespace && p.Spec.NodeName == node.Name && slices.Contains(podClaims(p), claim) {
			return false, fmt.Sprintf("pod %s on %s still mounts %s: the failover guard judges it first", p.Name, node.Name, claim)
		}
	}
	if ev == nil {
		return false, fmt.Sprintf("volume %s on lost node %s: reading the evidence", pv, node.Name)
	}
	if why := oldCopyStopped(node, ev.LeaderTimeout, ev); why != "" {
		return false, fmt.Sprintf("not releasing volume %s: %s", pv, why)
	}
	if ev.Life != LifeFenced && ev.SilentFor < ev.LeaderTimeout {
		// Its pod went before the node's silence ran the timer (deleted
		// by hand, or by a leader that timed less): the node may not
		// have fenced yet, and a volume let go would run the app twice.
		return false, fmt.Sprintf("not releasing volume %s: lost node %s silent for %s of %s, the time it takes to fence; its pod went before that",
			pv, node.Name, ev.SilentFor.Round(time.Second), ev.LeaderTimeout)
	}
	i := slices.IndexFunc(ev.Volumes, func(v ClaimVolume) bool { return v.Claim == claim })
	if i < 0 {
		return false, fmt.Sprintf("not releasing volume %s: claim %s not read", pv, claim)
	}
	cv := ev.Volumes[i]
	if cv.Problem == "" && cv.VolumeName != pv {
		return false, fmt.Sprintf("not releasing volume %s: claim %s is bound to %s now", pv, claim, cv.VolumeName)
	}
	if why := claimUnsafe(cv, node.Name, ev.ReplicaNodes); why != "" {
		return false, fmt.Sprintf("not releasing volume %s from %s: no up-to-date replica off it for %s", pv, node.Name, why)
	}
	return true, fmt.Sprintf("released volume %s from lost node %s (deleted VolumeAttachment %s): node silent (%s), an up-to-date replica on a live node elsewhere; the attach/detach controller would hold it there 6 min after its pod went",
		pv, node.Name, va.Name, ev.Probe)
}

func cmpNodeName(n *corev1.Node) string {
	if n == nil {
		return "a known node"
	}
	return n.Name
}

// ReadFailoverEvidence reads, from the API server and not from any cache,
// each claim the pod mounts down to its Longhorn volume and its replicas.
// A read that fails is recorded as the claim's problem.
func ReadFailoverEvidence(ctx context.Context, clients *kube.Clients, pod *corev1.Pod) []ClaimVolume {
	var out []ClaimVolume
	lh := clients.Longhorn.LonghornV1beta2()
	for _, claim := range podClaims(pod) {
		cv := ClaimVolume{Claim: claim}
		out = append(out, cv)
		at := &out[len(out)-1]
		pvc, err := clients.Core.CoreV1().PersistentVolumeClaims(pod.Namespace).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			at.Problem = "claim: " + err.Error()
			continue
		}
		if at.VolumeName = pvc.Spec.VolumeName; at.VolumeName == "" {
			at.Problem = "claim not bound"
			continue
		}
		vol, err := lh.Volumes(kube.LonghornNamespace).Get(ctx, at.VolumeName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // no Longhorn volume: judged unsafe
		}
		if err != nil {
			at.Problem = "volume: " + err.Error()
			continue
		}
		at.Volume = vol
		sel := labels.SelectorFromSet(labels.Set{"longhornvolume": vol.Name}).String()
		reps, err := lh.Replicas(kube.LonghornNamespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			at.Problem = "replicas: " + err.Error()
			continue
		}
		for i := range reps.Items {
			at.Replicas = append(at.Replicas, &reps.Items[i])
		}
	}
	return out
}

// ReadReplicaNodes reads, from the API server, the Node of every replica
// in vols (absent from the map: no such Node). A failed read is an error:
// without it no replica can be shown to be on a live node.
func ReadReplicaNodes(ctx context.Context, clients *kube.Clients, vols []ClaimVolume) (map[string]*corev1.Node, error) {
	out := map[string]*corev1.Node{}
	for _, cv := range vols {
		for _, r := range cv.Replicas {
			name := r.Spec.NodeID
			if _, done := out[name]; done || name == "" {
				continue
			}
			n, err := clients.Core.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				out[name] = nil
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("node %s of a replica: %w", name, err)
			}
			out[name] = n
		}
	}
	return out, nil
}

// failoverRecheck is how often a held or refused pod's evidence is read
// again: a node going silent or a rebuild finishing elsewhere sends the
// leader no watch event it would wake on.
const failoverRecheck = 10 * time.Second

// stuckPod is the stats leader's own record of one pod stuck on a lost node.
type stuckPod struct {
	// firstSeen is this leader's first sighting (time.Now(), monotonic).
	firstSeen time.Time
	// lifeChecked is when the node was last probed, and silentSince when
	// the probes first found it silent since its last sign of life (zero:
	// it answered last); see timerStart.
	lifeChecked, silentSince time.Time
	// checked is when the evidence was last read, and verdict what it
	// decided; kept only for a hold or a refusal.
	checked time.Time
	verdict FailoverVerdict
	// reported is the last action reported (timeline, Event, metric),
	// and reportedLife the evidence it rested on: a hold whose evidence
	// changes (the node's agent gone, its host still up) is reported
	// again, so the report names what holds the pod now.
	reported     FailoverAction
	reportedLife LifeEvidence
}
