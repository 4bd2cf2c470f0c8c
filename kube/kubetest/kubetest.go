// Package kubetest builds the cluster objects kube's tests and its
// neighbours' judge: nodes, pods and Longhorn replicas with only the
// fields the model reads.
package kubetest

import (
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// T0 is the fixtures' "now": a fixed instant, so ages read the same in every run.
var T0 = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

// Node is a node named name at ip whose Ready condition is ready since
// since, with a server's capacity and kubelet version.
func Node(name, ip string, ready corev1.ConditionStatus, since time.Time, labels map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(since), Message: "kubelet stopped posting"}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}},
			Capacity:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")},
			Allocatable: corev1.ResourceList{
				corev1.ResourceMemory:           resource.MustParse("7Gi"),
				corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
			},
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.34.4+k3s1"},
		},
	}
}

// Pod is a pod ns/name on nodeName in phase, Ready or not.
func Pod(ns, name, nodeName string, phase corev1.PodPhase, ready bool) *corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{NodeName: nodeName},
		Status:     corev1.PodStatus{Phase: phase, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
	}
}

// Replica is a Longhorn replica of volume on nodeName in state, with its
// failed-at and healthy-at marks as Longhorn writes them.
func Replica(name, volume, nodeName, failedAt, healthyAt string, state lhv1beta2.InstanceState) *lhv1beta2.Replica {
	r := &lhv1beta2.Replica{ObjectMeta: metav1.ObjectMeta{Name: name}}
	r.Spec.VolumeName, r.Spec.NodeID = volume, nodeName
	r.Spec.FailedAt, r.Spec.HealthyAt = failedAt, healthyAt
	r.Status.CurrentState = state
	return r
}

// ServerLabels are the labels k3s and sitecon put on a server node (the
// node UUID's key is kube.LabelNodeUUID, written out: kube's own tests
// import this package).
var ServerLabels = map[string]string{
	"node-role.kubernetes.io/control-plane": "true",
	"node-role.kubernetes.io/etcd":          "true",
	"node-role.kubernetes.io/master":        "true",
	"node-uuid":                             "0d1c2b3a-0000-4000-8000-000000000001",
}
