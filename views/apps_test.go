package views

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/safety"
)

// replacedApp is the site in the demo after node-b was lost: plc-gateway's
// old pod hangs terminating on node-b while its replacement runs on node-a.
func replacedApp() kube.Data {
	labels := map[string]string{kube.LabelAppName: "plc-gateway", kube.LabelAppUUID: "5b0f"}
	mkPod := func(name, node string, created time.Time, ready bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: kube.AppNamespace, Name: name, Labels: labels, CreationTimestamp: metav1.Time{Time: created}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		return p
	}
	// The old pod's name sorts first, as the demo's did: the cursor starts on it.
	old := mkPod("plc-gateway-54c7-aaaaa", "node-b", now.Add(-time.Hour), true)
	old.DeletionTimestamp = &metav1.Time{Time: now.Add(-time.Minute)}
	live := mkPod("plc-gateway-54c7-zzzzz", "node-a", now.Add(-50*time.Second), true)
	mkNode := func(name string, ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	}
	return kube.Data{
		Pods:  []*corev1.Pod{old, live},
		Nodes: []*corev1.Node{mkNode("node-a", corev1.ConditionTrue), mkNode("node-b", corev1.ConditionUnknown), mkNode("node-c", corev1.ConditionTrue)},
	}
}

// One row per app while its old pod terminates; the terminating pod is a
// note on that row, and the row says where the app runs now.
func TestAppsOneRowWhileOldPodTerminates(t *testing.T) {
	st := kube.Derive(replacedApp(), now)
	if len(st.Apps) != 1 {
		t.Fatalf("want one app, got %d: %+v", len(st.Apps), st.Apps)
	}
	app := st.Apps[0]
	if app.Node != "node-a" || app.Object != "plc-gateway-54c7-zzzzz" || !app.Ready {
		t.Errorf("the app's row should be its live pod on node-a: %+v", app)
	}
	if len(app.Terminating) != 1 || app.Terminating[0] != (kube.AppObject{Object: "plc-gateway-54c7-aaaaa", Node: "node-b"}) {
		t.Errorf("the old pod should be a note on the app: %+v", app.Terminating)
	}

	f := sampleFrame()
	f.Status.Apps = st.Apps
	a := NewApp(testContext(120, 30))
	a.Update(FrameMsg(f))
	press(a, "5")
	v := a.View()
	if n := strings.Count(v, "plc-gateway"); n != 1 {
		t.Errorf("plc-gateway should be on one row, found %d times:\n%s", n, v)
	}
	if line := lineOf(v, "plc-gateway"); !strings.Contains(line, "node-a") || !strings.Contains(line, "terminating on node-b") {
		t.Errorf("the row should run on node-a with the old pod noted:\n%s", line)
	}
}

// migrate's targets take where the app runs from its live pod: the node it
// runs on is not a target, the lost node is not where it runs.
func TestMigrateTargetsFromLivePod(t *testing.T) {
	d := replacedApp()
	st := kube.Derive(d, now)
	// The row the cursor starts on, as openMigrate finds it.
	app := st.Apps[0]
	why := map[string]string{}
	for _, tg := range safety.MigrateTargets(app.Node, app.Requires, kube.NodeFacts(d.Nodes)) {
		why[tg.Node] = tg.Why
		if tg.Eligible {
			why[tg.Node] = "eligible"
		}
	}
	want := map[string]string{"node-a": "the app runs here", "node-b": "not Ready", "node-c": "eligible"}
	for node, w := range want {
		if why[node] != w {
			t.Errorf("%s: %q, want %q (all: %v)", node, why[node], w, why)
		}
	}
}

func lineOf(screen, word string) string {
	for _, l := range strings.Split(screen, "\n") {
		if strings.Contains(l, word) {
			return l
		}
	}
	return ""
}
