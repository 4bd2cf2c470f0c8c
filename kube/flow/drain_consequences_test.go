package flow

import (
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/safety"
)

// Issue 38: draining node-a, the seed and the holder of the cluster's
// virtual IP, said neither, nor that the hmi VM restarts elsewhere (it
// listed virt-launcher-hmi-…). The preflight's notes say all three, for the
// dialog and the command alike; a pinned app is the warning's, not a note.
func TestDrainConsequencesSayWhatADrainDoes(t *testing.T) {
	nodeA := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.244.244.1"}}}}
	cluster := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: kube.AppNamespace, Name: kube.ClusterConfigMapName},
		Data: map[string]string{kube.ClusterKeyVIPAddress: "10.244.244.14", kube.ClusterKeyJoinServerIP: "10.244.244.1"}}
	holder := "node-a"
	vip := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: kube.VIPLeaseNamespace, Name: kube.VIPLeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	vm := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: kube.AppNamespace, Name: "virt-launcher-hmi-x2",
		Labels: map[string]string{"kubevirt.io": "virt-launcher", kube.LabelAppName: "hmi"}}, Spec: corev1.PodSpec{NodeName: "node-a"}}
	ctr := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: kube.AppNamespace, Name: "plc-gateway-1",
		Labels: map[string]string{kube.LabelAppName: "plc-gateway"}}, Spec: corev1.PodSpec{NodeName: "node-a"}}
	d := kube.Data{Nodes: []*corev1.Node{nodeA}, Pods: []*corev1.Pod{vm, ctr}, ConfigMaps: []*corev1.ConfigMap{cluster}, Leases: []*coordinationv1.Lease{vip}}
	got := strings.Join(DrainConsequences(d, safety.Preflight{Node: "node-a", Evict: []string{"eve-kube-app/virt-launcher-hmi-x2", "eve-kube-app/plc-gateway-1"}}), "\n")
	for _, want := range []string{"node-a is the seed", "virtual IP 10.244.244.14", "VM app hmi stops here and starts again on another node (a restart", "app plc-gateway stops here"} {
		if !strings.Contains(got, want) {
			t.Errorf("the notes do not say %q:\n%s", want, got)
		}
	}
}
