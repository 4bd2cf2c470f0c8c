package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// What the console's alerts and details say of a Pending app and a
// cordoned node comes from what the real scheduler and node controller
// write: the scheduler's PodScheduled=False message on an app's pod that
// no node matches, and the unschedulable taint (with its time) that the
// node controller puts on a cordoned node.
func TestStatusCarriesTheSchedulersReasonAndTheCordon(t *testing.T) {
	site := sitebox.Shared(t)
	snap := sitebox.StartSnapshot(t, site.Config)
	admin, err := kubernetes.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "nowhere-0", Namespace: kube.AppNamespace, Labels: map[string]string{kube.LabelAppName: "nowhere"}},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"sitecon.test/no-such-label": "x"},
			Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
	if _, err := admin.CoreV1().Pods(kube.AppNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.CoreV1().Pods(kube.AppNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	st := waitFor(t, snap, 30*time.Second, "the scheduler's reason on app nowhere", func(st kube.ClusterStatus) bool {
		for _, a := range st.Apps {
			if a.Name == "nowhere" && a.Unscheduled != nil {
				return true
			}
		}
		return false
	})
	for _, a := range st.Apps {
		if a.Name == "nowhere" {
			if u := a.Unscheduled; u.Reason != "Unschedulable" || !strings.Contains(u.Message, "didn't match Pod's node affinity/selector") || u.Since.IsZero() {
				t.Errorf("unscheduled = %+v, want the scheduler's Unschedulable and its message", *u)
			}
		}
	}

	before := time.Now().Add(-time.Second)
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "node-c", "application/merge-patch+json", []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.CoreV1().Nodes().Patch(context.Background(), "node-c", "application/merge-patch+json", []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{})
	})
	st = waitFor(t, snap, 30*time.Second, "node-c's cordon time", func(st kube.ClusterStatus) bool {
		for _, n := range st.Nodes {
			if n.Name == "node-c" {
				return n.CordonedSince != nil
			}
		}
		return false
	})
	for _, n := range st.Nodes {
		if n.Name == "node-c" {
			if n.CordonedSince.Before(before) || n.Schedulable || !strings.Contains(strings.Join(n.Taints, " "), corev1.TaintNodeUnschedulable+":NoSchedule") {
				t.Errorf("node-c: cordoned since %v (cordoned after %v), taints %v", n.CordonedSince, before, n.Taints)
			}
			if len(n.Conditions) == 0 {
				t.Errorf("node-c has no conditions: %+v", n)
			}
		}
	}
}
