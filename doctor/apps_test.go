package doctor

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
)

// Issue 38: with node-b failed, the console and sitecon status said "app
// plc not known to run", the doctor had no finding (SC-APP-PENDING ok). The
// doctor now says it in the same words, an error for an app on a lost
// node, a warning for one that runs but is not ready; a Pending app stays
// SC-APP-PENDING's, a ready one is no finding.
func TestAppsNotRunningSaysWhatTheConsoleSays(t *testing.T) {
	now := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	appPod := func(app, name, node string, phase corev1.PodPhase, ready bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: kube.AppNamespace, Name: name, Labels: map[string]string{kube.LabelAppName: app},
			CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		return p
	}
	env := &Env{Now: now, Data: kube.Data{
		Nodes: []*corev1.Node{node("node-a", true, false), node("node-b", false, false)},
		Pods: []*corev1.Pod{
			appPod("plc", "plc-1", "node-b", corev1.PodRunning, true),
			appPod("hmi", "hmi-1", "node-a", corev1.PodRunning, false),
			appPod("broker", "broker-1", "node-a", corev1.PodRunning, true),
			appPod("waiting", "waiting-1", "", corev1.PodPending, false),
		},
	}}
	got := map[string]Finding{}
	for _, f := range checkAppsNotRunning(context.Background(), env) {
		got[f.Subject] = f
	}
	st := kube.Derive(env.Data, now)
	for _, a := range st.Apps {
		if a.Name == "plc" {
			if f, ok := got["plc"]; !ok || f.Severity != Error || f.Summary != a.NotRunningLine() || !strings.Contains(f.Summary, "not known to run") {
				t.Errorf("plc on lost node-b: %+v, want an error in the console's words %q", f, a.NotRunningLine())
			}
		}
	}
	if f, ok := got["hmi"]; !ok || f.Severity != Warn || !strings.Contains(f.Summary, "not running: Running on node-a") {
		t.Errorf("hmi running but not ready: %+v, want a warning", f)
	}
	for _, quiet := range []string{"broker", "waiting"} {
		if f, ok := got[quiet]; ok {
			t.Errorf("%s: %+v, want no finding here (ready, or SC-APP-PENDING's)", quiet, f)
		}
	}
}
