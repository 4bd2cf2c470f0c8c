package apps

import (
	"slices"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestAttachmentsToRelease: after a force-delete, the guard removes the
// VolumeAttachments that hold the pod's volumes on its lost node, and only
// those: for the volumes it has just judged safe, with the same evidence,
// on the lost node. Nothing for any other verdict.
func TestAttachmentsToRelease(t *testing.T) {
	now := time.Now()
	deleted := metav1.NewTime(now.Add(-2 * time.Minute))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plc-0", Namespace: "eve-kube-app", DeletionTimestamp: &deleted},
		Spec: corev1.PodSpec{NodeName: "node-b"}}
	for _, c := range []string{"data", "logs"} {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	lost := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}}}
	claim := func(name, pv string, replicaNodes ...string) ClaimVolume {
		cv := ClaimVolume{Claim: name, VolumeName: pv, Volume: &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: pv}}}
		modes := map[string]lhv1beta2.ReplicaMode{}
		for _, n := range replicaNodes {
			r := &lhv1beta2.Replica{ObjectMeta: metav1.ObjectMeta{Name: pv + "-" + n},
				Spec:   lhv1beta2.ReplicaSpec{InstanceSpec: lhv1beta2.InstanceSpec{NodeID: n, VolumeName: pv}, HealthyAt: "x"},
				Status: lhv1beta2.ReplicaStatus{InstanceStatus: lhv1beta2.InstanceStatus{CurrentState: lhv1beta2.InstanceStateRunning}}}
			cv.Replicas = append(cv.Replicas, r)
			modes[r.Name] = lhv1beta2.ReplicaModeRW
		}
		cv.Engines = []*lhv1beta2.Engine{{Spec: lhv1beta2.EngineSpec{InstanceSpec: lhv1beta2.InstanceSpec{VolumeName: pv}},
			Status: lhv1beta2.EngineStatus{ReplicaModeMap: modes}}}
		return cv
	}
	va := func(name, pv, node string) storagev1.VolumeAttachment {
		a := storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: "driver.longhorn.io", NodeName: node}}
		if pv != "" {
			a.Spec.Source.PersistentVolumeName = ptr.To(pv)
		}
		return a
	}
	attachments := []storagev1.VolumeAttachment{
		va("data-on-b", "pvc-data", "node-b"),
		va("logs-on-b", "pvc-logs", "node-b"),
		va("data-on-a", "pvc-data", "node-a"),       // the replacement's, elsewhere
		va("other-on-b", "pvc-other", "node-b"),     // another pod's volume on the lost node
		va("inline-on-b", "", "node-b"),             // no PV: nothing judged it
		va("data-on-c", "pvc-data-old", "node-c"),   // another node
		va("logs-on-b-again", "pvc-logs", "node-b"), // same PV and node: both hold it
	}
	in := func(ev *FailoverEvidence) FailoverInput {
		return FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: now.Add(-2 * time.Minute), Now: now, Timeout: time.Minute, Evidence: ev}
	}
	silent := func(vols ...ClaimVolume) *FailoverEvidence {
		return &FailoverEvidence{Probe: "10.0.0.2:12346 is silent", Volumes: vols}
	}
	for name, tc := range map[string]struct {
		ev   *FailoverEvidence
		want []string
	}{
		"both claims safe: their attachments on the lost node": {
			ev: silent(claim("data", "pvc-data", "node-b", "node-a"), claim("logs", "pvc-logs", "node-c")), want: []string{"data-on-b", "logs-on-b", "logs-on-b-again"}},
		"a claim with no up-to-date replica elsewhere: refused, nothing": {
			ev: silent(claim("data", "pvc-data", "node-b", "node-a"), claim("logs", "pvc-logs", "node-b"))},
		"the node still answers: held, nothing": {
			ev: &FailoverEvidence{Alive: true, Probe: "its agent proved at 10.0.0.2:12346 that it runs"}},
		"no evidence read: nothing": {},
		"a claim not read: refused, nothing": {
			ev: silent(claim("data", "pvc-data", "node-a"))},
	} {
		t.Run(name, func(t *testing.T) {
			input := in(tc.ev)
			v := DecideFailover(input)
			var got []string
			for _, a := range AttachmentsToRelease(input, v, attachments) {
				got = append(got, a.Name)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("verdict %s (%s): released %v, want %v", v.Action, v.Reason, got, tc.want)
			}
		})
	}
	// The verdict is what counts: a force-delete verdict handed in with
	// evidence that does not vouch for a claim releases nothing for it.
	input := in(silent(claim("data", "pvc-data", "node-b", "node-a"), claim("logs", "pvc-logs", "node-b")))
	forced := FailoverVerdict{Action: FailoverForceDelete}
	var got []string
	for _, a := range AttachmentsToRelease(input, forced, attachments) {
		got = append(got, a.Name)
	}
	if !slices.Equal(got, []string{"data-on-b"}) {
		t.Fatalf("released %v with logs unsafe, want only data-on-b", got)
	}
}
