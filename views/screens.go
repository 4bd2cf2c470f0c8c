package views

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

// cell helpers keep severity colouring in one place.
func plain(s string) ui.Cell { return ui.Cell{Text: s} }

func styled(s string, st lipgloss.Style) ui.Cell { return ui.Cell{Text: s, Style: &st} }

// durationKey sorts ages by value: zero-padded seconds.
func durationKey(t, now time.Time) string { return fmt.Sprintf("%015d", int64(now.Sub(t).Seconds())) }

func numberKey(n int64) string { return fmt.Sprintf("%020d", n) }

// tableScreen is a screen that is one table built from the frame.
type tableScreen struct {
	ctx   *ui.Context
	t     *ui.Table
	build func(f *Frame, now time.Time) []ui.Row
	name  string
}

func (s *tableScreen) setFrame(f *Frame, now time.Time) { s.t.SetRows(s.build(f, now)) }
func (s *tableScreen) view(w, h int) string             { return s.t.View(w, h) }
func (s *tableScreen) key(msg tea.KeyMsg, h int) bool   { return s.t.Update(msg, h) }
func (s *tableScreen) table() *ui.Table                 { return s.t }
func (s *tableScreen) title() string                    { return s.name }

// nodeStatusCell colours a node's readiness.
func nodeStatusCell(ctx *ui.Context, n kube.NodeStatus) ui.Cell {
	switch n.Status {
	case kube.NodeReady:
		return styled(n.Status, ctx.Styles.OK)
	default:
		return styled(n.Status, ctx.Styles.Bad)
	}
}

func newNodes(ctx *ui.Context) screen {
	cols := []ui.Column{{Title: "NAME", Width: 10}, {Title: "ROLES", Width: 16}, {Title: "STATUS", Width: 8}, {Title: "SINCE", Width: 6},
		{Title: "SCHED", Width: 8}, {Title: "VERSION", Width: 13, HideBelow: 90}, {Title: "IP", Width: 13}, {Title: "PODS", Width: 5},
		{Title: "CPU REQ/ALLOC", Width: 13, HideBelow: 120}, {Title: "MEM REQ/ALLOC", Width: 14, HideBelow: 120}}
	return &tableScreen{ctx: ctx, t: ui.NewTable(ctx, cols), build: func(f *Frame, now time.Time) []ui.Row {
		var rows []ui.Row
		for _, n := range f.Status.Nodes {
			roles := shortRoles(n.Roles)
			if n.Seed {
				roles += ",seed"
			}
			sched := styled("yes", ctx.Styles.Muted)
			if !n.Schedulable {
				sched = styled("cordoned", ctx.Styles.Warn)
			}
			version := plain(n.KubeletVersion)
			if n.VersionSkew != "" {
				version = styled(n.KubeletVersion+"!", ctx.Styles.Bad)
			}
			rows = append(rows, ui.Row{ID: n.Name, Cells: []ui.Cell{
				plain(n.Name), plain(roles), nodeStatusCell(ctx, n),
				{Text: Age(n.Since, now, true), Key: durationKey(n.Since, now)},
				sched, version, plain(n.InternalIP), {Text: fmt.Sprint(n.Pods), Key: numberKey(int64(n.Pods))},
				{Text: fmt.Sprintf("%s/%s", cores(n.CPURequested), cores(n.CPUAllocatable)), Key: numberKey(n.CPURequested)},
				{Text: fmt.Sprintf("%s/%s", Bytes(n.MemoryRequested), Bytes(n.MemoryAllocatable)), Key: numberKey(n.MemoryRequested)},
			}})
		}
		return rows
	}}
}

// cores formats millicores as kubectl does: "500m", "2".
func cores(milli int64) string {
	if milli%1000 == 0 {
		return fmt.Sprint(milli / 1000)
	}
	return fmt.Sprintf("%dm", milli)
}

// replicaMark keeps the replicas column readable at 80 columns:
// node-a✓ healthy, node-b✗ failed, node-c↻ rebuilding, node-d■ stopped.
func replicaMark(s string) string {
	switch s {
	case kube.ReplicaHealthy:
		return "✓"
	case kube.ReplicaRebuilding:
		return "↻"
	case kube.ReplicaFailed:
		return "✗"
	}
	return "■"
}

// shortRoles abbreviates k3s's three server roles to "server".
func shortRoles(roles []string) string {
	if slices.Contains(roles, "control-plane") && slices.Contains(roles, "etcd") {
		rest := slices.DeleteFunc(slices.Clone(roles), func(r string) bool { return r == "control-plane" || r == "etcd" || r == "master" })
		return strings.Join(append([]string{"server"}, rest...), ",")
	}
	return strings.Join(roles, ",")
}

