package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// waitPodJudged waits until the pod either runs (Running and Ready: nil) or
// carries a FailedAttachVolume event (returned): the simulators decided on it.
func waitPodJudged(t *testing.T, site *sitebox.TestSite, ns, name string, within time.Duration) *corev1.Event {
	t.Helper()
	core := site.Clients(t).Core.CoreV1()
	type judged struct {
		pod  *corev1.Pod
		held *corev1.Event
		err  error
	}
	return until(t, within, fmt.Sprintf("pod %s/%s ran or was held", ns, name), func() (judged, bool) {
		p, err := core.Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return judged{err: err}, false
		}
		if p.Status.Phase == corev1.PodRunning && kube.PodReady(p) {
			return judged{pod: p}, true
		}
		events, err := core.Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(p.UID) + ",reason=FailedAttachVolume"})
		if err != nil || len(events.Items) == 0 {
			return judged{pod: p, err: err}, false
		}
		return judged{pod: p, held: &events.Items[0]}, true
	}, func(j judged) string {
		if j.pod == nil {
			return fmt.Sprintf("the pod: %v", j.err)
		}
		return "the pod, no FailedAttachVolume event: " + podLine(*j.pod)
	}).held
}

// podLine is one pod as a wait's failure shows it.
func podLine(p corev1.Pod) string {
	line := fmt.Sprintf("%s on %q %s ready=%v", p.Name, p.Spec.NodeName, p.Status.Phase, kube.PodReady(&p))
	if p.DeletionTimestamp != nil {
		line += " deleting"
	}
	return line
}

// podList is a listing of pods as a wait saw it.
type podList struct {
	items []corev1.Pod
	err   error
}

func listPods(cs kubernetes.Interface, ns string, opts metav1.ListOptions) podList {
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), opts)
	if err != nil {
		return podList{err: err}
	}
	return podList{items: pods.Items}
}

func (l podList) String() string {
	if l.err != nil {
		return "listing the pods: " + l.err.Error()
	}
	if len(l.items) == 0 {
		return "no pods"
	}
	lines := make([]string, len(l.items))
	for i, p := range l.items {
		lines[i] = podLine(p)
	}
	return "pods: " + strings.Join(lines, "; ")
}

// podsInDetail lists the pods in ns with each one's conditions and
// container states: a failing wait's evidence of why a pod is not running.
func podsInDetail(cs kubernetes.Interface, ns string) string {
	l := listPods(cs, ns, metav1.ListOptions{})
	if l.err != nil || len(l.items) == 0 {
		return l.String()
	}
	lines := make([]string, len(l.items))
	for i, p := range l.items {
		line := podLine(p)
		for _, c := range p.Status.Conditions {
			line += fmt.Sprintf(" %s=%s", c.Type, c.Status)
			if c.Reason != "" || c.Message != "" {
				line += fmt.Sprintf("(%s: %s)", c.Reason, c.Message)
			}
		}
		for _, cst := range p.Status.ContainerStatuses {
			line += fmt.Sprintf(" container %s restarts=%d state=%+v", cst.Name, cst.RestartCount, cst.State)
		}
		lines[i] = line
	}
	return "pods in " + ns + ": " + strings.Join(lines, "; ")
}

// waitPods waits until the pods in ns that opts selects satisfy cond, and
// returns them.
func waitPods(t *testing.T, cs kubernetes.Interface, ns string, opts metav1.ListOptions, within time.Duration, what string, cond func([]corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	return until(t, within, what, func() (podList, bool) {
		l := listPods(cs, ns, opts)
		return l, l.err == nil && cond(l.items)
	}, podList.String).items
}

// onlyPodReadyOn: one pod, Ready on node.
func onlyPodReadyOn(node string) func([]corev1.Pod) bool {
	return func(pods []corev1.Pod) bool {
		return len(pods) == 1 && pods[0].Spec.NodeName == node && kube.PodReady(&pods[0])
	}
}

// waitEvent waits until an Event in ns that opts selects matches, and
// returns it.
func waitEvent(t *testing.T, cs kubernetes.Interface, ns string, opts metav1.ListOptions, within time.Duration, what string, match func(corev1.Event) bool) corev1.Event {
	t.Helper()
	type seen struct {
		events []corev1.Event
		found  *corev1.Event
		err    error
	}
	return *until(t, within, what, func() (seen, bool) {
		evs, err := cs.CoreV1().Events(ns).List(context.Background(), opts)
		if err != nil {
			return seen{err: err}, false
		}
		for i, e := range evs.Items {
			if match(e) {
				return seen{found: &evs.Items[i]}, true
			}
		}
		return seen{events: evs.Items}, false
	}, func(s seen) string {
		if s.err != nil {
			return "listing the Events: " + s.err.Error()
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d Events (%s):", len(s.events), opts.FieldSelector)
		for _, e := range s.events {
			fmt.Fprintf(&b, "\n  %s %s from %s/%s: %s", e.Type, e.Reason, e.Source.Component, e.Source.Host, e.Message)
		}
		return b.String()
	}).found
}

// scratchNamespace creates ns for one test on the shared site and, when the
// test ends, deletes it and waits until it is gone: a namespace's pods
// outlive its deletion for as long as their kubelets take, and a test
// after this one that drains the same node must not meet them (an emptyDir
// pod left on node-c stopped the next drain request there).
func scratchNamespace(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", ns, err)
			return
		}
		until(t, 90*time.Second, "namespace "+ns+" gone with its pods", func() (string, bool) {
			_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return fmt.Sprint(err), apierrors.IsNotFound(err)
		}, func(last string) string { return "last look: " + last })
	})
}
