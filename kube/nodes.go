package kube

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/kube/safety"
)

// NodeNames lists node names, sorted, for messages.
func NodeNames(nodes []*corev1.Node) string {
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// InternalIP is a node's internal (cluster) address, or "".
func InternalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// NodeRoles lists a node's roles from its node-role labels, sorted, with
// "edgeworker" for a generic host; a node with none is a plain "agent".
func NodeRoles(n *corev1.Node) []string {
	var roles []string
	for k, v := range n.Labels {
		if k == LabelEdgeworker && v == "true" {
			roles = append(roles, "edgeworker")
		} else if role, ok := strings.CutPrefix(k, nodeRolePrefix); ok && role != "" {
			roles = append(roles, role)
		}
	}
	if len(roles) == 0 {
		roles = []string{"agent"}
	}
	slices.Sort(roles)
	return roles
}

// IsServer reports whether a node runs the control plane (k3s server).
func IsServer(n *corev1.Node) bool {
	for _, r := range NodeRoles(n) {
		if r == "control-plane" || r == "master" {
			return true
		}
	}
	return false
}

// IsEtcdMember reports whether the node runs an etcd member (k3s labels
// every server with embedded etcd so). Quorum is counted over these, not
// over control-plane nodes: a server on an external datastore has no vote.
func IsEtcdMember(n *corev1.Node) bool { return n.Labels[LabelEtcd] == "true" }

// NodeReadyCondition is the node's Ready condition, or nil when the node
// has none yet (a node that never reported).
func NodeReadyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// NodeIsReady says whether the node's Ready condition is True: the one
// readiness test everything that acts on nodes uses.
func NodeIsReady(n *corev1.Node) bool {
	c := NodeReadyCondition(n)
	return c != nil && c.Status == corev1.ConditionTrue
}

// NodeFacts is each Node as the rules in kube/safety read it: readiness,
// role, cordon, address and labels.
func NodeFacts(nodes []*corev1.Node) []safety.Node {
	var out []safety.Node
	for _, n := range nodes {
		out = append(out, safety.Node{Name: n.Name, Ready: NodeIsReady(n),
			Server: IsServer(n) || IsEtcdMember(n), EtcdMember: IsEtcdMember(n),
			Cordoned: n.Spec.Unschedulable, InternalIP: InternalIP(n), Labels: n.Labels})
	}
	return out
}
