package kube

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod's row carries what its detail draws: its conditions, the
// scheduler's reason while it has no node, and each container's state
// with its restarts and why it last ended.
func TestPodRowCarriesConditionsAndContainers(t *testing.T) {
	ended := metav1.NewTime(time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC))
	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: AppNamespace, Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending,
			Conditions:            []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes are available"}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", RestartCount: 3,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, FinishedAt: ended}}}}}}
	rows := PodRows([]*corev1.Pod{pending})
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	r := rows[0]
	if r.Unscheduled == nil || r.Unscheduled.Reason != "Unschedulable" || r.Unscheduled.Message != "0/3 nodes are available" || len(r.Conditions) != 1 {
		t.Errorf("scheduler's reason: %+v, conditions %+v", r.Unscheduled, r.Conditions)
	}
	want := []ContainerState{
		{Name: "init", Init: true, State: "terminated", Reason: "Completed, exit 0"},
		{Name: "app", State: "waiting", Reason: "CrashLoopBackOff", Restarts: 3, LastTermination: "OOMKilled, exit 137", LastEnded: ended.Time},
	}
	if len(r.Containers) != len(want) {
		t.Fatalf("containers %+v", r.Containers)
	}
	for i := range want {
		if r.Containers[i] != want[i] {
			t.Errorf("container %d: %+v, want %+v", i, r.Containers[i], want[i])
		}
	}
	pending.Spec.NodeName = "node-a"
	if r := PodRows([]*corev1.Pod{pending})[0]; r.Unscheduled != nil {
		t.Errorf("a pod with a node has no scheduler's reason: %+v", r.Unscheduled)
	}
}
