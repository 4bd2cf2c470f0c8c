package views

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

// Alert is one thing on the site that needs attention: what (Text), why
// (Why) and what to do next (Next), with the id of `sitecon doctor`'s
// finding for it (ID) when it has one (views/alerts.go).
type Alert struct {
	Bad  bool // false: a warning
	Text string
	Why  string
	Next string
	// NextCLI is the next step in the command line's words, where Next
	// names a console key ("l on apps"): `sitecon status` has no screens.
	// Empty: Next says it for both.
	NextCLI string
	ID      string
	Since   time.Time
	// Subject is what the alert is about ("node/node-b", "volume/vol-x",
	// "app/eve-kube-app/hmi-x"): its detail lists it. "" for the site.
	Subject string
}

// Alerts lists what needs attention, worst and longest first: faulted and
// long-degraded volumes, nodes not ready, nodes left cordoned, a stats
// leader lost, version skew, failed pods, apps not running, apps away from
// home.
func Alerts(f *Frame, now time.Time) []Alert {
	var out []Alert
	s := f.Status
	for _, v := range s.Volumes {
		if a, ok := volumeAlert(v, now, s.NodeLost); ok {
			out = append(out, a)
		}
	}
	for _, n := range s.Nodes {
		if !n.Ready {
			out = append(out, nodeAlert(n, now))
		}
		if a, ok := cordonAlert(n, f.Agent, now); ok {
			out = append(out, a)
		}
		if n.VersionSkew != "" {
			out = append(out, Alert{Since: n.Since, Text: fmt.Sprintf("node %s: %s", n.Name, n.VersionSkew),
				Next: "run the servers' k3s version on it", Subject: nodeSubject(n.Name)})
		}
	}
	if a, ok := leaderAlert(s, now); ok {
		out = append(out, a)
	}
	for _, ns := range s.Namespaces {
		if ns.Failed > 0 {
			out = append(out, Alert{Since: now, Text: fmt.Sprintf("%s: %d pod(s) failed", ns.Name, ns.Failed),
				Next:    "3 on the pods screen, enter on " + ns.Name + ", l for a pod's log",
				NextCLI: "kubectl -n " + ns.Name + " get pods, then sitecon logs POD -n " + ns.Name})
		}
	}
	for _, a := range s.Apps {
		if !a.Ready && a.Phase != "Terminating" {
			out = append(out, appAlert(a, s, f.Agent, now))
		}
	}
	if away := kube.AwayApps(s.Apps); len(away) > 0 {
		out = append(out, awayAlert(away, now))
	}
	slices.SortStableFunc(out, func(a, b Alert) int {
		if a.Bad != b.Bad {
			if a.Bad {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Since.UnixNano(), b.Since.UnixNano()) // longest first
	})
	return out
}

// overview is the first screen: the site at a glance and its alerts.
type overview struct {
	ctx   *ui.Context
	frame *Frame
	now   time.Time

	// bundle is the App's: b takes a support bundle when it can.
	bundle *bundleTaker
	// doctor is the App's: a quiet overview points at what its last run
	// found (nil: none here).
	doctor *doctorRunner
}

func newOverview(ctx *ui.Context) screen { return &overview{ctx: ctx} }

func (o *overview) setFrame(f *Frame, now time.Time) { o.frame, o.now = f, now }

// doctorLine is what the doctor's last run found worse than info, "" when
// nothing (or no run yet).
func (o *overview) doctorLine() string {
	if o.doctor == nil || o.doctor.report == nil {
		return ""
	}
	errs, warns := 0, 0
	for _, f := range o.doctor.report.Findings {
		switch f.Severity {
		case doctor.Error:
			errs++
		case doctor.Warn:
			warns++
		}
	}
	if errs+warns == 0 {
		return ""
	}
	return fmt.Sprintf("the doctor's last run (%s ago) found %d error(s), %d warning(s): 7 shows them", Age(o.doctor.ranAt, o.now, true), errs, warns)
}
func (o *overview) table() *ui.Table { return nil }
func (o *overview) title() string    { return "" }
func (o *overview) help() screenHelp {
	return screenHelp{about: "The site at a glance: the cluster, seed, VIP, nodes, this node's agent, the stats leader, and what needs attention.",
		keys: []binding{o.bundle.binding(o.ctx.Keys.Bundle)}}
}

// ReadingTheCluster is what the overview says under its alerts while the
// nodes, the VIP and the leases are read and the rest of the cluster is
// not yet (Frame.Basics).
const ReadingTheCluster = "reading the cluster's pods, volumes and apps…"

// ThisNodeStatus is READY, NOTREADY or DOWN (API server unreachable) for the
// node this console runs on, or "" when that node is not known.
func ThisNodeStatus(f *Frame) string {
	if f.Agent == nil || f.Agent.Node == "" {
		return ""
	}
	s := f.shownStatus()
	if (!f.Synced && f.Basics == nil) || !s.API.Connected {
		return "DOWN"
	}
	for _, n := range s.Nodes {
		if n.Name == f.Agent.Node {
			if n.Ready {
				return "READY"
			}
			return "NOTREADY"
		}
	}
	return "NOTREADY"
}

// roleText is this node's role as the agent decided it, or why it has
// none: an agent that does not bring k3s up (its cluster was made
// outside it, as sitebox's is) decides no role; one still starting has
// not decided yet.
func roleText(a *AgentSummary) string {
	switch {
	case a.Role != "":
		return a.Role
	case a.Phase == "no-bootstrap":
		return "no role: this agent does not run k3s here ·"
	}
	return "role not decided yet ·"
}

func (o *overview) view(w, h int) string {
	st := o.ctx.Styles
	if o.frame == nil {
		return st.Muted.Render("waiting for data…")
	}
	f, now := o.frame, o.now
	s := f.shownStatus()
	var b strings.Builder
	row := func(label, value string) { fmt.Fprintf(&b, "%s %s\n", st.Section.Render(ui.Fit(label, 13)), value) }
	name := orNA(s.Cluster.Name)
	if s.Cluster.UUID != "" {
		name += st.Muted.Render(" " + s.Cluster.UUID)
	}
	row("Cluster", name)
	row("Seed server", SeedText(s.Cluster))
	vip := orNA(s.VIP.Address)
	if s.VIP.Owner != "" {
		vip += " on " + st.Section.Render(s.VIP.Owner)
		if s.VIP.Since != nil {
			vip += " for " + Age(*s.VIP.Since, now, true)
		}
	} else if f.Synced {
		vip += st.Bad.Render(" no owner")
	}
	if s.VIP.Owner != "" {
		vip += st.Muted.Render(asOf(f, now))
	}
	row("VIP", vip)
	nodes := fmt.Sprintf("%d/%d ready", s.NodesReady, s.NodesTotal)
	if s.NodesReady < s.NodesTotal {
		nodes = st.Bad.Render(nodes)
	} else if f.Synced {
		nodes = okStyle(o.ctx, f).Render(nodes)
	}
	row("Nodes", nodes+st.Muted.Render(asOf(f, now)))
	if a := f.Agent; a != nil {
		if a.Running {
			status := ThisNodeStatus(f)
			style := st.OK
			if status != "READY" {
				style = st.Bad
			}
			line := fmt.Sprintf("%s %s · %s %s for %s", a.Node, style.Render(status), roleText(a), a.Phase, Age(a.Since, now, true))
			if a.LastError != "" {
				line += st.Warn.Render(" · " + a.LastError)
			}
			row("This node", line)
		} else {
			row("This node", st.Muted.Render("agent not running ("+a.Problem+")"))
		}
	}
	leader := st.Muted.Render("n/a")
	if l := s.StatsLeader; l.Holder != "" {
		leader = l.Holder
		if l.Since != nil {
			leader += " for " + Age(*l.Since, now, true)
		}
		if l.Expired {
			leader += st.Warn.Render(" (lease expired: no agent renews it)")
		}
		leader += st.Muted.Render(asOf(f, now))
	}
	row("Stats leader", leader)
	b.WriteString("\n")
	used := 8 // the rows above, the blank line, the Alerts title
	if down := stale(f); down != nil {
		// Said whole, wrapped: a reason cut at the screen's edge is no reason.
		for i, l := range apiDownLines(down, f.Reports, now, w-4) {
			mark := "    "
			if i == 0 {
				mark = st.Bad.Render("  ✖ ")
			}
			b.WriteString(mark + l + "\n")
			used++
		}
		// What each node says of itself, asked directly; the cached
		// alerts below keep a line (their title is counted).
		lines := nodeReportsLines(f.Reports, now, w-4, max(h-used-1, 2))
		for _, l := range lines {
			b.WriteString("    " + l + "\n")
		}
		used += len(lines)
	}
	b.WriteString(st.Section.Render("Alerts") + st.Muted.Render(asOf(f, now)) + "\n")
	alerts := Alerts(f, now)
	switch {
	case !f.Synced && f.Basics != nil:
		b.WriteString(st.Muted.Render("  "+ReadingTheCluster) + "\n")
		used++
		if why := f.Basics.API.LastError; why != "" {
			for _, l := range wrap("the last try failed: "+why, w-4) {
				b.WriteString(st.Warn.Render("    "+l) + "\n")
				used++
			}
		}
	case !f.Synced:
		for _, l := range wrap("no cluster data yet: "+orNA(f.Problem), w-2) {
			b.WriteString(st.Muted.Render("  "+l) + "\n")
			used++
		}
	case len(alerts) == 0 && stale(f) != nil:
		b.WriteString(st.Muted.Render("  none then; what changed since is unknown") + "\n")
	case len(alerts) == 0:
		b.WriteString(st.OK.Render("  none: every node ready, every volume healthy, every app running") + "\n")
		used++
		// The doctor checks more than the alerts: what its last run found
		// is pointed at, never left for the technician to stumble on.
		if line := o.doctorLine(); line != "" {
			for _, l := range wrap(line, w-4) {
				b.WriteString(st.Warn.Render("  "+l) + "\n")
				used++
			}
		}
	}
	room := max(h-used, 1)
	// Each alert is said whole, wrapped under its mark: an alert that does
	// not fit in what is left is counted in "… N more", never cut.
	for i, a := range alerts {
		lines := wrapWords(a.Line(), w-4)
		last := i == len(alerts)-1
		if len(lines) > room || (!last && len(lines) == room) {
			fmt.Fprintf(&b, "  … %d more (sitecon status lists them all)\n", len(alerts)-i)
			break
		}
		room -= len(lines)
		mark := st.Warn.Render("  ! ")
		if a.Bad {
			mark = st.Bad.Render("  ✖ ")
		}
		for j, l := range lines {
			if j > 0 {
				mark = "    "
			}
			if id := "[" + a.ID + "]"; j == len(lines)-1 && a.ID != "" && strings.HasSuffix(l, id) {
				l = strings.TrimSuffix(l, id) + st.Muted.Render(id)
			}
			b.WriteString(mark + l + "\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}
