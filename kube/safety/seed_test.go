package safety_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
)

// Issue 19 §4: a seed that cannot be told is not "not the seed". The seed
// is the server whose address is the cluster record's join address; when
// the record is missing, or names no usable address, removing or
// replacing a server is refused with how to go on.
func TestSeedRemovalRefusal(t *testing.T) {
	withIP := func(n *corev1.Node, ip string) *corev1.Node {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		return n
	}
	nodes := func() []*corev1.Node {
		return []*corev1.Node{
			withIP(mkNode("node-a", true, servers), "10.244.244.1"), withIP(mkNode("node-b", true, servers), "10.244.244.2"),
			withIP(mkNode("node-c", false, servers), "10.244.244.3"), withIP(mkNode("node-w", true, workers), "10.244.244.9"),
		}
	}
	record := func(data map[string]string) []*corev1.ConfigMap {
		return []*corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Name: kube.ClusterConfigMapName, Namespace: kube.AppNamespace}, Data: data}}
	}
	seedIsA := record(map[string]string{kube.ClusterKeyJoinServerIP: "10.244.244.1", kube.ClusterKeyID: "c1"})
	for name, tc := range map[string]struct {
		cms  []*corev1.ConfigMap
		node string
		want []string // each in the refusal; none: no refusal
	}{
		"the seed": {cms: seedIsA, node: "node-a",
			want: []string{"node-a is the seed in effect (join address 10.244.244.1); move the seed first: sitecon seed node-b"}},
		"another server":           {cms: seedIsA, node: "node-c"},
		"a worker":                 {cms: seedIsA, node: "node-w"},
		"a worker, with no record": {node: "node-w"},
		"a node the cluster lacks": {node: "node-z"},
		"a server, with no record": {node: "node-c",
			want: []string{"cannot tell whether node-c is the seed: the cluster has no sitecon-cluster ConfigMap",
				"the agents write it when they connect to the cluster: restart the sitecon agent on a Ready server, then try again"}},
		"a server, with a record naming no join address": {cms: record(map[string]string{kube.ClusterKeyID: "c1"}), node: "node-a",
			want: []string{"cannot tell whether node-a is the seed: the cluster record names no join address",
				"name the seed first: sitecon seed node-b"}},
		"a server, with a join address that is not one": {cms: record(map[string]string{kube.ClusterKeyJoinServerIP: "node-a"}), node: "node-b",
			want: []string{`cannot tell whether node-b is the seed: the cluster record's join address "node-a" is not an address`,
				"name the seed first: sitecon seed node-a"}},
	} {
		t.Run(name, func(t *testing.T) {
			got := kube.SeedRemovalRefusal(kube.Data{Nodes: nodes(), ConfigMaps: tc.cms}, tc.node)
			if len(tc.want) == 0 && got != "" {
				t.Fatalf("want no refusal, got %q", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("refusal %q lacks %q", got, w)
				}
			}
		})
	}
}
