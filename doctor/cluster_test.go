package doctor

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
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

// With a fresh member list published, the arithmetic over etcd's members
// (each NotReady or cordoned one as the Node says).
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
			now := time.Now()
			d := withEtcdList(kube.Data{Nodes: tc.nodes}, now.Add(-5*time.Second))
			fs := checkEtcdQuorum(context.Background(), &Env{Data: d, Now: now})
			if len(fs) != 1 || fs[0].Severity != tc.want || !strings.Contains(fs[0].Summary, tc.text) || fs[0].NotChecked {
				t.Fatalf("got %+v; want %s containing %q", fs, tc.want, tc.text)
			}
			if !slices.ContainsFunc(fs[0].Evidence, func(e string) bool { return strings.HasPrefix(e, "etcd members as etcd lists them") }) ||
				!slices.Contains(fs[0].Evidence, "leader: a") {
				t.Errorf("the evidence does not say etcd's own list was counted, and its leader: %q", fs[0].Evidence)
			}
		})
	}
}

// Issue 36 A: with etcd's member list not to be counted on (none, stale,
// dated ahead of this clock, no voting member), quorum is not checked and
// the finding says why and what to do; it is never ok, whatever the
// Nodes' etcd labels count (they miss a member without a Node), and an
// error when even they count quorum lost.
func TestEtcdQuorumUnknownIsNeverOK(t *testing.T) {
	healthy := []*corev1.Node{node("a", true, false), node("b", true, false), node("c", true, false)}
	twoDown := []*corev1.Node{node("a", true, false), node("b", false, false), node("c", false, false)}
	now := time.Now()
	for _, tc := range []struct {
		name  string
		nodes []*corev1.Node
		list  func(kube.Data) kube.Data
		want  Severity
		why   []string // in the summary, or its first evidence
		next  string
	}{
		{"not published", healthy, nil, Warn,
			[]string{"quorum not checked: etcd's member list is not published"}, "check that they run (sitecon status), then try again"},
		{"stale", healthy, func(d kube.Data) kube.Data { return withEtcdList(d, now.Add(-10*time.Minute)) }, Warn,
			[]string{"quorum not checked: etcd's member list is stale", "10m0s ago by this clock"}, "check the servers' agents (sitecon status) and the nodes' clocks, then try again"},
		{"dated a minute ahead", healthy, func(d kube.Data) kube.Data { return withEtcdList(d, now.Add(time.Minute)) }, Warn,
			[]string{"quorum not checked: etcd's member list in eve-kube-app/sitecon-etcd-members has no entry a current server wrote", "entry a ignored: dated 1m0s ahead of this clock"},
			"check the nodes' clocks (sitecon doctor), then try again"},
		{"no voting member", healthy, func(d kube.Data) kube.Data { return withEtcdList(d, now, learnersOnly) }, Warn,
			[]string{"quorum not checked: etcd's member list as a observed it", "lists no voting member"}, "wait for a fresh list, then try again"},
		{"not published, two servers down", twoDown, nil, Error,
			[]string{"etcd's quorum looks lost: even the Nodes' etcd labels count 1 of 3 servers up, 2 needed", "not checked: etcd's member list is not published"},
			"check that they run (sitecon status), then try again"},
		{"stale, two servers down", twoDown, func(d kube.Data) kube.Data { return withEtcdList(d, now.Add(-10*time.Minute)) }, Error,
			[]string{"etcd's quorum looks lost", "not checked: etcd's member list is stale"}, "bring servers back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := kube.Data{Nodes: tc.nodes}
			if tc.list != nil {
				d = tc.list(d)
			}
			fs := checkEtcdQuorum(context.Background(), &Env{Data: d, Now: now})
			if len(fs) != 1 {
				t.Fatalf("got %d findings: %+v", len(fs), fs)
			}
			f := fs[0]
			if f.Severity != tc.want || !f.NotChecked || strings.Contains(f.Summary, "healthy") || strings.Contains(f.Summary, "survives") {
				t.Errorf("got %s (not checked: %v) %q; want %s, not checked, no verdict on quorum", f.Severity, f.NotChecked, f.Summary, tc.want)
			}
			said := f.Summary
			if len(f.Evidence) > 0 {
				said += "\n" + f.Evidence[0]
			}
			for _, why := range tc.why {
				if !strings.Contains(said, why) {
					t.Errorf("the finding %q does not say %q", said, why)
				}
			}
			if !strings.Contains(f.Next, tc.next) {
				t.Errorf("the next step %q does not say %q", f.Next, tc.next)
			}
			if !slices.Contains(f.Evidence, "the Nodes' etcd role label names a, b, c: not counted (it misses a member without a Node, as right after a node remove)") {
				t.Errorf("the evidence does not show the labels as not counted: %q", f.Evidence)
			}
		})
	}
}

// withEtcdList publishes in d the member list a healthy etcd gives when
// its members are the Nodes with the etcd role label (the first leads),
// as the first Node observed it at that time; edits change it first.
func withEtcdList(d kube.Data, at time.Time, edits ...func(*nodestate.EtcdView)) kube.Data {
	view := nodestate.EtcdView{ObservedAt: at.UTC(), ObservedBy: d.Nodes[0].Name, Endpoint: "https://127.0.0.1:2379"}
	for _, n := range d.Nodes {
		if kube.IsEtcdMember(n) {
			view.Members = append(view.Members, nodestate.EtcdMemberStatus{Name: n.Name, Healthy: true, Leader: len(view.Members) == 0})
		}
	}
	for _, edit := range edits {
		edit(&view)
	}
	raw, err := json.Marshal(view)
	if err != nil {
		panic(err)
	}
	d.ConfigMaps = append(d.ConfigMaps, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kube.EtcdMembersConfigMapName, Namespace: kube.AppNamespace},
		Data: map[string]string{view.ObservedBy: string(raw)}})
	return d
}

// learnersOnly makes every member of a published list a learner, which
// etcd's own list never is all of.
func learnersOnly(v *nodestate.EtcdView) {
	for i := range v.Members {
		v.Members[i].Learner, v.Members[i].Leader = true, false
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
