package doctor

import (
	"cmp"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/kube/safety"
)

// checkEtcdQuorum counts etcd's members as the drain's quorum arithmetic
// does (kube.EtcdQuorumMembers: etcd's own list as the agents publish it)
// and says how many more server losses quorum survives, and which member
// leads. A list that cannot be counted on leaves quorum not checked
// (etcdUnknown), never called healthy: the Nodes' etcd role label is no
// stand-in for it.
func checkEtcdQuorum(_ context.Context, env *Env) []Finding {
	q := nodestate.EtcdQuorumMembers(env.Data, env.Now)
	if !q.FromEtcd {
		if _, found, _ := nodestate.EtcdViews(env.Data, env.Now); found || len(q.Labelled) > 0 {
			return []Finding{etcdUnknown(q)}
		}
		return []Finding{{Severity: Warn, Summary: "no etcd member found", Evidence: []string{q.Source},
			Next: "no Node carries the " + kube.LabelEtcd + " label and no agent publishes etcd's member list: is this a k3s cluster with embedded etcd?"}}
	}
	m := len(q.Members)
	// A cordoned member still votes: the drain's rule counts it down
	// (it is on its way out), but what quorum survives now counts it in,
	// and says it is cordoned.
	healthy := 0
	var down, cordoned []string
	for _, mem := range q.Members {
		switch mem.Down {
		case "":
			healthy++
		case "cordoned":
			healthy++
			cordoned = append(cordoned, mem.Name)
		default:
			down = append(down, mem.Name+": "+mem.Down)
		}
	}
	needed := safety.Needed(m)
	spare := healthy - needed
	leader := ""
	if views, _, _ := nodestate.EtcdViews(env.Data, env.Now); len(views) > 0 {
		for _, mem := range views[0].Members {
			if mem.Leader {
				leader = cmp.Or(nodestate.EtcdMemberNode(mem, env.Data.Nodes), mem.Name)
			}
		}
	}
	ev := []string{fmt.Sprintf("%d member%s, %d healthy, %d needed for quorum", m, plural(m), healthy, needed),
		"leader: " + cmp.Or(leader, "none reported")}
	if len(down) > 0 {
		ev = append(ev, "down: "+strings.Join(down, "; "))
	}
	if len(cordoned) > 0 {
		ev = append(ev, "cordoned (still voting; a drain counts them out): "+strings.Join(cordoned, ", "))
	}
	ev = append(ev, q.Source)
	ev = append(ev, q.Learners...)
	ev = append(ev, q.Ignored...)
	f := Finding{Evidence: ev}
	switch {
	case spare < 0:
		f.Severity, f.Summary = Error, fmt.Sprintf("etcd has no quorum: %d of the %d needed members are healthy", healthy, needed)
		f.Next = "bring servers back until more than half the members are up; the cluster API cannot change anything until then"
	case leader == "":
		f.Severity, f.Summary = Error, "etcd reports no leader"
		f.Next = "the members cannot elect one: check the servers' network between them (ports 2379-2380)"
	case len(down) > 0:
		f.Severity = Warn
		f.Summary = fmt.Sprintf("%d etcd member%s down; quorum survives %s", len(down), plural(len(down)), losses(spare))
	case m == 1:
		f.Severity, f.Summary = Info, "one etcd member: the loss of its server stops the cluster API"
		f.Next = "three servers survive the loss of one"
	case spare == 0:
		f.Severity, f.Summary = Warn, fmt.Sprintf("%d etcd members: quorum survives no server loss", m)
		f.Next = "an odd number of servers (3) survives the loss of one"
	default:
		f.Severity, f.Summary = OK, fmt.Sprintf("%d etcd members healthy; quorum survives %s", m, losses(spare))
	}
	return []Finding{f}
}

// etcdUnknown is the finding while etcd's member list cannot be counted
// on (not published, stale, dated ahead of this clock, no voting member):
// quorum is not checked, whatever the Nodes' labels show, and a server's
// drain, remove, replace, leave or maintenance walk is refused meanwhile.
// The labels are evidence only: they miss a member without a Node, so
// they can show a quorum lost, never a quorum safe. It is an error when
// even they count fewer members up than quorum needs.
func etcdUnknown(q safety.EtcdQuorum) Finding {
	// Unknown is "what was read; what to do" (kube.EtcdQuorumMembers).
	why, todo := q.Unknown, ""
	if i := strings.LastIndex(why, "; "); i >= 0 {
		why, todo = why[:i], why[i+2:]
	}
	why = cmp.Or(why, "etcd's member list was not read")
	todo = cmp.Or(todo, "wait for the servers' agents to publish etcd's member list (sitecon status says whether they run), then try again")
	f := Finding{NotChecked: true, Severity: Warn, Summary: "quorum not checked: " + why, Next: todo,
		Evidence: []string{"quorum is unknown: a server's drain, remove, replace, leave or maintenance walk is refused until etcd's member list can be counted on"}}
	for _, s := range q.Ignored {
		if !strings.Contains(why, s) {
			f.Evidence = append(f.Evidence, s)
		}
	}
	if say := q.LabelledSay(); say != "" {
		f.Evidence = append(f.Evidence, say)
	}
	var down []string
	for _, m := range q.Labelled {
		// A cordoned member still votes, as in the count above.
		if m.Down != "" && m.Down != "cordoned" {
			down = append(down, m.Name+": "+m.Down)
		}
	}
	if len(down) > 0 {
		f.Evidence = append(f.Evidence, "down by the Nodes: "+strings.Join(down, "; "))
	}
	if n, up := len(q.Labelled), len(q.Labelled)-len(down); n > 0 && up < safety.Needed(n) {
		f.Severity = Error
		f.Summary = fmt.Sprintf("etcd's quorum looks lost: even the Nodes' etcd labels count %d of %d servers up, %d needed (not checked on etcd's own member list)",
			up, n, safety.Needed(n))
		f.Evidence = append([]string{"not checked: " + why}, f.Evidence...)
		f.Next = "bring servers back until more than half the members are up; then: " + todo
	}
	return f
}

