package apps

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
)

// The leader's timer counts the lost node's silence, not only its own
// first sighting of the pod: a pod seen stuck while its node's agent still
// answered (k3s down there, its containers perhaps running) is held; when
// that node is then cut off, it fences itself FenceAfter into the silence,
// so the force-delete must wait the whole timer from the silence, not
// follow at the next recheck (DeriveFenceTimings).
func TestFailoverTimerCountsTheSilence(t *testing.T) {
	t0 := time.Now()
	const timeout = time.Minute
	deleted := metav1.NewTime(t0)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "eve-kube-app", DeletionTimestamp: &deleted},
		Spec: corev1.PodSpec{NodeName: "node-b"}}
	// node-b fences with the leader's timeout.
	lost := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b", Annotations: map[string]string{kube.AnnotationFence: "on 1m0s"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}}}
	decide := func(sp *stuckPod, at time.Duration) FailoverAction {
		in := FailoverInput{App: testApp(), Pod: pod, Node: lost, FirstSeen: sp.timerStart(), Now: t0.Add(at), Timeout: timeout,
			Evidence: &FailoverEvidence{Probe: "connection timed out"}} // silent, no claims
		return DecideFailover(in).Action
	}

	// Silent from the first sighting (a node powered off): the timer runs
	// from that sighting, as before.
	off := &stuckPod{firstSeen: t0}
	off.observeLife(false, t0)
	off.observeLife(false, t0.Add(10*time.Second))
	if got := decide(off, timeout); got != FailoverForceDelete {
		t.Errorf("a node silent from the first sighting: %s at the timer's end, want force-delete", got)
	}

	// Answering for 90 s (held), then silent from 100 s on.
	cut := &stuckPod{firstSeen: t0}
	for at := time.Duration(0); at <= 90*time.Second; at += 10 * time.Second {
		cut.observeLife(true, t0.Add(at))
	}
	cut.observeLife(false, t0.Add(100*time.Second))
	cut.observeLife(false, t0.Add(110*time.Second))
	if got := decide(cut, 110*time.Second); got == FailoverForceDelete {
		t.Errorf("force-deleted 10 s into the node's silence: the cut-off node fences only %s into it", DeriveFenceTimings(timeout).FenceAfter)
	}
	if got := decide(cut, 100*time.Second+timeout); got != FailoverForceDelete {
		t.Errorf("a node silent for the whole timer: %s, want force-delete", got)
	}
	// An answer again starts it over.
	cut.observeLife(true, t0.Add(170*time.Second))
	cut.observeLife(false, t0.Add(180*time.Second))
	if got := decide(cut, 200*time.Second); got == FailoverForceDelete {
		t.Error("force-deleted 20 s after the node answered again")
	}
}
