package views

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
)

// Every alert says what is wrong (Text), why in a few words (Why) and what
// to do next (Next), from what the console already has: the cluster
// status and this node's agent. Where `sitecon doctor` has a finding for
// the same condition, its id goes with the alert (ID), so docs/DOCTOR.md's
// Findings table explains it at length. The functions here are pure:
// status in, words out.

// Line is the alert as the overview says it: "fact: why → next [ID]".
func (a Alert) Line() string { return a.line(a.Next) }

// CLILine is the alert as `sitecon status` says it: the next step in the
// command line's words, never a console key.
func (a Alert) CLILine() string { return a.line(cmp.Or(a.NextCLI, a.Next)) }

func (a Alert) line(next string) string {
	var b strings.Builder
	b.WriteString(a.Text)
	if a.Why != "" {
		b.WriteString(": " + a.Why)
	}
	if next != "" {
		b.WriteString(" → " + next)
	}
	if a.ID != "" {
		b.WriteString(" [" + a.ID + "]")
	}
	return b.String()
}

// The subjects of alerts: what their details are opened on.
func nodeSubject(name string) string     { return "node/" + name }
func volumeSubject(name string) string   { return "volume/" + name }
func appSubject(a kube.AppStatus) string { return "app/" + appRowID(a) }

// nodeAlert is the alert of a node that is not Ready.
func nodeAlert(n kube.NodeStatus, now time.Time) Alert {
	a := Alert{Bad: true, Since: n.Since, ID: doctor.IDNodeNotReady, Subject: nodeSubject(n.Name),
		Text: fmt.Sprintf("node %s %s for %s", n.Name, n.Status, Age(n.Since, now, true))}
	reason := strings.TrimSuffix(strings.TrimSpace(n.Reason), ".")
	switch n.Status {
	case kube.NodeUnknown:
		// The node controller's own words ("Kubelet stopped posting node
		// status.") say the same: nothing is heard from the node.
		a.Why = "kubelet stopped posting status"
		a.Next = "check power/network, sitecon doctor"
	default:
		a.Why = "kubelet reports not ready"
		if reason != "" {
			a.Why = "kubelet: " + reason
		}
		a.Next = "check k3s there (journalctl -u k3s), sitecon doctor"
	}
	return a
}

// cordonAlert is the alert of a node left cordoned: Ready, marked
// unschedulable, and no action running that will take it further: no
// drain under way (none of its pods leaving: doctor's SC-NODE-CORDONED,
// the same rule) and no maintenance walk recorded on this device still
// running (it uncordons the node at its end). ok is false when the node
// is not so.
func cordonAlert(n kube.NodeStatus, agent *AgentSummary, now time.Time) (Alert, bool) {
	if n.Schedulable || !n.Ready || n.PodsLeaving > 0 || maintenanceUnderWay(agent, n.Name) {
		return Alert{}, false
	}
	a := Alert{Since: now, ID: doctor.IDNodeCordoned, Subject: nodeSubject(n.Name), Text: "node " + n.Name + " cordoned",
		Why:  "Ready, no drain under way",
		Next: "maintenance over? u on nodes (sitecon uncordon " + n.Name + ")", NextCLI: "maintenance over? sitecon uncordon " + n.Name}
	if n.CordonedSince != nil {
		a.Since = *n.CordonedSince
		a.Text += " for " + Age(*n.CordonedSince, now, true)
	}
	return a, true
}

// maintenanceUnderWay says whether this device's audit log has a
// maintenance walk of node with no outcome yet.
func maintenanceUnderWay(agent *AgentSummary, node string) bool {
	if agent == nil {
		return false
	}
	return slices.ContainsFunc(agent.Events, func(e AgentEvent) bool {
		return e.Source == "audit" && e.UnderWay && e.Kind == flow.ActionMaintenance && e.Subject == node
	})
}

// leaderAlert is the alert of a stats leader that is lost: its node is
// not Ready, is no node of the cluster, or its lease ran out (its agent
// stopped renewing it), the doctor's SC-STATS-LEADER-LOST cases alike.
// Cluster-wide stats stop until another agent leads.
func leaderAlert(s kube.ClusterStatus, now time.Time) (Alert, bool) {
	l := s.StatsLeader
	if l.Holder == "" {
		return Alert{}, false
	}
	a := Alert{Since: now, ID: doctor.IDStatsLeaderLost, Subject: nodeSubject(l.Holder),
		Why:  "cluster stats stop until another agent leads",
		Next: "wait for its lease to run out; if no agent takes it, check the agents"}
	switch i := slices.IndexFunc(s.Nodes, func(n kube.NodeStatus) bool { return n.Name == l.Holder }); {
	case i < 0:
		a.Text = "stats leader " + l.Holder + " is no node of the cluster"
	case !s.Nodes[i].Ready:
		a.Text = "stats leader " + l.Holder + " is on a lost node"
	case l.Expired:
		a.Text = "stats leader " + l.Holder + " stopped renewing its lease"
	default:
		return Alert{}, false
	}
	if l.Since != nil {
		a.Since = *l.Since
	}
	if l.Expired {
		a.Why = "its lease ran out and no other agent took it"
		a.Next = "check the agents on the Ready nodes (systemctl status sitecon-agent)"
	}
	return a, true
}

