package views

import (
	"fmt"
	"slices"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

// The detail of a row (enter on the nodes, volumes and apps screens): the
// whole of one object over its screen's table, from the frame the screen
// already has: what needs attention about it (its alerts, why and what
// next), its conditions and taints, the scheduler's reason, its replicas,
// and its recent events, the Kubernetes events and the agent's timeline
// the events screen shows, picked for the object. Nothing here reads the
// cluster: the frame is the watches' picture. esc goes back; the arrows
// scroll a detail taller than the screen, which is never cut.

// detailView is one screen's detail: which row is open and how to draw it.
type detailView struct {
	ctx *ui.Context
	// of names the kind in the title and the help ("node").
	of string
	// draw writes the open row's lines for a width, false when the row is
	// gone from the frame (the detail then closes).
	draw  func(f *Frame, id string, now time.Time, width int) ([]string, bool)
	label func(f *Frame, id string) string

	open   string // the row open, "" when none
	offset int    // the first line shown
	height int    // the height it was last drawn at
	// above and below are the lines the last drawing left out above and
	// below: the scroll keys act only toward lines left out.
	above, below int
	frame        *Frame
	now          time.Time
}

func (d *detailView) isOpen() bool { return d != nil && d.open != "" }

// title names the open row; the footer says esc goes back (the tabs
// leave a title little room at 80 columns).
func (d *detailView) title() string { return d.of + " " + d.label(d.frame, d.open) }

// withDetail gives screen s a detail of its rows: enter opens the
// selected row's, esc closes it, the arrows scroll it. The keys join the
// screen's own list, so its help and footer say them.
func withDetail(s *tableScreen, of, long string, label func(f *Frame, id string) string,
	draw func(f *Frame, id string, now time.Time, width int) ([]string, bool)) {
	if label == nil {
		label = func(_ *Frame, id string) string { return id }
	}
	d := &detailView{ctx: s.ctx, of: of, draw: draw, label: label}
	s.detail = d
	s.about.keys = append(s.about.keys, d.bindings(long, "back to the "+of+"s", s.t.SelectedID)...)
}

// bindings are a detail's keys: enter opens the row selected (its ID,
// "" when none), esc closes it, the arrows scroll it toward the lines
// left out.
func (d *detailView) bindings(long, back string, selected func() string) []binding {
	k := d.ctx.Keys
	scroll := func(by func(h int) int) func(tea.KeyMsg) tea.Cmd {
		return func(tea.KeyMsg) tea.Cmd { d.offset = max(d.offset+by(d.lastHeight()), 0); return nil }
	}
	open := d.isOpen
	up := func() bool { return d.isOpen() && d.above > 0 }
	down := func() bool { return d.isOpen() && d.below > 0 }
	return []binding{
		{key: k.Enter, long: long, section: sectionScreen, footer: footerScreen,
			applies: func() bool { return !d.isOpen() && selected() != "" },
			run:     func(tea.KeyMsg) tea.Cmd { d.open, d.offset, d.above, d.below = selected(), 0, 0, 0; return nil }},
		{key: k.Back, long: back, section: sectionScreen, footer: footerScreen, applies: open,
			run: func(tea.KeyMsg) tea.Cmd { d.open = ""; return nil }},
		{key: k.Down, long: "scroll the detail down", section: sectionMove, applies: down, run: scroll(func(int) int { return 1 })},
		{key: k.Up, long: "scroll the detail up", section: sectionMove, applies: up, run: scroll(func(int) int { return -1 })},
		{key: k.PageDown, long: "scroll a page down", section: sectionMove, applies: down, run: scroll(func(h int) int { return h - 1 })},
		{key: k.PageUp, long: "scroll a page up", section: sectionMove, applies: up, run: scroll(func(h int) int { return 1 - h })},
	}
}

// setFrame takes a new frame; the open row's object gone from it (a node
// removed, an app deleted), the detail closes rather than show what no
// longer is.
func (d *detailView) setFrame(f *Frame, now time.Time) {
	d.frame, d.now = f, now
	if d.open != "" {
		if _, ok := d.draw(f, d.open, now, 80); !ok {
			d.open = ""
		}
	}
}

// lastHeight is the height the detail was last drawn at (a page).
func (d *detailView) lastHeight() int { return max(d.height, 2) }

// view draws the open row's detail in w x h: the lines from the offset,
// and when they do not all fit, a last line that says how many more
// there are and how to see them.
func (d *detailView) view(w, h int) string {
	d.height = h
	lines, ok := d.draw(d.frame, d.open, d.now, w)
	if !ok {
		d.open = "" // gone since the frame came (setFrame closes it)
		return ""
	}
	if len(lines) <= h {
		d.offset, d.above, d.below = 0, 0, 0
		return strings.Join(lines, "\n")
	}
	room := h - 1
	d.offset = min(d.offset, len(lines)-room)
	shown := lines[d.offset : d.offset+room]
	below := len(lines) - d.offset - room
	d.above, d.below = d.offset, below
	more := fmt.Sprintf("↑ %d above · ", d.offset)
	if d.offset == 0 {
		more = ""
	}
	if below > 0 {
		more += fmt.Sprintf("↓ %d more lines (↓/pgdn)", below)
	} else {
		more += "end (↑/pgup)"
	}
	return strings.Join(append(slices.Clone(shown), d.ctx.Styles.Muted.Render(more)), "\n")
}

// detailText builds a detail's lines: labelled rows whose values wrap
// under themselves, sections, and items that wrap with a hanging indent.
// Nothing is cut: a long message takes more lines.
type detailText struct {
	ctx   *ui.Context
	width int
	lines []string
}

const detailLabelWidth = 12

// row is "Label       value", the value wrapped in the width left.
func (t *detailText) row(label, value string) {
	st := t.ctx.Styles
	pad := strings.Repeat(" ", detailLabelWidth+1)
	for i, l := range wrapKeepingShort(value, t.width-detailLabelWidth-1) {
		if i == 0 {
			t.lines = append(t.lines, st.Section.Render(ui.Fit(label, detailLabelWidth))+" "+l)
		} else {
			t.lines = append(t.lines, pad+l)
		}
	}
}

// wrapKeepingShort is wrapWords, but a text that fits stays as it is
// (its aligned columns, "node-a  healthy", kept).
func wrapKeepingShort(text string, width int) []string {
	if ansi.StringWidth(text) <= width {
		return []string{text}
	}
	return wrapWords(text, width)
}

// section starts a titled block (after a blank line).
func (t *detailText) section(title string) {
	t.lines = append(t.lines, "", t.ctx.Styles.Section.Render(title))
}

// item is one entry of a section, wrapped under itself after "  ".
func (t *detailText) item(text string) {
	for i, l := range wrapKeepingShort(text, t.width-4) {
		if i == 0 {
			t.lines = append(t.lines, "  "+l)
		} else {
			t.lines = append(t.lines, "    "+l)
		}
	}
}

// alerts lists what needs attention about the object (the overview's
// alerts whose subject it is), each with its why and next step.
func (t *detailText) alerts(f *Frame, now time.Time, subject string) {
	var mine []Alert
	for _, a := range Alerts(f, now) {
		if a.Subject == subject {
			mine = append(mine, a)
		}
	}
	if len(mine) == 0 {
		return
	}
	t.section("Needs attention")
	for _, a := range mine {
		t.item(a.Line())
	}
}

// events lists the object's recent events, newest first: the Kubernetes
// events about any of objects ("Node/node-b") and the agent's timeline
// entries about any of subjects (an app's or a node's name), as the
// events screen has them. At most limit; none says so.
func (t *detailText) events(f *Frame, now time.Time, objects, subjects []string, limit int) {
	type entry struct {
		at   time.Time
		text string
		warn bool
	}
	var all []entry
	for _, e := range f.Events {
		if slices.ContainsFunc(objects, func(o string) bool { return objectMatches(o, e.Namespace, e.Object) }) {
			text := e.Reason + ": " + e.Message
			if e.Count > 1 {
				text += fmt.Sprintf(" (×%d)", e.Count)
			}
			all = append(all, entry{at: e.Time, text: text, warn: e.Type == "Warning"})
		}
	}
	if f.Agent != nil {
		for _, e := range f.Agent.Events {
			if slices.Contains(subjects, e.Subject) {
				source := e.Source
				if source == "" {
					source = "agent"
				}
				all = append(all, entry{at: e.Time, text: source + ":" + e.Kind + ": " + e.Message, warn: e.Warning})
			}
		}
	}
	slices.SortStableFunc(all, func(a, b entry) int { return b.at.Compare(a.at) })
	t.section("Recent events")
	if len(all) == 0 {
		t.lines = append(t.lines, t.ctx.Styles.Muted.Render("  none seen (the events screen keeps the last 500)"))
		return
	}
	if len(all) > limit {
		all = all[:limit]
	}
	for _, e := range all {
		age := ui.Fit(Age(e.at, now, true), 4)
		text := e.text
		if e.warn {
			text = "! " + text
		}
		for i, l := range wrapWords(text, t.width-7) {
			if i == 0 {
				t.lines = append(t.lines, "  "+age+" "+l)
			} else {
				t.lines = append(t.lines, "       "+l)
			}
		}
	}
}

// nodeDetail is the detail of node id: readiness and why, role, address,
// schedulability, load, conditions, taints, what needs attention and its
// recent events.
func nodeDetail(ctx *ui.Context) func(f *Frame, id string, now time.Time, width int) ([]string, bool) {
	return func(f *Frame, id string, now time.Time, width int) ([]string, bool) {
		i := slices.IndexFunc(f.Status.Nodes, func(n kube.NodeStatus) bool { return n.Name == id })
		if i < 0 {
			return nil, false
		}
		n := f.Status.Nodes[i]
		t := &detailText{ctx: ctx, width: width}
		status := stateText(f, n.Status) + " for " + Age(n.Since, now, true)
		if n.Reason != "" {
			status += ": " + n.Reason
		}
		t.row("Status", status)
		roles := shortRoles(n.Roles)
		if n.Seed {
			roles += " (the seed)"
		}
		t.row("Roles", roles)
		t.row("Address", orNA(n.InternalIP)+" · kubelet "+orNA(n.KubeletVersion))
		sched := "yes"
		switch {
		case !n.Schedulable && n.CordonedSince != nil:
			sched = "cordoned for " + Age(*n.CordonedSince, now, true)
		case !n.Schedulable:
			sched = "cordoned"
		}
		if n.PodsLeaving > 0 {
			sched += fmt.Sprintf(" · %d pod(s) leaving (a drain under way)", n.PodsLeaving)
		}
		t.row("Schedulable", sched)
		t.row("Pods", fmt.Sprintf("%d · CPU %s of %s · memory %s of %s requested", n.Pods,
			cores(n.CPURequested), cores(n.CPUAllocatable), Bytes(n.MemoryRequested), Bytes(n.MemoryAllocatable)))
		t.alerts(f, now, nodeSubject(n.Name))
		t.section("Conditions")
		if len(n.Conditions) == 0 {
			t.item("none reported")
		}
		for _, text := range conditionLines(n.Conditions, now) {
			t.item(text)
		}
		if len(n.Taints) > 0 {
			t.section("Taints")
			for _, taint := range n.Taints {
				t.item(taint)
			}
		}
		t.events(f, now, []string{"Node/" + n.Name}, []string{n.Name}, detailEvents)
		return t.lines, true
	}
}

// objectMatches says whether an event's object ("Pod/hmi-x") is the one
// named, or one of those a pattern ending in "*" names by its prefix (a
// VM's launcher pods, "Pod/virt-launcher-hmi-*").
func objectMatches(pattern, namespace, object string) bool {
	// "NS:Kind/name" matches only in namespace NS: a namespaced object's
	// name is its own only there.
	if ns, rest, ok := strings.Cut(pattern, ":"); ok {
		if ns != namespace {
			return false
		}
		pattern = rest
	}
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(object, prefix)
	}
	return pattern == object
}

