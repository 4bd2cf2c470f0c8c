package kube

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/kube/safety"
)

// ClusterSeed is what the cluster's sitecon-cluster ConfigMap says of the
// seed, judged against the live Nodes. Anyone allowed to write a ConfigMap
// can write join_server_ip, so the address is trusted (Accepted) only when
// it is the InternalIP of a Ready etcd-member Node: a node that can take
// joiners in. The agent's seed-in-effect decision builds on this; so do the
// refusals of node remove/replace, which the console shares.
type ClusterSeed struct {
	// Present: the ConfigMap exists and names a join address.
	Present bool
	// ID is the record's cluster_id (empty in a record from before IDs).
	ID string
	// JoinIP is join_server_ip as written (invalid when it is not an address).
	JoinIP netip.Addr
	// Node is the Node whose InternalIP is JoinIP, if any.
	Node string
	// Accepted: Node is Ready and an etcd member.
	Accepted bool
	// Reason says why the address is not accepted.
	Reason string
}

// JudgeClusterSeed judges a sitecon-cluster ConfigMap's data against nodes.
func JudgeClusterSeed(data map[string]string, nodes []*corev1.Node) ClusterSeed {
	raw, ok := data[ClusterKeyJoinServerIP]
	if !ok || raw == "" {
		return ClusterSeed{Reason: "the cluster record names no join address"}
	}
	s := ClusterSeed{Present: true, ID: data[ClusterKeyID]}
	ip, err := netip.ParseAddr(raw)
	if err != nil {
		s.Reason = fmt.Sprintf("the cluster record's join address %q is not an address", raw)
		return s
	}
	s.JoinIP = ip
	for _, n := range nodes {
		if InternalIP(n) != ip.String() {
			continue
		}
		s.Node = n.Name
		switch {
		case !IsEtcdMember(n):
			s.Reason = fmt.Sprintf("%s (%s) is not an etcd member", n.Name, ip)
		case !NodeIsReady(n):
			s.Reason = fmt.Sprintf("%s (%s) is not Ready", n.Name, ip)
		default:
			s.Accepted = true
		}
		return s
	}
	s.Reason = fmt.Sprintf("no node of the cluster has the address %s", ip)
	return s
}

// ReadClusterSeed finds the sitecon-cluster ConfigMap in d and judges it;
// Present is false when there is none.
func ReadClusterSeed(d Data) ClusterSeed {
	for _, cm := range d.ConfigMaps {
		if cm.Name == ClusterConfigMapName && cm.Namespace == AppNamespace {
			return JudgeClusterSeed(cm.Data, d.Nodes)
		}
	}
	return ClusterSeed{Reason: "the cluster has no " + ClusterConfigMapName + " ConfigMap"}
}

// SeedRemovalRefusal says why node may not be removed or replaced now
// because it is the seed: the address every node joins through, and the one
// a replacement would take. Removing it would leave joiners nowhere to go;
// handing its address to a new device would make that device the seed of a
// cluster it never was part of. The cluster record is read as written, not
// only when accepted: a dead seed (not Ready) is exactly the one a site
// wants to replace, and it is still the address every node's config names
// until `sitecon seed` moves it. A server is refused too when the record is
// missing or names no address: which server is the seed cannot be told
// then, and unknown is not "not the seed". Only servers (etcd members) can
// be the seed; a worker never is. Empty: not the seed.
func SeedRemovalRefusal(d Data, node string) string {
	var target *corev1.Node
	for _, n := range d.Nodes {
		if n.Name == node {
			target = n
		}
	}
	if target == nil || !IsServer(target) && !IsEtcdMember(target) {
		return ""
	}
	s := ReadClusterSeed(d)
	switch {
	case !s.Present && !clusterRecordExists(d):
		// EnsureClusterConfigMap runs when an agent links to the cluster:
		// a restart brings the record back from that server's config.
		return fmt.Sprintf("cannot tell whether %s is the seed: %s; the agents write it when they connect to the cluster: restart the sitecon agent on a Ready server, then try again", node, s.Reason)
	case !s.JoinIP.IsValid():
		return fmt.Sprintf("cannot tell whether %s is the seed: %s; %s", node, s.Reason, seedMove(d, node, "name the seed first"))
	case InternalIP(target) == "":
		return fmt.Sprintf("cannot tell whether %s is the seed: it has no internal address to compare with the join address %s", node, s.JoinIP)
	case InternalIP(target) != s.JoinIP.String():
		return ""
	}
	return fmt.Sprintf("%s is the seed in effect (join address %s); %s", node, s.JoinIP, seedMove(d, node, "move the seed first"))
}

// clusterRecordExists: d holds the sitecon-cluster ConfigMap, whatever it says.
func clusterRecordExists(d Data) bool {
	return slices.ContainsFunc(d.ConfigMaps, func(cm *corev1.ConfigMap) bool {
		return cm.Name == ClusterConfigMapName && cm.Namespace == AppNamespace
	})
}

// seedMove says how to make another node than node the seed: the nodes
// safety.SeedCheck would accept, or that there is none.
func seedMove(d Data, node, first string) string {
	var candidates []string
	facts := NodeFacts(d.Nodes)
	for _, n := range d.Nodes {
		if n.Name != node && safety.SeedCheck(facts, n.Name) == nil {
			candidates = append(candidates, n.Name)
		}
	}
	slices.Sort(candidates)
	if len(candidates) == 0 {
		return "no other Ready etcd member can take it now; bring one back first"
	}
	move := first + ": sitecon seed " + candidates[0]
	if len(candidates) > 1 {
		move += " (or " + strings.Join(candidates[1:], ", ") + ")"
	}
	return move
}