// robustnessCell colours a volume's robustness and how long it has held:
// degraded for a minute is a warning, for an hour or more an alarm.
func robustnessCells(ctx *ui.Context, v kube.VolumeStatus, now time.Time) (ui.Cell, ui.Cell) {
	st := ctx.Styles
	since := ui.Cell{Text: Age(v.Since, now, v.SinceExact), Key: durationKey(v.Since, now)}
	switch v.Robustness {
	case "healthy":
		return styled(v.Robustness, st.OK), since
	case "degraded":
		sev := st.Warn
		if now.Sub(v.Since) >= time.Hour {
			sev = st.Bad
		}
		since.Style = &sev
		return styled(v.Robustness, sev), since
	case "faulted":
		since.Style = &st.Bad
		return styled(v.Robustness, st.Bad), since
	}
	return styled(v.Robustness, st.Muted), since
}

func newVolumes(ctx *ui.Context) screen {
	cols := []ui.Column{{Title: "NAME", Width: 16}, {Title: "STATE", Width: 9}, {Title: "ROBUSTNESS", Width: 10}, {Title: "SINCE", Width: 5},
		{Title: "SIZE", Width: 5}, {Title: "USED", Width: 6, HideBelow: 100}, {Title: "NODE", Width: 7}, {Title: "REPLICAS ✓✗↻", Width: 18, Flex: true}}
	return &tableScreen{ctx: ctx, t: ui.NewTable(ctx, cols), build: func(f *Frame, now time.Time) []ui.Row {
		var rows []ui.Row
		for _, v := range f.Status.Volumes {
			rob, since := robustnessCells(ctx, v, now)
			var reps []string
			for _, r := range v.Replicas {
				mark := r.Node + replicaMark(r.State)
				if r.State == kube.ReplicaRebuilding && r.Progress >= 0 {
					mark += fmt.Sprintf("%d%%", r.Progress)
				}
				reps = append(reps, mark)
			}
			replicas := strings.Join(reps, " ")
			if len(v.Replicas) < v.WantReplicas {
				replicas += fmt.Sprintf(" (%d/%d)", len(v.Replicas), v.WantReplicas)
			}
			rows = append(rows, ui.Row{ID: v.Name, Cells: []ui.Cell{
				plain(v.Label()), plain(v.State), rob, since,
				{Text: Bytes(v.Size), Key: numberKey(v.Size)}, {Text: Bytes(v.ActualSize), Key: numberKey(v.ActualSize)},
				plain(orNA(v.Node)), plain(replicas),
			}})
		}
		return rows
	}}
}

func newApps(ctx *ui.Context) screen {
	// NOTE takes the room left (a terminating old pod is said there); at 80
	// columns the columns before it need it all.
	cols := []ui.Column{{Title: "NAME", Width: 12}, {Title: "KIND", Width: 9}, {Title: "MODE", Width: 6}, {Title: "DESIGNATED", Width: 10},
		{Title: "NODE", Width: 7}, {Title: "STATUS", Width: 10}, {Title: "LAST MOVE", Width: 20}, {Title: "VNC", Width: 5, HideBelow: 100},
		{Title: "NOTE", Width: 5, Flex: true, HideBelow: 100}}
	return &tableScreen{ctx: ctx, t: ui.NewTable(ctx, cols), build: func(f *Frame, now time.Time) []ui.Row {
		var rows []ui.Row
		for _, a := range f.Status.Apps {
			status := styled(a.Phase, ctx.Styles.OK)
			if !a.Ready {
				status = styled(orNA(a.Phase), ctx.Styles.Bad)
			}
			node := plain(orNA(a.Node))
			if a.DesignatedNode != "" && a.Node != "" && a.Node != a.DesignatedNode {
				node = styled(a.Node, ctx.Styles.Warn) // running away from its designated node
			}
			move := ui.Cell{Text: "-"}
			if m := a.LastMove; m != nil {
				move = ui.Cell{Text: fmt.Sprintf("%s %s→%s", Age(m.At, now, true), m.From, m.To), Key: durationKey(m.At, now)}
			}
			vnc := plain("-")
			if a.VNCPort > 0 {
				vnc = plain(fmt.Sprint(a.VNCPort))
			}
			// The old pods or VMIs still going away are said on the app's
			// one row, not as rows of their own.
			note := plain("")
			if len(a.Terminating) > 0 {
				var parts []string
				for _, o := range a.Terminating {
					parts = append(parts, "terminating on "+orNA(o.Node))
				}
				note = styled("old "+map[bool]string{true: "VMI", false: "pod"}[a.Kind == kube.AppKindVM]+" "+strings.Join(parts, ", "), ctx.Styles.Warn)
			}
			rows = append(rows, ui.Row{ID: a.Namespace + "/" + a.Object, Cells: []ui.Cell{
				plain(a.Name), plain(a.Kind), plain(orNA(a.Mode)), plain(orNA(a.DesignatedNode)), node, status, move, vnc, note,
			}})
		}
		return rows
	}}
}

