package views

import (
	"fmt"
	"slices"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

// eventEntry is one row of the events screen: a Kubernetes event or a line
// of the agent's timeline.
type eventEntry struct {
	at, first                   time.Time
	warning                     bool
	reason, object, message, id string
	count                       int32
	// pods are the pods of a line that stands for many (podGroups).
	pods []string
}

// podGroups are the cluster's events as lines: the events that say the
// same thing (type, reason, message) of several pods are one line, "N
// pods", the pods in its detail. A lost node makes Kubernetes say
// NodeNotReady once per pod on it: one line, not a screenful.
func podGroups(events []kube.EventRow) []eventEntry {
	type said struct{ typ, reason, message string }
	groups := map[said][]kube.EventRow{}
	for _, e := range events {
		if strings.HasPrefix(e.Object, "Pod/") {
			k := said{e.Type, e.Reason, e.Message}
			groups[k] = append(groups[k], e)
		}
	}
	var out []eventEntry
	for _, e := range events {
		g := groups[said{e.Type, e.Reason, e.Message}]
		if !strings.HasPrefix(e.Object, "Pod/") || len(g) < 2 {
			out = append(out, eventEntry{at: e.Time, first: e.First, warning: e.Type == "Warning", reason: e.Reason, object: e.Object, message: e.Message,
				count: e.Count, id: "k/" + e.Namespace + "/" + e.Name + "/" + e.Object + "/" + e.Reason})
			continue
		}
		if g[0] != e {
			continue // the group's line is made at its first event
		}
		entry := eventEntry{warning: e.Type == "Warning", reason: e.Reason, object: fmt.Sprintf("%d pods", len(g)), message: e.Message,
			id: "g/" + e.Type + "/" + e.Reason + "/" + e.Message}
		for _, m := range g {
			if m.Time.After(entry.at) {
				entry.at = m.Time
			}
			first := m.First
			if first.IsZero() {
				first = m.Time
			}
			if entry.first.IsZero() || first.Before(entry.first) {
				entry.first = first
			}
			entry.count += max(m.Count, 1)
			entry.pods = append(entry.pods, m.Namespace+"/"+strings.TrimPrefix(m.Object, "Pod/"))
		}
		slices.Sort(entry.pods)
		out = append(out, entry)
	}
	return out
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
	// The message is what is read: a long object name (a virt-launcher
	// pod's) gives way first, down to 16 columns.
	cols := []ui.Column{{Title: "AGE", Width: 5}, {Title: "TYPE", Width: 7}, {Title: "REASON", Width: 14}, {Title: "OBJECT", Width: 16, GivesWay: true},
		{Title: "MESSAGE", Width: 20, Flex: true}}
	return &eventsScreen{ctx: ctx, t: ui.NewTable(ctx, cols)}
}

func (s *eventsScreen) setFrame(f *Frame, now time.Time) {
	s.now = now
	var all []eventEntry
	// Row IDs name what a row is, not where it sorts, so a chosen row keeps
	// the cursor while newer events arrive above it.
	all = append(all, podGroups(f.Events)...)
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
			typ = styled("Warning", &s.ctx.Styles.Warn)
		}
		rows = append(rows, ui.Row{ID: e.id, Cells: []ui.Cell{
			{Text: Age(e.at, now, true), Key: durationKey(e.at, now)}, typ, plain(e.reason), plain(e.object), plain(e.message),
		}})
	}
	s.t.SetRows(rows)
}

// table is the list; an event open in detail has none (no cursor to move,
// no rows to filter or sort).
func (s *eventsScreen) table() *ui.Table {
	if s.open != "" {
		return nil
	}
	return s.t
}

func (s *eventsScreen) help() screenHelp {
	k := s.ctx.Keys
	return screenHelp{
		about: "The cluster's Kubernetes events, this node's agent timeline (agent:) and the actions recorded on this device (audit:), newest first.",
		keys: []binding{
			{key: k.Enter, long: "open the event: the whole message, object, count, first and last seen", section: sectionScreen, footer: footerScreen,
				applies: func() bool { return s.open == "" && s.t.SelectedID() != "" },
				run:     func(tea.KeyMsg) tea.Cmd { s.open = s.t.SelectedID(); return nil }},
			{key: k.Back, long: "back to the list", section: sectionScreen, footer: footerScreen,
				applies: func() bool { return s.open != "" },
				run:     func(tea.KeyMsg) tea.Cmd { s.open = ""; return nil }},
		},
	}
}

func (s *eventsScreen) title() string {
	if s.open != "" {
		return "event (esc: back)"
	}
	return ""
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
	if len(e.pods) > 0 {
		b.WriteString("\n" + st.Section.Render("Pods") + "\n")
		for _, p := range e.pods {
			b.WriteString("  " + p + "\n")
		}
	}
	b.WriteString("\n" + st.Muted.Render("esc: back to the list"))
	return b.String()
}
