package apps

import (
	"strings"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
)

// TestDecideRelease: a VolumeAttachment left on a lost node by a pod that
// is gone (force-deleted by this leader, by one that lost the lead or died
// before releasing, or by hand) is released on the evidence a force-delete
// needs, read afresh, and from nothing remembered: the node unreachable,
// no pod there mounting the claim, the node silent, an up-to-date copy of
// the claim on a live node elsewhere.
func TestDecideRelease(t *testing.T) {
	lostWith := func(fence string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b", Annotations: map[string]string{kube.AnnotationFence: fence}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}}}
	}
	// lost fences with the leader's timeout.
	lost := lostWith("on 28s")
	back := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "csi-data-on-b"},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: LonghornProvisioner, NodeName: "node-b",
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pvc-data")}}}
	live := map[string]*corev1.Node{"node-a": {ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}}
	replica := func(node string) *lhv1beta2.Replica {
		return &lhv1beta2.Replica{ObjectMeta: metav1.ObjectMeta{Name: "pvc-data-" + node},
			Spec:   lhv1beta2.ReplicaSpec{InstanceSpec: lhv1beta2.InstanceSpec{NodeID: node, VolumeName: "pvc-data"}, HealthyAt: "x"},
			Status: lhv1beta2.ReplicaStatus{InstanceStatus: lhv1beta2.InstanceStatus{CurrentState: lhv1beta2.InstanceStateRunning}}}
	}
	read := func(pv string, nodes ...string) ClaimVolume {
		cv := ClaimVolume{Claim: "data", VolumeName: pv, Volume: &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: pv}}}
		for _, n := range nodes {
			cv.Replicas = append(cv.Replicas, replica(n))
		}
		return cv
	}
	silent := func(cv ClaimVolume) *FailoverEvidence {
		return &FailoverEvidence{Probe: "GET 10.0.0.2:12346/status: i/o timeout", Volumes: []ClaimVolume{cv}, ReplicaNodes: live, LeaderTimeout: 28 * time.Second, SilentFor: 28 * time.Second}
	}
	mounting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plc-0", Namespace: "eve-kube-app"}, Spec: corev1.PodSpec{NodeName: "node-b",
		Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}}}
	other := mounting.DeepCopy()
	other.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "logs"
	deleting := va.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	for name, tc := range map[string]struct {
		va      *storagev1.VolumeAttachment
		node    *corev1.Node
		pods    []*corev1.Pod
		ev      *FailoverEvidence
		release bool
		mention string
	}{
		"the pod gone, the node silent, a copy on a live node": {va: va, node: lost, pods: []*corev1.Pod{other}, ev: silent(read("pvc-data", "node-b", "node-a")),
			release: true, mention: "up-to-date replica on a live node"},
		"a pod on the lost node still mounts the claim": {va: va, node: lost, pods: []*corev1.Pod{mounting}, ev: silent(read("pvc-data", "node-a")),
			mention: "plc-0 on node-b still mounts"},
		"the node is back: its kubelet detaches": {va: va, node: back, ev: silent(read("pvc-data", "node-a")), mention: "not unreachable"},
		"the node answers":                       {va: va, node: lost, ev: &FailoverEvidence{Alive: true, Probe: "answered"}, mention: "shows a sign of life: answered"},
		// Silence shows the old copy stopped only from a node that fences
		// with the leader's timeout.
		"the node silent, but it runs without fencing": {va: va, node: lostWith("off 28s"), ev: silent(read("pvc-data", "node-b", "node-a")), mention: "runs without fencing"},
		"the node silent, but it fences later":         {va: va, node: lostWith("on 1m0s"), ev: silent(read("pvc-data", "node-b", "node-a")), mention: "fences with --failover-timeout 1m0s"},
		// Silence counts for the whole timer, as before a force-delete: a
		// pod force-deleted early (by hand) leaves its volume attached
		// until the node has been silent that long.
		"the pod went early: the node silent for less than the timer": {va: va, node: lost, pods: []*corev1.Pod{other},
			ev:      &FailoverEvidence{Probe: "GET 10.0.0.2:12346/status: i/o timeout", Volumes: []ClaimVolume{read("pvc-data", "node-b", "node-a")}, ReplicaNodes: live, LeaderTimeout: 28 * time.Second, SilentFor: 3 * time.Second},
			mention: "silent for 3s of 28s"},
		// Its own signed word that it fenced lets the volume go.
		"the node says, signed, that it fenced": {va: va, node: lostWith("off 28s"), pods: []*corev1.Pod{other},
			ev: func() *FailoverEvidence {
				ev := silent(read("pvc-data", "node-b", "node-a"))
				ev.Life, ev.SilentFor = LifeFenced, 0 // its word alone, no silence
				return ev
			}(),
			release: true, mention: "up-to-date replica on a live node"},
		"no evidence read yet":                 {va: va, node: lost, mention: "reading the evidence"},
		"the only copy on the lost node":       {va: va, node: lost, ev: silent(read("pvc-data", "node-b")), mention: "no running, healthy replica on a live node"},
		"the claim is bound to another PV now": {va: va, node: lost, ev: silent(read("pvc-other", "node-a")), mention: "bound to pvc-other"},
		"being detached already":               {va: deleting, node: lost, ev: silent(read("pvc-data", "node-a")), mention: "being removed"},
		"another node's attachment":            {va: func() *storagev1.VolumeAttachment { v := va.DeepCopy(); v.Spec.NodeName = "node-a"; return v }(), node: lost, ev: silent(read("pvc-data", "node-a")), mention: "not on node-b"},
	} {
		t.Run(name, func(t *testing.T) {
			release, why := DecideRelease(tc.va, tc.node, "data", tc.pods, tc.ev)
			if release != tc.release || !strings.Contains(why, tc.mention) {
				t.Fatalf("DecideRelease = %v %q, want %v mentioning %q", release, why, tc.release, tc.mention)
			}
		})
	}
}