// eventEntry is one row of the events screen: a Kubernetes event or a line
// of the agent's timeline.
type eventEntry struct {
	at, first                   time.Time
	warning                     bool
	reason, object, message, id string
	count                       int32
}

// eventsScreen merges the agent's timeline (source "agent") with the
// cluster's Kubernetes events, newest first; enter opens a row's detail
// (a message is cut in the table), esc goes back.
type eventsScreen struct {
	ctx     *ui.Context
	t       *ui.Table
	entries map[string]eventEntry
	open    string // the row shown in detail, "" for the list
	now     time.Time
}

func newEvents(ctx *ui.Context) screen {
	cols := []ui.Column{{Title: "AGE", Width: 5}, {Title: "TYPE", Width: 7}, {Title: "REASON", Width: 14}, {Title: "OBJECT", Width: 24}, {Title: "MESSAGE", Width: 20, Flex: true}}
	return &eventsScreen{ctx: ctx, t: ui.NewTable(ctx, cols)}
}

func (s *eventsScreen) setFrame(f *Frame, now time.Time) {
	s.now = now
	var all []eventEntry
	// Row IDs name what a row is, not where it sorts, so a chosen row keeps
	// the cursor while newer events arrive above it.
	for _, e := range f.Events {
		all = append(all, eventEntry{at: e.Time, first: e.First, warning: e.Type == "Warning", reason: e.Reason, object: e.Object, message: e.Message,
			count: e.Count, id: "k/" + e.Namespace + "/" + e.Name + "/" + e.Object + "/" + e.Reason})
	}
	if f.Agent != nil {
		for _, e := range f.Agent.Events {
			source := e.Source
			if source == "" {
				source = "agent"
			}
			all = append(all, eventEntry{at: e.Time, warning: e.Warning, reason: source + ":" + e.Kind, object: e.Subject, message: e.Message,
				id: "a/" + source + "/" + e.Time.UTC().Format(time.RFC3339Nano) + "/" + e.Kind + "/" + e.Subject})
		}
	}
	slices.SortStableFunc(all, func(a, b eventEntry) int { return b.at.Compare(a.at) })
	s.entries = make(map[string]eventEntry, len(all))
	var rows []ui.Row
	for _, e := range all {
		s.entries[e.id] = e
		typ := plain("Normal")
		if e.warning {
			typ = styled("Warning", s.ctx.Styles.Warn)
		}
		rows = append(rows, ui.Row{ID: e.id, Cells: []ui.Cell{
			{Text: Age(e.at, now, true), Key: durationKey(e.at, now)}, typ, plain(e.reason), plain(e.object), plain(e.message),
		}})
	}
	s.t.SetRows(rows)
}

func (s *eventsScreen) table() *ui.Table { return s.t }

func (s *eventsScreen) title() string {
	if s.open != "" {
		return "event (esc: back)"
	}
	return ""
}

func (s *eventsScreen) key(msg tea.KeyMsg, h int) bool {
	k := s.ctx.Keys
	switch {
	case key.Matches(msg, k.Enter) && s.open == "":
		if id := s.t.SelectedID(); id != "" {
			s.open = id
		}
		return true
	case key.Matches(msg, k.Back) && s.open != "":
		s.open = ""
		return true
	case s.open != "":
		// The detail has no cursor: navigation keys wait for the list.
		return true
	}
	return s.t.Update(msg, h)
}

