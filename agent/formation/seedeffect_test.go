package formation

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/kube"
)

func seedTestNode(name, ip string, etcd, ready bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if etcd {
		n.Labels[kube.LabelEtcd] = "true"
		n.Labels["node-role.kubernetes.io/control-plane"] = "true"
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
	return n
}

// The seed in effect, decided once from the config, the seed record, the
// cluster's record and the live Nodes. The cluster's word counts only for
// this cluster, inside the prefix, at a Ready etcd member's address; it
// never makes a worker the seed, and only the config's own seed may ever
// initialise.
func TestSeedInEffect(t *testing.T) {
	const id = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	members := []*corev1.Node{
		seedTestNode("node-a", "10.244.244.1", true, true),
		seedTestNode("node-b", "10.244.244.2", true, true),
		seedTestNode("node-c", "10.244.244.3", true, true),
	}
	withA := func(a *corev1.Node) []*corev1.Node { return []*corev1.Node{a, members[1], members[2]} }
	cluster := func(join string) map[string]string {
		return map[string]string{kube.ClusterKeyID: id, kube.ClusterKeyJoinServerIP: join}
	}
	worker := func(c *config.Config) { c.IsWorkerNode = true; c.ClusterIPPrefix = "10.244.244.5/28" }
	cases := []struct {
		name    string
		edit    func(*config.Config)
		record  *SeedRecord
		cluster map[string]string
		nodes   []*corev1.Node
		join    string
		source  SeedSource
		isSeed  bool
		mayInit bool
		stale   bool
		note    string // part of ClusterNote; empty: none
	}{
		{name: "config only", join: "10.244.244.1", source: SeedFromConfig, mayInit: true},
		{name: "config's own seed", edit: func(c *config.Config) { c.ClusterIPPrefix = "10.244.244.1/28" },
			join: "10.244.244.1", source: SeedFromConfig, isSeed: true, mayInit: true},
		{name: "record moves the seed", record: &SeedRecord{ClusterID: id, ConfigJoinIP: "10.244.244.1", JoinServerIP: "10.244.244.3"},
			join: "10.244.244.3", source: SeedFromRecord},
		{name: "record makes this server the seed, never an initialiser",
			record: &SeedRecord{ClusterID: id, ConfigJoinIP: "10.244.244.1", JoinServerIP: "10.244.244.2"},
			join:   "10.244.244.2", source: SeedFromRecord, isSeed: true},
		{name: "record of another cluster is stale", record: &SeedRecord{ClusterID: "other", ConfigJoinIP: "10.244.244.1", JoinServerIP: "10.244.244.3"},
			join: "10.244.244.1", source: SeedFromConfig, mayInit: true, stale: true},
		{name: "record made against another config seed is stale", record: &SeedRecord{ClusterID: id, ConfigJoinIP: "10.244.244.9", JoinServerIP: "10.244.244.3"},
			join: "10.244.244.1", source: SeedFromConfig, mayInit: true, stale: true},
		{name: "cluster moves the seed to a Ready etcd member", cluster: cluster("10.244.244.3"), nodes: members,
			join: "10.244.244.3", source: SeedFromCluster},
		{name: "cluster outranks the record", record: &SeedRecord{ClusterID: id, ConfigJoinIP: "10.244.244.1", JoinServerIP: "10.244.244.3"},
			cluster: cluster("10.244.244.2"), nodes: members, join: "10.244.244.2", source: SeedFromCluster, isSeed: true},
		{name: "cluster agrees with the config", cluster: cluster("10.244.244.1"), nodes: members,
			join: "10.244.244.1", source: SeedFromConfig, mayInit: true},
		{name: "cluster record of another cluster", cluster: map[string]string{kube.ClusterKeyID: "other", kube.ClusterKeyJoinServerIP: "10.244.244.3"},
			nodes: members, join: "10.244.244.1", source: SeedFromConfig, mayInit: true, note: "of cluster other"},
		{name: "cluster names an address outside the prefix", cluster: cluster("192.168.1.1"), nodes: members,
			join: "10.244.244.1", source: SeedFromConfig, mayInit: true, note: "outside the cluster prefix"},
		{name: "cluster names an address no node has", cluster: cluster("10.244.244.9"), nodes: members,
			join: "10.244.244.1", source: SeedFromConfig, mayInit: true, note: "no node of the cluster has"},
		{name: "cluster names a NotReady node", cluster: cluster("10.244.244.4"),
			nodes: append(members, seedTestNode("node-d", "10.244.244.4", true, false)),
			join:  "10.244.244.1", source: SeedFromConfig, mayInit: true, note: "not Ready"},
		{name: "cluster names a node without etcd", cluster: cluster("10.244.244.4"),
			nodes: append(members, seedTestNode("node-d", "10.244.244.4", false, true)),
			join:  "10.244.244.1", source: SeedFromConfig, mayInit: true, note: "not an etcd member"},
		{name: "cluster known, nodes unknown", cluster: cluster("10.244.244.3"),
			join: "10.244.244.1", source: SeedFromConfig, mayInit: true, note: "cannot be checked"},
		{name: "cluster names a worker's own address", edit: worker, cluster: cluster("10.244.244.5"),
			nodes: append(members, seedTestNode("node-w", "10.244.244.5", true, true)),
			join:  "10.244.244.1", source: SeedFromConfig, mayInit: true, note: "a worker is never the seed"},
		{name: "worker follows a moved seed and stays a worker", edit: worker, cluster: cluster("10.244.244.3"), nodes: members,
			join: "10.244.244.3", source: SeedFromCluster},
		{name: "cluster names a dead seed: the config's stands", edit: func(c *config.Config) { c.JoinServerIP = "10.244.244.3" },
			cluster: cluster("10.244.244.1"), nodes: withA(seedTestNode("node-a", "10.244.244.1", true, false)),
			join: "10.244.244.3", source: SeedFromConfig, mayInit: true, note: "not Ready"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := agenttest.Validated(t, tc.edit)
			d := SeedInEffect(SeedInputs{Config: v, Record: tc.record, Cluster: tc.cluster, Nodes: tc.nodes})
			if d.JoinIP.String() != tc.join || d.Config.JoinIP != d.JoinIP || d.Source != tc.source {
				t.Errorf("join %s (config %s) from %s, want %s from %s; why: %s", d.JoinIP, d.Config.JoinIP, d.Source, tc.join, tc.source, d.Why)
			}
			if d.Config.IsSeed != tc.isSeed || d.MayInitialise != tc.mayInit || d.RecordStale != tc.stale {
				t.Errorf("isSeed %v mayInit %v stale %v, want %v %v %v", d.Config.IsSeed, d.MayInitialise, d.RecordStale, tc.isSeed, tc.mayInit, tc.stale)
			}
			if (tc.note == "") != (d.ClusterNote == "") || !strings.Contains(d.ClusterNote, tc.note) {
				t.Errorf("cluster note %q, want one saying %q", d.ClusterNote, tc.note)
			}
			if d.Config.IsWorkerNode != v.IsWorkerNode || k3s.DecideRole(d.Config) == k3s.RoleSeed && v.IsWorkerNode {
				t.Errorf("the role changed: worker %v → %s", v.IsWorkerNode, k3s.DecideRole(d.Config))
			}
			if d.Why == "" {
				t.Error("no reason given")
			}
		})
	}
}
