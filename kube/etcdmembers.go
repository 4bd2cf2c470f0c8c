package kube

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/kube/safety"
)

// EtcdMembersConfigMapName is the ConfigMap, in AppNamespace, where the
// agents of the server nodes publish etcd's member list as each of them
// observes it: one key per observing node, each written only by that
// node's agent (server-side apply, its own field manager), so the writers
// never conflict and a dead node's entry simply ages. Every snapshot
// already watches AppNamespace's ConfigMaps: the console and the actions
// read it with no request of their own.
const EtcdMembersConfigMapName = "sitecon-etcd-members"

// EtcdMembersMaxAge is how old the freshest observation may be before the
// list is stale. Agents observe every EtcdObserveInterval and rewrite at
// least every EtcdPublishInterval; three missed rewrites mean no agent
// is publishing.
const EtcdMembersMaxAge = 3 * EtcdPublishInterval

// Publication timing of the etcd member list (agent side).
const (
	// EtcdObserveInterval is how often an agent reads the member list and
	// each member's status.
	EtcdObserveInterval = 10 * time.Second
	// EtcdPublishInterval is how often an agent rewrites an unchanged
	// observation, so that readers can tell it is current.
	EtcdPublishInterval = 30 * time.Second
)

// EtcdView is etcd's member list as one node's agent observed it through
// its local etcd endpoint, with each member's health from a status call to
// the member's own client URL.
type EtcdView struct {
	ObservedBy string    `json:"observedBy"`
	ObservedAt time.Time `json:"observedAt"`
	// Endpoint is the etcd endpoint the list was read from.
	Endpoint string             `json:"endpoint"`
	Members  []EtcdMemberStatus `json:"members"`
}

// EtcdMemberStatus is one member of the list.
type EtcdMemberStatus struct {
	// ID is the member ID in hex, as etcdctl prints it.
	ID string `json:"id"`
	// Name is the member's etcd name; k3s names a member after its node
	// with a random suffix (node-a-1a2b3c4d).
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs,omitempty"`
	ClientURLs []string `json:"clientURLs,omitempty"`
	// Learner: a member still catching up; it does not vote.
	Learner bool `json:"learner,omitempty"`
	// Healthy: its status call answered with no errors.
	Healthy bool `json:"healthy"`
	// Error is why it is not healthy: the status call's error, or the
	// errors the member reported (an alarm).
	Error string `json:"error,omitempty"`
	// Leader: the member is the raft leader.
	Leader bool `json:"leader,omitempty"`
}

// EtcdViews reads the published observations from d, freshest first;
// problems names the entries that could not be read.
func EtcdViews(d Data) (views []EtcdView, found bool, problems []string) {
	for _, cm := range d.ConfigMaps {
		if cm.Name != EtcdMembersConfigMapName || cm.Namespace != AppNamespace && cm.Namespace != "" {
			continue
		}
		found = true
		for key, raw := range cm.Data {
			var v EtcdView
			if err := json.Unmarshal([]byte(raw), &v); err != nil || v.ObservedAt.IsZero() {
				problems = append(problems, fmt.Sprintf("%s: unreadable (%v)", key, err))
				continue
			}
			v.ObservedBy = cmp.Or(v.ObservedBy, key)
			views = append(views, v)
		}
	}
	slices.SortFunc(views, func(a, b EtcdView) int { return b.ObservedAt.Compare(a.ObservedAt) })
	slices.Sort(problems)
	return views, found, problems
}

// EtcdQuorum is the member list the quorum arithmetic counts, and where it
// came from.
type EtcdQuorum struct {
	Members []safety.Member
	// Source says where the list came from, or why etcd's own list was
	// not used; the preflight puts it in its verdict.
	Source string
	// FromEtcd: the list is etcd's own, not the Nodes' labels.
	FromEtcd bool
	// Learners are members that do not vote yet, said in words.
	Learners []string
}

// EtcdQuorumMembers decides the member list for the quorum arithmetic:
// etcd's own, as the freshest published observation has it, when that is
// younger than EtcdMembersMaxAge; else the Nodes carrying the etcd role
// label (EtcdMembersFromNodes), and Source says why. Either way a member
// on a node that is NotReady or cordoned is not counted on: the published
// health can be up to a minute old, the Node's is the API server's now.
func EtcdQuorumMembers(d Data, now time.Time) EtcdQuorum {
	fallback := func(why string) EtcdQuorum {
		return EtcdQuorum{Members: EtcdMembersFromNodes(d.Nodes),
			Source: why + "; etcd members counted from the Nodes' etcd role label instead"}
	}
	views, found, problems := EtcdViews(d)
	switch {
	case !found:
		return fallback(fmt.Sprintf("etcd's member list is not published (no ConfigMap %s/%s)", AppNamespace, EtcdMembersConfigMapName))
	case len(views) == 0:
		return fallback(fmt.Sprintf("etcd's member list in %s/%s cannot be read (%s)", AppNamespace, EtcdMembersConfigMapName, strings.Join(problems, "; ")))
	}
	v := views[0]
	age := now.Sub(v.ObservedAt).Truncate(time.Second)
	if age > EtcdMembersMaxAge {
		return fallback(fmt.Sprintf("etcd's member list is stale (last observed by %s %s ago)", v.ObservedBy, age))
	}
	byName := map[string]*corev1.Node{}
	for _, n := range d.Nodes {
		byName[n.Name] = n
	}
	q := EtcdQuorum{FromEtcd: true,
		Source: fmt.Sprintf("etcd members as etcd lists them (observed by %s %s ago)", v.ObservedBy, max(age, 0))}
	for _, m := range v.Members {
		node := EtcdMemberNode(m, d.Nodes)
		name := cmp.Or(node, m.Name)
		if m.Learner {
			q.Learners = append(q.Learners, name+" is a learner (joining; it does not vote yet)")
			continue
		}
		var down []string
		if !m.Healthy {
			down = append(down, "etcd: "+cmp.Or(m.Error, "unhealthy"))
		}
		if n := byName[node]; n != nil {
			switch {
			case !NodeIsReady(n):
				down = append(down, "NotReady")
			case n.Spec.Unschedulable:
				down = append(down, "cordoned")
			}
		}
		q.Members = append(q.Members, safety.Member{Name: name, Down: strings.Join(down, ", ")})
	}
	return q
}

// EtcdMemberNode is the Node an etcd member runs on: the Node named as the
// member, or as its name less k3s's "-xxxxxxxx" suffix, or the Node whose
// InternalIP is its peer address; "" when none is.
func EtcdMemberNode(m EtcdMemberStatus, nodes []*corev1.Node) string {
	names := map[string]bool{}
	for _, n := range nodes {
		names[n.Name] = true
	}
	if names[m.Name] {
		return m.Name
	}
	if i := strings.LastIndexByte(m.Name, '-'); i > 0 && len(m.Name)-i-1 == 8 && names[m.Name[:i]] {
		return m.Name[:i]
	}
	for _, peer := range m.PeerURLs {
		u, err := url.Parse(peer)
		if err != nil {
			continue
		}
		host := u.Hostname()
		if ip := net.ParseIP(host); ip == nil || ip.IsLoopback() {
			continue
		}
		for _, n := range nodes {
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP && a.Address == host {
					return n.Name
				}
			}
		}
	}
	return ""
}