// view shows the list, or one event in full: the message wrapped to the
// width, the object, the count and when it was first and last seen.
func (s *eventsScreen) view(w, h int) string {
	e, ok := s.entries[s.open]
	if s.open == "" || !ok {
		// An event that went away (Kubernetes expires them) closes its detail.
		s.open = ""
		return s.t.View(w, h)
	}
	st := s.ctx.Styles
	typ := "Normal"
	if e.warning {
		typ = st.Warn.Render("Warning")
	}
	var b strings.Builder
	row := func(label, value string) { fmt.Fprintf(&b, "%s %s\n", st.Section.Render(ui.Fit(label, 11)), value) }
	row("Type", typ)
	row("Reason", e.reason)
	row("Object", e.object)
	if e.count > 0 {
		row("Count", fmt.Sprint(e.count))
	}
	if !e.first.IsZero() {
		row("First seen", Age(e.first, s.now, true)+" ago, "+e.first.UTC().Format(time.RFC3339))
	}
	row("Last seen", Age(e.at, s.now, true)+" ago, "+e.at.UTC().Format(time.RFC3339))
	b.WriteString("\n")
	for _, line := range strings.Split(e.message, "\n") {
		for _, piece := range ui.Wrap(line, max(w, 1)) {
			b.WriteString(piece + "\n")
		}
	}
	b.WriteString("\n" + st.Muted.Render("esc: back to the list"))
	return b.String()
}

// podsScreen lists namespaces; enter opens one namespace's pods, esc goes back.
type podsScreen struct {
	ctx        *ui.Context
	namespaces *ui.Table
	pods       *ui.Table
	open       string // namespace drilled into, "" for the list
	frame      *Frame
	now        time.Time
}

func newPods(ctx *ui.Context) screen {
	return &podsScreen{
		ctx: ctx,
		namespaces: ui.NewTable(ctx, []ui.Column{{Title: "NAMESPACE", Width: 16}, {Title: "READY", Width: 6},
			{Title: "NOT-READY", Width: 10}, {Title: "FAILED", Width: 7}}),
		pods: ui.NewTable(ctx, []ui.Column{{Title: "NAME", Width: 20}, {Title: "PHASE", Width: 11}, {Title: "READY", Width: 6},
			{Title: "RESTARTS", Width: 9}, {Title: "NODE", Width: 7}, {Title: "AGE", Width: 5}}),
	}
}

func (s *podsScreen) setFrame(f *Frame, now time.Time) {
	s.frame, s.now = f, now
	st := s.ctx.Styles
	var rows []ui.Row
	for _, ns := range f.Status.Namespaces {
		notReady := plain(fmt.Sprint(ns.NotReady))
		if ns.NotReady > 0 {
			notReady = styled(fmt.Sprint(ns.NotReady), st.Warn)
		}
		failed := plain(fmt.Sprint(ns.Failed))
		if ns.Failed > 0 {
			failed = styled(fmt.Sprint(ns.Failed), st.Bad)
		}
		rows = append(rows, ui.Row{ID: ns.Name, Cells: []ui.Cell{plain(ns.Name), plain(fmt.Sprint(ns.Ready)), notReady, failed}})
	}
	s.namespaces.SetRows(rows)
	s.buildPods()
}

func (s *podsScreen) buildPods() {
	if s.frame == nil {
		return
	}
	st := s.ctx.Styles
	var rows []ui.Row
	for _, p := range s.frame.Pods {
		if p.Namespace != s.open {
			continue
		}
		phase := styled(p.Phase, st.OK)
		if !p.Healthy {
			phase = styled(p.Phase, st.Bad)
		}
		rows = append(rows, ui.Row{ID: p.Name, Cells: []ui.Cell{
			plain(p.Name), phase, plain(p.Ready), {Text: fmt.Sprint(p.Restarts), Key: numberKey(int64(p.Restarts))},
			plain(orNA(p.Node)), {Text: Age(p.Created, s.now, true), Key: durationKey(p.Created, s.now)},
		}})
	}
	s.pods.SetRows(rows)
}

func (s *podsScreen) table() *ui.Table {
	if s.open != "" {
		return s.pods
	}
	return s.namespaces
}

func (s *podsScreen) title() string {
	if s.open != "" {
		return "pods in " + s.open + " (esc: back)"
	}
	return ""
}

func (s *podsScreen) key(msg tea.KeyMsg, h int) bool {
	k := s.ctx.Keys
	switch {
	case key.Matches(msg, k.Enter) && s.open == "":
		if ns := s.namespaces.SelectedID(); ns != "" {
			s.open = ns
			s.buildPods()
		}
		return true
	case key.Matches(msg, k.Back) && s.open != "":
		s.open = ""
		return true
	}
	return s.table().Update(msg, h)
}

func (s *podsScreen) view(w, h int) string { return s.table().View(w, h) }

// Alert is one thing on the site that needs attention.
type Alert struct {
	Bad   bool // false: a warning
	Text  string
	Since time.Time
}

