package doctor

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
)

// Said before any node is lost: each node whose failover the leader would
// hold because it does not fence, or fences with another timeout; a node
// that never said is "not checked", never ok.
func TestFenceSettingsCheck(t *testing.T) {
	fenced := func(name, fence string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if fence != "" {
			n.Annotations = map[string]string{kube.AnnotationFence: fence}
		}
		return n
	}
	record := func(timeout string) []*corev1.ConfigMap {
		return []*corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Namespace: kube.AppNamespace, Name: kube.ClusterConfigMapName},
			Data: map[string]string{kube.ClusterKeyFailoverTimeout: timeout}}}
	}
	for _, tc := range []struct {
		name   string
		nodes  []*corev1.Node
		record []*corev1.ConfigMap
		want   []string // one finding each, in this order
	}{
		{"every node fences with one timeout", []*corev1.Node{fenced("a", "on 28s"), fenced("b", "on 28s"), fenced("c", "on 28s")}, nil, nil},
		{"one node runs --no-fence", []*corev1.Node{fenced("a", "on 28s"), fenced("b", "off 28s"), fenced("c", "on 28s")}, nil,
			[]string{"b's agent runs without fencing"}},
		{"one node with a longer timeout", []*corev1.Node{fenced("a", "on 28s"), fenced("b", "on 1m0s"), fenced("c", "on 28s")}, nil,
			[]string{"b fences with --failover-timeout 1m0s, the other nodes with 28s"}},
		{"one node never said", []*corev1.Node{fenced("a", "on 28s"), fenced("b", ""), fenced("c", "on 28s")}, nil,
			[]string{"not checked on b: node b never said that it fences"}},
		{"one node's settings unreadable", []*corev1.Node{fenced("a", "on 28s"), fenced("b", "perhaps"), fenced("c", "on 28s")}, nil,
			[]string{"not checked on b: node b's fence settings cannot be read"}},
		{"no node read", nil, nil, []string{"not checked: no node was read"}},
		// The cluster record's timeout is the cluster's, even when most
		// nodes run another: the leader times by the record's.
		{"most nodes differ from the cluster's", []*corev1.Node{fenced("a", "on 28s"), fenced("b", "on 1m0s"), fenced("c", "on 1m0s")}, record("28s"),
			[]string{"b fences with --failover-timeout 1m0s, not the cluster's 28s", "c fences with --failover-timeout 1m0s, not the cluster's 28s"}},
		{"every node runs the cluster's", []*corev1.Node{fenced("a", "on 1m0s"), fenced("b", "on 1m0s")}, record("1m0s"), nil},
		// A value too short for any fence is not the cluster's: the leader
		// times by its own then, and the nodes are judged by most nodes'.
		{"the cluster's too short", []*corev1.Node{fenced("a", "on 1m0s"), fenced("b", "on 1m0s")}, record("5s"),
			[]string{"not checked against the cluster's failover timeout: " + kube.ClusterConfigMapName + "'s " + kube.ClusterKeyFailoverTimeout + " 5s is shorter than a fence needs"}},
		{"the cluster's unreadable", []*corev1.Node{fenced("a", "on 28s"), fenced("b", "on 28s")}, record("soon"),
			[]string{"not checked against the cluster's failover timeout: " + kube.ClusterConfigMapName + "'s " + kube.ClusterKeyFailoverTimeout + " \"soon\" is not a positive duration"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkFenceSettings(context.Background(), &Env{Data: kube.Data{Nodes: tc.nodes, ConfigMaps: tc.record}})
			if len(got) != len(tc.want) {
				t.Fatalf("findings %+v, want %d", got, len(tc.want))
			}
			for i, f := range got {
				if tc.name == "the cluster's too short" && !strings.Contains(f.Next, kube.ClusterKeyFailoverTimeout+": 1m0s") {
					t.Errorf("the fix offered is %q: want the value the nodes run, 1m0s", f.Next)
				}
				if !strings.Contains(f.Summary, tc.want[i]) || f.Severity == OK {
					t.Errorf("finding %d: %s %q, want a problem mentioning %q", i, f.Severity, f.Summary, tc.want[i])
				}
				if strings.HasPrefix(f.Summary, "not checked") != f.NotChecked {
					t.Errorf("finding %d: %q says not checked %v", i, f.Summary, f.NotChecked)
				}
			}
		})
	}
}