// losses says how many more server losses quorum survives.
func losses(spare int) string {
	switch {
	case spare <= 0:
		return "no further server loss"
	case spare == 1:
		return "1 more server loss"
	}
	return fmt.Sprintf("%d more server losses", spare)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// checkNodesNotReady lists the nodes whose Ready condition is not True,
// since when it changed.
func checkNodesNotReady(_ context.Context, env *Env) []Finding {
	var out []Finding
	for _, n := range env.Data.Nodes {
		c := kube.NodeReadyCondition(n)
		if c != nil && c.Status == corev1.ConditionTrue {
			continue
		}
		f := Finding{Severity: Error, Subject: n.Name}
		if c == nil {
			f.Summary = n.Name + " has never reported Ready"
		} else {
			state := kube.NodeNotReady
			if c.Status == corev1.ConditionUnknown {
				state = kube.NodeUnknown
			}
			f.Summary = fmt.Sprintf("%s is %s for %s", n.Name, state, ago(env.Now, c.LastTransitionTime.Time))
			f.Since = since(c.LastTransitionTime.Time)
			f.Evidence = []string{fmt.Sprintf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)}
		}
		if kube.IsEtcdMember(n) {
			f.Evidence = append(f.Evidence, "it is an etcd member: see "+IDEtcdQuorum)
		}
		out = append(out, f)
	}
	return out
}

// checkNodesCordoned lists the nodes marked unschedulable with no drain
// under way (no pod on them terminating): a node left cordoned after
// maintenance takes no new work and is counted down by the quorum rule.
func checkNodesCordoned(_ context.Context, env *Env) []Finding {
	counts := kube.NodePodCounts(env.Data)
	var out []Finding
	for _, n := range env.Data.Nodes {
		if !n.Spec.Unschedulable || counts[n.Name].Leaving > 0 {
			continue
		}
		f := Finding{Severity: Warn, Subject: n.Name, Summary: n.Name + " is cordoned and no drain is under way",
			Evidence: []string{"spec.unschedulable is true; no pod on it is terminating"}}
		for _, t := range n.Spec.Taints {
			if t.Key == corev1.TaintNodeUnschedulable && t.TimeAdded != nil {
				f.Since = since(t.TimeAdded.Time)
				f.Summary = fmt.Sprintf("%s is cordoned for %s and no drain is under way", n.Name, ago(env.Now, t.TimeAdded.Time))
			}
		}
		if kube.IsEtcdMember(n) {
			f.Evidence = append(f.Evidence, "a cordoned etcd member counts as down for the next drain's quorum")
		}
		f.Next = "if its maintenance is over: sitecon uncordon " + n.Name
		out = append(out, f)
	}
	return out
}

// checkDiskPressure lists the nodes whose DiskPressure condition is True.
func checkDiskPressure(_ context.Context, env *Env) []Finding {
	var out []Finding
	for _, n := range env.Data.Nodes {
		for _, c := range n.Status.Conditions {
			if c.Type != corev1.NodeDiskPressure || c.Status != corev1.ConditionTrue {
				continue
			}
			out = append(out, Finding{Severity: Warn, Subject: n.Name, Since: since(c.LastTransitionTime.Time),
				Summary:  fmt.Sprintf("%s has disk pressure for %s", n.Name, ago(env.Now, c.LastTransitionTime.Time)),
				Evidence: []string{fmt.Sprintf("DiskPressure=True %s: %s", c.Reason, c.Message)}})
		}
	}
	return out
}

// checkStatsLeader says when the stats leader's lease is held by a node
// that is not Ready (or no longer exists), or has run out.
func checkStatsLeader(_ context.Context, env *Env) []Finding {
	st := kube.Derive(kube.Data{Leases: env.Data.Leases}, env.Now).StatsLeader
	if st.Holder == "" {
		return []Finding{{Severity: Info, Summary: "no stats leader: no agent holds " + kube.AppNamespace + "/" + kube.StatsLeaderLeaseName,
			Next: "normal while no agent runs the apps part; otherwise check the agents (systemctl status sitecon-agent)"}}
	}
	var holder *corev1.Node
	for _, n := range env.Data.Nodes {
		if n.Name == st.Holder {
			holder = n
		}
	}
	var why string
	switch {
	case holder == nil:
		why = "no node named " + st.Holder + " is in the cluster"
	case !kube.NodeIsReady(holder):
		why = st.Holder + " is not Ready"
	case st.Expired:
		why = "its lease has run out (the holder stopped renewing it)"
	default:
		return []Finding{{Severity: OK, Subject: st.Holder, Summary: "stats leader is " + st.Holder}}
	}
	f := Finding{Severity: Warn, Subject: st.Holder, Summary: "the stats leader " + st.Holder + " is lost: " + why,
		Evidence: []string{"lease " + kube.AppNamespace + "/" + kube.StatsLeaderLeaseName + " held by " + st.Holder}}
	if st.Since != nil {
		f.Evidence = append(f.Evidence, "held since "+st.Since.UTC().Format("2006-01-02 15:04:05Z"))
	}
	if st.Expired {
		f.Evidence = append(f.Evidence, "expired: yes")
	} else {
		f.Evidence = append(f.Evidence, "expired: not yet (another agent takes it once it does)")
	}
	return []Finding{f}
}
