package kube

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/kube/safety"
)

// DrainCheck is what the drain preflight judges, as read from the cluster:
// the snapshot's data, and the pods the drain would evict (from kubectl's
// drain filters). Facts turns it, once, into the plain values the rule in
// kube/safety (safety.DrainPreflight) judges.
type DrainCheck struct {
	Node     string
	Data     Data
	Apps     []AppStatus
	Evict    []corev1.Pod
	Excluded []error // pods the drain filters refuse (unmanaged, local data)
	// LonghornPolicy is Longhorn's node-drain-policy setting, if read.
	LonghornPolicy string
	// Purpose: a drain (the zero value), a remove or a replace.
	Purpose safety.Purpose
	// LocalNode is the node this program runs on, when known: a node does
	// not remove itself.
	LocalNode string
	// Now judges the age of the published etcd member list; zero: the
	// current time.
	Now time.Time
}

// Facts is the check as the preflight rule reads it: each Node's
// readiness and role, etcd's member list as counted (EtcdQuorumMembers),
// the volumes and their replicas, the pinned apps, and the pods by name.
func (c DrainCheck) Facts() safety.DrainFacts {
	now := c.Now
	if now.IsZero() {
		now = time.Now()
	}
	f := safety.DrainFacts{
		Node: c.Node, Etcd: EtcdQuorumMembers(c.Data, now),
		Volumes: c.Data.Volumes, Replicas: c.Data.Replicas,
		LonghornPolicy: c.LonghornPolicy, Purpose: c.Purpose, LocalNode: c.LocalNode,
	}
	for _, n := range c.Data.Nodes {
		f.Nodes = append(f.Nodes, safety.Node{Name: n.Name, Ready: NodeIsReady(n),
			Server: IsServer(n) || IsEtcdMember(n), EtcdMember: IsEtcdMember(n)})
	}
	for _, a := range c.Apps {
		f.Apps = append(f.Apps, safety.App{Name: a.Name, Node: a.Node, Pinned: a.Mode == AppModePinned, Ready: a.Ready})
	}
	for _, pod := range c.Evict {
		f.Evict = append(f.Evict, pod.Namespace+"/"+pod.Name)
	}
	for _, err := range c.Excluded {
		f.Excluded = append(f.Excluded, err.Error())
	}
	return f
}
