package nodestate

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

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/safety"
)

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

// EtcdMembersMaxSkew is how far ahead of the reader's clock an entry's
// observation time may be and still count. Each agent dates its entry by
// its own clock: a clock a little ahead (NTP not yet synced after boot) is
// ordinary, but an entry dated further ahead would be taken for the
// freshest until that time comes, whatever the others observed since.
// Such an entry is ignored, and the verdict says so.
const EtcdMembersMaxSkew = 30 * time.Second

// EtcdViews reads the published observations from d that a current server
// wrote, freshest first: an entry counts only when its key names a Node of
// the cluster that runs an etcd member (the only nodes whose agents can
// observe etcd), it claims no other observer, and it is dated no more than
// EtcdMembersMaxSkew ahead of now. ignored says, per entry left out, why
// (unreadable, not a server's, from the future), so that a verdict can say
// what it did not count.
func EtcdViews(d kube.Data, now time.Time) (views []EtcdView, found bool, ignored []string) {
	views, found, ignored, _ = etcdViews(d, now)
	return views, found, ignored
}

// etcdViews is EtcdViews, and whether an entry was left out for being
// dated ahead of now (a clock off somewhere).
func etcdViews(d kube.Data, now time.Time) (views []EtcdView, found bool, ignored []string, ahead bool) {
	byName := map[string]*corev1.Node{}
	for _, n := range d.Nodes {
		byName[n.Name] = n
	}
	for _, cm := range d.ConfigMaps {
		if cm.Name != kube.EtcdMembersConfigMapName || cm.Namespace != kube.AppNamespace && cm.Namespace != "" {
			continue
		}
		found = true
		for key, raw := range cm.Data {
			v, why := judgeEtcdEntry(key, raw, byName, now)
			if why != "" {
				ignored = append(ignored, fmt.Sprintf("entry %s ignored: %s", key, why))
				ahead = ahead || v.ObservedAt.Sub(now) > EtcdMembersMaxSkew
				continue
			}
			views = append(views, v)
		}
	}
	slices.SortFunc(views, func(a, b EtcdView) int { return b.ObservedAt.Compare(a.ObservedAt) })
	slices.Sort(ignored)
	return views, found, ignored, ahead
}

// judgeEtcdEntry reads one entry of the member list, published under key,
// and says why it does not count ("" when it does). The key is the
// observer: each agent writes only its own (PublishEtcdView), so an entry
// that names another observer inside is not what its key's agent wrote.
func judgeEtcdEntry(key, raw string, nodes map[string]*corev1.Node, now time.Time) (EtcdView, string) {
	var v EtcdView
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return v, fmt.Sprintf("unreadable (%v)", err)
	}
	n := nodes[key]
	switch {
	case v.ObservedAt.IsZero():
		return v, "unreadable (no observation time)"
	case v.ObservedBy != "" && v.ObservedBy != key:
		return v, fmt.Sprintf("it says it was observed by %q", v.ObservedBy)
	case n == nil:
		return v, key + " is not a node of the cluster"
	case !kube.IsEtcdMember(n):
		return v, fmt.Sprintf("%s is not a server (no %s label)", key, kube.LabelEtcd)
	}
	if ahead := v.ObservedAt.Sub(now); ahead > EtcdMembersMaxSkew {
		return v, fmt.Sprintf("dated %s ahead of this clock, more than the %s clock skew allowed", ahead.Truncate(time.Second), EtcdMembersMaxSkew)
	}
	v.ObservedBy = key
	return v, ""
}