// volumeAlert is the alert of a volume that is not healthy (ok false when
// it is healthy, or its robustness unknown). lost says whether a node is
// lost.
func volumeAlert(v kube.VolumeStatus, now time.Time, lost func(string) bool) (Alert, bool) {
	// Most volumes are healthy or detached: the overview asks of every
	// volume once a second, and the reasons below are worth their strings
	// only for a volume that alerts.
	if v.Robustness != kube.RobustnessFaulted && v.Robustness != kube.RobustnessDegraded {
		return Alert{}, false
	}
	var healthy, rebuilding, failed []string
	for _, r := range v.Replicas {
		switch r.State {
		case kube.ReplicaHealthy:
			healthy = append(healthy, r.Node)
		case kube.ReplicaRebuilding:
			if r.Progress >= 0 {
				rebuilding = append(rebuilding, fmt.Sprintf("%s, %d %%", r.Node, r.Progress))
			} else {
				rebuilding = append(rebuilding, r.Node)
			}
		default:
			failed = append(failed, r.Node)
		}
	}
	// What became of the replicas that are not healthy: their nodes lost,
	// or the replicas failed on nodes that run.
	var lostOn, failedOn []string
	for _, n := range failed {
		if lost(n) {
			lostOn = append(lostOn, n)
		} else {
			failedOn = append(failedOn, n)
		}
	}
	var why []string
	if len(rebuilding) > 0 {
		why = append(why, "rebuilding on "+strings.Join(rebuilding, "; "))
	}
	if len(lostOn) > 0 {
		why = append(why, "replica on lost "+strings.Join(lostOn, ", "))
	}
	if len(failedOn) > 0 {
		why = append(why, "replica on "+strings.Join(failedOn, ", ")+" failed")
	}
	if len(v.Replicas) < v.WantReplicas {
		why = append(why, fmt.Sprintf("%d of %d replicas exist", len(v.Replicas), v.WantReplicas))
	}
	a := Alert{Since: v.Since, Why: strings.Join(why, "; "), Subject: volumeSubject(v.Name)}
	switch v.Robustness {
	case kube.RobustnessFaulted:
		a.Bad, a.ID = true, doctor.IDVolumeFaulted
		a.Text = fmt.Sprintf("volume %s faulted%s", v.Label(), heldFor(v.Since, now, v.SinceExact))
		if a.Why == "" {
			a.Why = "no replica holds usable data"
		}
		a.Next = "its app cannot run: bring its replicas' nodes back; sitecon doctor"
	case kube.RobustnessDegraded:
		a.Bad, a.ID = now.Sub(v.Since) >= time.Hour, doctor.IDVolumeDegraded
		a.Text = fmt.Sprintf("volume %s degraded%s (%d of %d replicas not healthy)", v.Label(), heldFor(v.Since, now, v.SinceExact),
			len(v.Replicas)-len(healthy), len(v.Replicas))
		switch {
		case len(healthy) == 1:
			// Said first: the one copy is what a drain must not take.
			a.Next = "keep " + healthy[0] + " up: only healthy copy"
			if len(rebuilding) > 0 {
				a.Next += " until the rebuild ends"
			}
		case len(rebuilding) > 0:
			a.Next = "wait for the rebuild"
		case len(lostOn) > 0:
			a.Next = "bring " + strings.Join(lostOn, ", ") + " back, or give Longhorn room elsewhere"
		default:
			a.Next = "Longhorn rebuilds where there is room; sitecon doctor"
		}
	default:
		return Alert{}, false
	}
	return a, true
}

