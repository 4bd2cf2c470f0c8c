package change

import (
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/kubetest"
)

// prefers is an auto app's affinity: node preferred.
func prefers(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
		Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}}
}

// An app away from its designated node, and since when: the pod's start,
// the VMI's move to Running; the longest away first. Its claims lead to
// its Longhorn volume and that volume's replicas, for the return-home
// preflight.
func TestAwayAppsAndTheirVolumes(t *testing.T) {
	web := kubetest.Pod(kube.AppNamespace, "web-1", "node-a", corev1.PodRunning, true)
	web.Labels = map[string]string{kube.LabelAppName: "web", kube.LabelAppUUID: "a1"}
	web.Spec.Affinity = prefers("node-b")
	web.Status.StartTime = &metav1.Time{Time: kubetest.T0.Add(-2 * time.Minute)}
	web.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "web-data"}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "scratch"}}}}
	home := kubetest.Pod(kube.AppNamespace, "plc-1", "node-c", corev1.PodRunning, true)
	home.Labels = map[string]string{kube.LabelAppName: "plc", kube.LabelAppUUID: "a2"}
	home.Spec.Affinity = prefers("node-c")
	vmi := &kvv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: kube.AppNamespace, Name: "hmi-x", Labels: map[string]string{kube.LabelAppName: "hmi", kube.LabelAppUUID: "a3"},
		CreationTimestamp: metav1.Time{Time: kubetest.T0.Add(-time.Hour)}}}
	vmi.Spec.Affinity = prefers("node-b")
	vmi.Status.Phase, vmi.Status.NodeName = kvv1.Running, "node-c"
	vmi.Status.PhaseTransitionTimestamps = []kvv1.VirtualMachineInstancePhaseTransitionTimestamp{
		{Phase: kvv1.Scheduled, PhaseTransitionTimestamp: metav1.Time{Time: kubetest.T0.Add(-11 * time.Minute)}},
		{Phase: kvv1.Running, PhaseTransitionTimestamp: metav1.Time{Time: kubetest.T0.Add(-10 * time.Minute)}}}
	vol := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-123"}}
	vol.Status.KubernetesStatus = lhv1beta2.KubernetesStatus{PVCName: "web-data", Namespace: kube.AppNamespace}
	other := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-456"}}
	other.Status.KubernetesStatus = lhv1beta2.KubernetesStatus{PVCName: "web-data", Namespace: "elsewhere"}
	d := kube.Data{
		Pods:    []*corev1.Pod{web, home},
		VMIs:    []*kvv1.VirtualMachineInstance{vmi},
		Nodes:   []*corev1.Node{kubetest.Node("node-a", "10.0.0.1", corev1.ConditionTrue, kubetest.T0, nil), kubetest.Node("node-b", "10.0.0.2", corev1.ConditionTrue, kubetest.T0, nil)},
		Volumes: []*lhv1beta2.Volume{vol, other},
		Replicas: []*lhv1beta2.Replica{kubetest.Replica("r-a", "pvc-123", "node-a", "", "x", lhv1beta2.InstanceStateRunning),
			kubetest.Replica("r-b", "pvc-123", "node-b", "", "", lhv1beta2.InstanceStateRunning), kubetest.Replica("r-o", "pvc-456", "node-b", "", "x", lhv1beta2.InstanceStateRunning)},
	}
	away := kube.AwayApps(kube.Derive(d, kubetest.T0).Apps)
	if len(away) != 2 || away[0].Name != "hmi" || away[1].Name != "web" {
		t.Fatalf("away = %+v, want hmi (10 min) then web (2 min); plc is home", away)
	}
	if got := away[0].AwaySince(); !got.Equal(kubetest.T0.Add(-10 * time.Minute)) {
		t.Errorf("hmi away since %s, want its move to Running", got)
	}
	if got := away[1].AwaySince(); !got.Equal(kubetest.T0.Add(-2 * time.Minute)) {
		t.Errorf("web away since %s, want its pod's start", got)
	}
	f := ReturnHomeCheck(d, away[1])
	if f.Home != "node-b" || f.Node != "node-a" || len(f.Nodes) != 2 {
		t.Fatalf("facts %+v", f)
	}
	if len(f.Volumes) != 1 || f.Volumes[0].Name != "pvc-123" || len(f.Volumes[0].Replicas) != 2 {
		t.Errorf("volumes %+v: want pvc-123 (the claim's, in the app's namespace) with its two replicas", f.Volumes)
	}
	if len(f.Unknown) != 1 || f.Unknown[0] != "scratch" {
		t.Errorf("unknown claims %v, want scratch", f.Unknown)
	}
}
