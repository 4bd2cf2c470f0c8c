package change

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/kubetest"
	"github.com/sitecon/sitecon/kube/safety"
)

func TestMigrateTargets(t *testing.T) {
	d := site3()
	d.Nodes[0].Labels = map[string]string{"gpu": "yes"}
	d.Nodes[1].Spec.Unschedulable = true
	d.Nodes = append(d.Nodes, kubetest.Node("node-d", "10.244.244.4", corev1.ConditionFalse, kubetest.T0, map[string]string{"gpu": "yes"}),
		kubetest.Node("node-e", "10.244.244.5", corev1.ConditionTrue, kubetest.T0, map[string]string{"gpu": "yes"}))
	app := kube.AppStatus{Name: "hmi", Node: "node-e", Requires: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"yes"}}}}
	got := map[string]safety.MigrateTarget{}
	for _, tg := range safety.MigrateTargets(app.Node, app.Requires, kube.NodeFacts(d.Nodes)) {
		got[tg.Node] = tg
	}
	want := map[string]string{"node-a": "", "node-b": "cordoned", "node-c": "lacks gpu in yes", "node-d": "not Ready", "node-e": "the app runs here"}
	for n, why := range want {
		if got[n].Eligible != (why == "") || got[n].Why != why {
			t.Errorf("%s: %+v, want why %q", n, got[n], why)
		}
	}
}

// Progress lines say where an app is in words: a VM between its old
// instance and the new one has no phase and no node yet.
func TestAppWhere(t *testing.T) {
	for _, tc := range []struct {
		app  kube.AppStatus
		want string
	}{
		{kube.AppStatus{Phase: "Running", Node: "node-c"}, "Running on node-c"},
		{kube.AppStatus{Phase: "Scheduling"}, "Scheduling, not placed yet"},
		{kube.AppStatus{}, "starting, not placed yet"},
	} {
		if got := kube.AppWhere(tc.app); got != tc.want {
			t.Errorf("kube.AppWhere(%+v) = %q, want %q", tc.app, got, tc.want)
		}
	}
}