// appAlert is the alert of an app that is not running (not one leaving:
// Terminating). Its node's loss, the agent's failover verdict for it and
// the scheduler's reason say why.
func appAlert(app kube.AppStatus, s kube.ClusterStatus, agent *AgentSummary, now time.Time) Alert {
	// The doctor's finding of the same app, unless the cases below make
	// it a pending one.
	a := Alert{Since: now, Text: app.NotRunningLine(), Subject: appSubject(app), ID: doctor.IDAppNotRunning}
	nodeLost := app.NodeLost || (app.Node != "" && s.NodeLost(app.Node))
	if nodeLost {
		// Its service is lost with its node, since the node was: said
		// among the alarms, with the node's.
		a.Bad = true
		if i := slices.IndexFunc(s.Nodes, func(n kube.NodeStatus) bool { return n.Name == app.Node }); i >= 0 {
			a.Since = s.Nodes[i].Since
		}
	}
	switch {
	case nodeLost && app.Mode == kube.AppModePinned:
		a.Why = "pinned app " + app.Name + " waits for its node " + app.Node
		a.Next = "bring " + app.Node + " back, or m (migrate) on apps"
		a.NextCLI = "bring " + app.Node + " back, or sitecon migrate " + app.Name + " NODE"
	case nodeLost:
		verdict := failoverVerdict(agent, app.Name)
		a.Why, a.Next = failoverWords(app.Node, verdict)
		if strings.Contains(a.Next, "events screen") {
			a.NextCLI = strings.Replace(a.Next, "events screen shows", "sitecon agent status shows", 1)
		}
	case app.Unscheduled != nil && app.UnschedulableFor(now) < kube.UnschedulableAfter:
		// Seconds into it (a site booting, a node coming back): no advice
		// to act on a reason the scheduler may drop at its next try.
		a.ID = doctor.IDAppPending
		a.Since = app.Unscheduled.Since
		a.Why = "waiting for a node it may use (the scheduler tries again)"
		a.Next = "wait; if it stays, enter on apps for the reason"
		a.NextCLI = "wait; if it stays, sitecon doctor gives the reason"
	case app.Unscheduled != nil:
		a.ID = doctor.IDAppPending
		a.Since = app.Unscheduled.Since
		a.Why = "scheduler: " + strings.TrimSuffix(app.Unscheduled.Message, ".")
		a.Next = "free or uncordon a node it may use"
	case app.Phase == "Pending" || app.Node == "":
		a.ID = doctor.IDAppPending
		a.Why = "not placed on a node yet"
		a.Next = "wait; if it stays, enter on apps for the reason"
		a.NextCLI = "wait; if it stays, sitecon doctor gives the reason"
	case app.Phase == "Failed":
		a.Why = "it failed on " + app.Node
		a.Next, a.NextCLI = "l on apps for its log", "sitecon logs "+app.Name
	case app.Phase == "Running":
		a.Why = "it runs but is not ready"
		a.Next, a.NextCLI = "l on apps for its log", "sitecon logs "+app.Name
	default:
		a.Why = "starting on " + app.Node
		a.Next = "wait; if it stays " + app.Phase + ", l on apps for its log"
		a.NextCLI = "wait; if it stays " + app.Phase + ", sitecon logs " + app.Name
	}
	return a
}

// failoverVerdict is this node's agent's last failover verdict on app, ""
// when it has none.
func failoverVerdict(agent *AgentSummary, app string) string {
	if agent == nil {
		return ""
	}
	for _, f := range agent.Failovers {
		if f.App == app {
			return f.Verdict
		}
	}
	return ""
}

// failoverWords say where an auto app's failover off its lost node
// stands, from the agent's verdict (agent/apps/failover.go writes it):
// held while the node shows a sign of life or a volume has no copy
// elsewhere, waiting for its timer otherwise.
func failoverWords(node, verdict string) (why, next string) {
	switch {
	case verdict == "":
		return "failover once " + node + " is lost long enough",
			"wait; events screen shows the agent's steps"
	case strings.Contains(verdict, "sign of life"):
		why = "failover held: " + node + " still answers"
		if _, probe, ok := strings.Cut(verdict, "sign of life: "); ok {
			probe, _, _ = strings.Cut(probe, "; it may")
			why += " (" + probe + ")"
		}
		return why, "power " + node + " off or bring it back: while it answers, the app stays"
	case strings.Contains(verdict, "no up-to-date replica"):
		_, rest, _ := strings.Cut(verdict, ": ")
		return "failover held: " + rest, "bring " + node + " back: it holds the only up-to-date copy"
	case strings.HasPrefix(verdict, "force-deleting"):
		return "failing over: " + verdict, "wait for it to start on another node"
	}
	return "failover: " + verdict, "wait; events screen shows the agent's steps"
}

// wrapWords breaks text into lines of at most width cells at spaces,
// within a word only when the word alone is wider than the line: an id
// (SC-VOL-DEGRADED) or a node name is never split at its hyphens.
func wrapWords(text string, width int) []string {
	width = max(width, 10)
	var out []string
	line := ""
	for _, word := range strings.Fields(text) {
		for ansi.StringWidth(word) > width {
			if line != "" {
				out, line = append(out, line), ""
			}
			head := ansi.Truncate(word, width, "")
			out = append(out, head)
			word = word[len(head):]
		}
		switch {
		case line == "":
			line = word
		case ansi.StringWidth(line)+1+ansi.StringWidth(word) <= width:
			line += " " + word
		default:
			out, line = append(out, line), word
		}
	}
	if line != "" || len(out) == 0 {
		out = append(out, line)
	}
	return out
}
