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

func node(name string, ready, cordoned bool, extra ...corev1.NodeCondition) *corev1.Node {
	st := corev1.ConditionTrue
	if !ready {
		st = corev1.ConditionFalse
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kube.LabelEtcd: "true"}},
		Spec: corev1.NodeSpec{Unschedulable: cordoned}}
	n.Status.Conditions = append([]corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}, extra...)
	return n
}

func TestEtcdQuorumArithmetic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		nodes []*corev1.Node
		want  Severity
		text  string
	}{
		{"three healthy", []*corev1.Node{node("a", true, false), node("b", true, false), node("c", true, false)}, OK, "quorum survives 1 more server loss"},
		{"one down", []*corev1.Node{node("a", true, false), node("b", true, false), node("c", false, false)}, Warn, "1 etcd member down; quorum survives no further server loss"},
		{"two down", []*corev1.Node{node("a", true, false), node("b", false, false), node("c", false, false)}, Error, "etcd has no quorum: 1 of the 2 needed"},
		// A cordoned member still votes: not a lost quorum.
		{"one down, one cordoned", []*corev1.Node{node("a", true, false), node("b", true, true), node("c", false, false)}, Warn, "1 etcd member down"},
		{"one server", []*corev1.Node{node("a", true, false)}, Info, "one etcd member"},
		{"two servers", []*corev1.Node{node("a", true, false), node("b", true, false)}, Warn, "quorum survives no server loss"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := checkEtcdQuorum(context.Background(), &Env{Data: kube.Data{Nodes: tc.nodes}, Now: time.Now()})
			if len(fs) != 1 || fs[0].Severity != tc.want || !strings.Contains(fs[0].Summary, tc.text) {
				t.Errorf("got %+v; want %s containing %q", fs, tc.want, tc.text)
			}
		})
	}
}

func TestDiskPressure(t *testing.T) {
	since := metav1.NewTime(time.Now().Add(-time.Hour))
	pressed := node("b", true, false, corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionTrue,
		Reason: "KubeletHasDiskPressure", Message: "kubelet has disk pressure", LastTransitionTime: since})
	calm := node("a", true, false, corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse})
	fs := checkDiskPressure(context.Background(), &Env{Data: kube.Data{Nodes: []*corev1.Node{calm, pressed}}, Now: time.Now()})
	if len(fs) != 1 || fs[0].Subject != "b" || fs[0].Severity != Warn || !strings.Contains(fs[0].Summary, "b has disk pressure for 1h0m0s") || fs[0].Since == nil {
		t.Errorf("got %+v; want node b's disk pressure for 1h", fs)
	}
	if fs := checkDiskPressure(context.Background(), &Env{Data: kube.Data{Nodes: []*corev1.Node{calm}}, Now: time.Now()}); len(fs) != 0 {
		t.Errorf("no pressure: %+v", fs)
	}
}