// EtcdQuorumMembers decides the member list for the quorum arithmetic:
// etcd's own, as the freshest observation a current server published has
// it (EtcdViews), when that is younger than EtcdMembersMaxAge and lists a
// voting member. Otherwise quorum is unknown (Unknown says what was read,
// when, and what to do) and no member is counted: the Nodes' etcd role
// label is no stand-in, since it misses a member without a Node (right
// after a node remove) and would call a quorum safe that is not. It is
// kept in Labelled for a display to show, never counted.
// A member on a node that is NotReady or cordoned is not counted on: the
// published health can be up to a minute old, the Node's is the API
// server's now. Nor is a member that no Node stands for: its device is
// gone from the cluster (or never came), whatever etcd's last status call
// said.
func EtcdQuorumMembers(d kube.Data, now time.Time) safety.EtcdQuorum {
	views, found, ignored, ahead := etcdViews(d, now)
	unknown := func(why, todo string) safety.EtcdQuorum {
		q := safety.EtcdQuorum{Ignored: ignored, Labelled: EtcdMembersFromNodes(d.Nodes)}
		q.Unknown = why + "; " + todo
		q.Source = q.Unknown
		if say := q.LabelledSay(); say != "" {
			q.Source += "; " + say
		}
		return q
	}
	list := fmt.Sprintf("%s/%s", kube.AppNamespace, kube.EtcdMembersConfigMapName)
	switch {
	case !found:
		return unknown(fmt.Sprintf("etcd's member list is not published (no ConfigMap %s)", list),
			fmt.Sprintf("the servers' agents publish it every %s: check that they run (sitecon status), then try again", EtcdPublishInterval))
	case len(views) == 0 && ahead:
		// Each entry and why it was ignored are said here too: a refusal
		// is what the audit log keeps.
		return unknown(fmt.Sprintf("etcd's member list in %s has no entry a current server wrote (%s)", list, strings.Join(ignored, "; ")),
			"an entry dated ahead of this clock means a node's clock is off: check the nodes' clocks (sitecon doctor), then try again")
	case len(views) == 0:
		return unknown(fmt.Sprintf("etcd's member list in %s has no entry a current server wrote (%s)", list, strings.Join(ignored, "; ")),
			"wait for a server's agent to publish it (sitecon status says whether they run), then try again")
	}
	v := views[0]
	age := now.Sub(v.ObservedAt).Truncate(time.Second)
	if age > EtcdMembersMaxAge {
		return unknown(fmt.Sprintf("etcd's member list is stale: its freshest entry was observed by %s at %s, %s ago by this clock (more than the %s allowed)",
			v.ObservedBy, v.ObservedAt.UTC().Format(time.RFC3339), age, EtcdMembersMaxAge),
			"no server's agent has published since, or a clock is off: check the servers' agents (sitecon status) and the nodes' clocks, then try again")
	}
	if !slices.ContainsFunc(v.Members, func(m EtcdMemberStatus) bool { return !m.Learner }) {
		// etcd's own list always holds the member that answered it.
		return unknown(fmt.Sprintf("etcd's member list as %s observed it at %s lists no voting member, which etcd's own never does", v.ObservedBy, v.ObservedAt.UTC().Format(time.RFC3339)),
			"wait for a fresh list, then try again")
	}
	byName := map[string]*corev1.Node{}
	for _, n := range d.Nodes {
		byName[n.Name] = n
	}
	q := safety.EtcdQuorum{FromEtcd: true, Ignored: ignored,
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
		switch n := byName[node]; {
		case n == nil:
			down = append(down, "no Node in the cluster stands for this member")
		case !kube.NodeIsReady(n):
			down = append(down, "NotReady")
		case n.Spec.Unschedulable:
			down = append(down, "cordoned")
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

// EtcdMembersFromNodes is the etcd member list as the Nodes tell it: every
// Node with the etcd role label; healthy when Ready and not cordoned. For
// a display only (EtcdQuorum.Labelled): quorum is never counted from it.
func EtcdMembersFromNodes(nodes []*corev1.Node) []safety.Member {
	var out []safety.Member
	for _, n := range nodes {
		if !kube.IsEtcdMember(n) {
			continue
		}
		m := safety.Member{Name: n.Name}
		switch {
		case !kube.NodeIsReady(n):
			m.Down = "NotReady"
		case n.Spec.Unschedulable:
			m.Down = "cordoned"
		}
		out = append(out, m)
	}
	return out
}