// conditionLines says a node's conditions, those that say the same
// (status, reason, message, since) on one line: a lost node's four
// Unknown conditions are one line, not four. A pressure condition that
// is False (no pressure) says no more than that.
func conditionLines(conds []kube.Condition, now time.Time) []string {
	type said struct {
		status, why string
		since       time.Time
	}
	var order []said
	types := map[said][]string{}
	for _, c := range conds {
		k := said{status: c.Status, since: c.Since}
		if c.Type == "Ready" || c.Status != "False" {
			k.why = strings.TrimSuffix(strings.TrimPrefix(c.Reason+": "+c.Message, ": "), ": ")
		} else {
			k.since = time.Time{}
		}
		if _, ok := types[k]; !ok {
			order = append(order, k)
		}
		types[k] = append(types[k], c.Type)
	}
	var out []string
	for _, k := range order {
		text := strings.Join(types[k], ", ") + "=" + k.status
		if !k.since.IsZero() {
			text += " for " + Age(k.since, now, true)
		}
		if k.why != "" {
			text += " · " + k.why
		}
		out = append(out, text)
	}
	return out
}

// detailEvents is how many of an object's events its detail lists.
const detailEvents = 8

// volumeDetail is the detail of volume id: state, robustness and since,
// size, claim, each replica with its node, state and rebuild progress,
// what needs attention and its recent events.
func volumeDetail(ctx *ui.Context) func(f *Frame, id string, now time.Time, width int) ([]string, bool) {
	return func(f *Frame, id string, now time.Time, width int) ([]string, bool) {
		i := slices.IndexFunc(f.Status.Volumes, func(v kube.VolumeStatus) bool { return v.Name == id })
		if i < 0 {
			return nil, false
		}
		v := f.Status.Volumes[i]
		t := &detailText{ctx: ctx, width: width}
		state := stateText(f, v.State)
		if v.Node != "" {
			state += " on " + v.Node
		}
		t.row("State", state)
		t.row("Robustness", stateText(f, v.Robustness)+heldFor(v.Since, now, v.SinceExact))
		t.row("Size", Bytes(v.Size)+" ("+Bytes(v.ActualSize)+" used)")
		if v.PVC != "" {
			t.row("Claim", v.PVC)
		}
		t.row("Longhorn", v.Name)
		t.alerts(f, now, volumeSubject(v.Name))
		t.section(fmt.Sprintf("Replicas (%d of %d wanted)", len(v.Replicas), v.WantReplicas))
		if len(v.Replicas) == 0 {
			t.item("none")
		}
		nodeWidth := 0
		for _, r := range v.Replicas {
			nodeWidth = max(nodeWidth, len(r.Node))
		}
		for _, r := range v.Replicas {
			text := fmt.Sprintf("%-*s  %s", nodeWidth, r.Node, r.State)
			if r.State == kube.ReplicaRebuilding {
				if r.Progress >= 0 {
					text += fmt.Sprintf(", %d %%", r.Progress)
				} else {
					text += ", progress not reported"
				}
			}
			if f.Status.NodeLost(r.Node) {
				text += " (" + r.Node + " lost)"
			}
			if r.Name != "" {
				text += " · " + r.Name
			}
			t.item(text)
		}
		// Namespaced names: a volume's is its own only in Longhorn's
		// namespace, a claim's only in its own.
		objects := []string{kube.LonghornNamespace + ":Volume/" + v.Name}
		switch {
		case v.PVC != "" && v.PVCNamespace != "":
			objects = append(objects, v.PVCNamespace+":PersistentVolumeClaim/"+v.PVC)
		case v.PVC != "":
			objects = append(objects, "PersistentVolumeClaim/"+v.PVC) // namespace not reported
		}
		t.events(f, now, objects, []string{v.Name, v.PVC}, detailEvents)
		return t.lines, true
	}
}