// Alerts lists what needs attention, worst and longest first: faulted and
// long-degraded volumes, nodes not ready, version skew, failed pods, apps not
// running.
func Alerts(f *Frame, now time.Time) []Alert {
	var out []Alert
	s := f.Status
	for _, v := range s.Volumes {
		switch v.Robustness {
		case "faulted":
			out = append(out, Alert{Bad: true, Since: v.Since, Text: fmt.Sprintf("volume %s faulted for %s", v.Label(), Age(v.Since, now, v.SinceExact))})
		case "degraded":
			failed := 0
			for _, r := range v.Replicas {
				if r.State != kube.ReplicaHealthy {
					failed++
				}
			}
			out = append(out, Alert{Bad: now.Sub(v.Since) >= time.Hour, Since: v.Since,
				Text: fmt.Sprintf("volume %s degraded for %s (%d of %d replicas not healthy)", v.Label(), Age(v.Since, now, v.SinceExact), failed, len(v.Replicas))})
		}
	}
	for _, n := range s.Nodes {
		if !n.Ready {
			out = append(out, Alert{Bad: true, Since: n.Since, Text: fmt.Sprintf("node %s %s for %s %s", n.Name, n.Status, Age(n.Since, now, true), n.Reason)})
		}
		if n.VersionSkew != "" {
			out = append(out, Alert{Since: n.Since, Text: fmt.Sprintf("node %s: %s", n.Name, n.VersionSkew)})
		}
	}
	for _, ns := range s.Namespaces {
		if ns.Failed > 0 {
			out = append(out, Alert{Since: now, Text: fmt.Sprintf("%s: %d pod(s) failed", ns.Name, ns.Failed)})
		}
	}
	for _, a := range s.Apps {
		if !a.Ready && a.Phase != "Terminating" {
			out = append(out, Alert{Since: now, Text: fmt.Sprintf("app %s (%s) not running: %s on %s", a.Name, a.Kind, orNA(a.Phase), orNA(a.Node))})
		}
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
}

func newOverview(ctx *ui.Context) screen { return &overview{ctx: ctx} }

func (o *overview) setFrame(f *Frame, now time.Time) { o.frame, o.now = f, now }
func (o *overview) key(tea.KeyMsg, int) bool         { return false }
func (o *overview) table() *ui.Table                 { return nil }
func (o *overview) title() string                    { return "" }

// ThisNodeStatus is READY, NOTREADY or DOWN (API server unreachable) for the
// node this console runs on, or "" when that node is not known.
func ThisNodeStatus(f *Frame) string {
	if f.Agent == nil || f.Agent.Node == "" {
		return ""
	}
	if !f.Synced || !f.Status.API.Connected {
		return "DOWN"
	}
	for _, n := range f.Status.Nodes {
		if n.Name == f.Agent.Node {
			if n.Ready {
				return "READY"
			}
			return "NOTREADY"
		}
	}
	return "NOTREADY"
}

func (o *overview) view(w, h int) string {
	st := o.ctx.Styles
	if o.frame == nil {
		return st.Muted.Render("waiting for data…")
	}
	f, now := o.frame, o.now
	s := f.Status
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
	row("VIP", vip)
	nodes := fmt.Sprintf("%d/%d ready", s.NodesReady, s.NodesTotal)
	if s.NodesReady < s.NodesTotal {
		nodes = st.Bad.Render(nodes)
	} else if f.Synced {
		nodes = st.OK.Render(nodes)
	}
	row("Nodes", nodes)
	if a := f.Agent; a != nil {
		if a.Running {
			status := ThisNodeStatus(f)
			style := st.OK
			if status != "READY" {
				style = st.Bad
			}
			line := fmt.Sprintf("%s %s · %s %s for %s", a.Node, style.Render(status), orNA(a.Role), a.Phase, Age(a.Since, now, true))
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
	}
	row("Stats leader", leader)
	b.WriteString("\n" + st.Section.Render("Alerts") + "\n")
	alerts := Alerts(f, now)
	if !f.Synced {
		b.WriteString(st.Muted.Render("  no cluster data yet: "+orNA(f.Problem)) + "\n")
	} else if len(alerts) == 0 {
		b.WriteString(st.OK.Render("  none: every node ready, every volume healthy, every app running") + "\n")
	}
	room := max(h-8, 1)
	for i, a := range alerts {
		if i == room-1 && len(alerts) > room {
			fmt.Fprintf(&b, "  … %d more\n", len(alerts)-i)
			break
		}
		mark := st.Warn.Render("  ! ")
		if a.Bad {
			mark = st.Bad.Render("  ✖ ")
		}
		b.WriteString(mark + a.Text + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}