// appLabel names the app whose row is id in a title: its name.
func appLabel(f *Frame, id string) string {
	if f != nil {
		if i := slices.IndexFunc(f.Status.Apps, func(a kube.AppStatus) bool { return appRowID(a) == id }); i >= 0 {
			return f.Status.Apps[i].Name
		}
		if uuid, ok := strings.CutPrefix(id, configRowPrefix); ok && f.Agent != nil {
			for _, p := range f.Agent.AppProblems {
				if p.UUID == uuid {
					return p.App
				}
			}
		}
	}
	return id
}

// appDetail is the detail of the app whose row is id (namespace/object,
// or a configured app the agent could not lay out): where it should run
// and where it runs, its state, the scheduler's reason when it is not
// placed, the agent's failover verdict and problem, what needs attention
// and its recent events.
func appDetail(ctx *ui.Context) func(f *Frame, id string, now time.Time, width int) ([]string, bool) {
	return func(f *Frame, id string, now time.Time, width int) ([]string, bool) {
		t := &detailText{ctx: ctx, width: width}
		if uuid, ok := strings.CutPrefix(id, configRowPrefix); ok {
			// Configured, with nothing in the cluster: the agent's word is
			// all there is.
			var p *AgentAppProblem
			if f.Agent != nil {
				for i := range f.Agent.AppProblems {
					if f.Agent.AppProblems[i].UUID == uuid {
						p = &f.Agent.AppProblems[i]
					}
				}
			}
			if p == nil {
				return nil, false
			}
			t.row("App", p.App+" ("+p.Kind+", "+orNA(p.Mode)+")")
			t.row("Designated", orNA(p.Designated))
			t.row("Status", "not laid out: nothing of it is in the cluster")
			t.row("Agent", p.Problem)
			t.events(f, now, nil, []string{p.App}, detailEvents)
			return t.lines, true
		}
		i := slices.IndexFunc(f.Status.Apps, func(a kube.AppStatus) bool { return appRowID(a) == id })
		if i < 0 {
			return nil, false
		}
		a := f.Status.Apps[i]
		t.row("App", a.Name+" ("+a.Kind+", "+orNA(a.Mode)+")")
		designated := orNA(a.DesignatedNode)
		if a.Mode == kube.AppModePinned {
			designated += " (pinned: it runs there or nowhere)"
		}
		t.row("Designated", designated)
		node := orNA(a.Node)
		switch {
		case a.Node == "":
			node = "none: not placed"
		case f.Status.NodeLost(a.Node):
			node += " (lost)"
		case a.DesignatedNode != "" && a.Node != a.DesignatedNode:
			node += " (away from " + a.DesignatedNode + ")"
		}
		t.row("Runs on", node)
		status := stateText(f, a.PhaseText())
		if a.ReportedPhase != "" {
			status += "; it last reported " + a.ReportedPhase
		}
		t.row("Status", status)
		if c := a.Unscheduled; c != nil {
			t.row("Scheduler", c.Reason+" for "+Age(c.Since, now, true)+": "+c.Message)
		}
		if m := a.LastMove; m != nil {
			t.row("Last move", Age(m.At, now, true)+" ago, "+m.From+" → "+m.To)
		}
		if v := failoverVerdict(f.Agent, a.Name); v != "" {
			t.row("Failover", v)
		}
		if f.Agent != nil && a.UUID != "" {
			for _, p := range f.Agent.AppProblems {
				if p.UUID == a.UUID {
					t.row("Agent", p.Problem)
				}
			}
		}
		t.row("Object", strings.TrimPrefix(a.Namespace+"/"+a.Object, "/"))
		for _, o := range a.Terminating {
			t.row("Leaving", o.Object+" on "+orNA(o.Node))
		}
		if a.VNCPort > 0 {
			t.row("VNC", fmt.Sprintf("port %d on its node", a.VNCPort))
		}
		if len(a.HostPorts) > 0 {
			t.row("Host ports", strings.Join(a.HostPorts, ", "))
		}
		t.alerts(f, now, appSubject(a))
		kind := "Pod/"
		if a.Kind == kube.AppKindVM {
			kind = "VirtualMachineInstance/"
		}
		objects := []string{kind + a.Object}
		if a.Kind == kube.AppKindVM {
			// The scheduler speaks of a VM's launcher pod.
			objects = append(objects, "Pod/"+kube.VirtLauncherPrefix+a.Object+"-*")
		}
		for _, o := range a.Terminating {
			objects = append(objects, kind+o.Object)
		}
		if a.Namespace != "" {
			// The app's objects are its namespace's: a pod of the same
			// name elsewhere is another's.
			for i := range objects {
				objects[i] = a.Namespace + ":" + objects[i]
			}
		}
		t.events(f, now, objects, []string{a.Name}, detailEvents)
		return t.lines, true
	}
}
