package views

import (
	"fmt"
	"slices"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/lipgloss"

	"github.com/sitecon/sitecon/keymap"
	"github.com/sitecon/sitecon/ui"
)

// bodyHeight is what the header, tab and footer lines leave, less the stale
// banner when there is one.
func (a *App) bodyHeight() int {
	h := a.ctx.Height - 3
	if a.banner() != "" {
		h--
	}
	return max(h, 1)
}

// banner explains stale or missing data above the screen: stale, in one
// line that fits (the overview says why, whole).
func (a *App) banner() string {
	s := a.frame.Status
	switch {
	case a.frame.Problem != "" && !a.frame.Synced:
		return "No cluster data: " + a.frame.Problem
	case stale(&a.frame) != nil:
		return staleBanner(s.Stale, a.ctx.Now(), a.current == 0)
	}
	return ""
}

// View draws the whole screen: header, tabs, the screen, footer.
func (a *App) View() string {
	w, h := a.ctx.Width, a.ctx.Height
	if w <= 0 || h <= 0 {
		return ""
	}
	st := a.ctx.Styles
	if a.full {
		return a.fullHelp(w, h)
	}
	header := a.header(w)
	tabs := a.tabs(w)
	footer := a.footer(w)
	if b := a.banner(); b != "" {
		tabs += "\n" + ui.Fit(st.Bad.Render(b), w)
	}
	if a.wizard != nil {
		return ui.Clip(a.wizard.View(), w, h)
	}
	body := ""
	switch {
	case a.dialog != nil:
		body = a.dialog.view(w, a.bodyHeight(), a.guard.Armed())
	case a.logs != nil:
		body = a.logs.view(w, a.bodyHeight())
	default:
		body = a.screens[a.current].view(w, a.bodyHeight())
	}
	lines := strings.Split(body, "\n")
	for len(lines) < a.bodyHeight() {
		lines = append(lines, "")
	}
	lines = lines[:a.bodyHeight()]
	for i, l := range lines {
		lines[i] = ui.Fit(l, w)
	}
	return strings.Join(append([]string{header, tabs}, append(lines, footer)...), "\n")
}

func (a *App) header(w int) string {
	st := a.ctx.Styles
	s := a.frame.shownStatus()
	now := a.ctx.Now()
	parts := []string{st.Title.Render("sitecon")}
	name := s.Cluster.Name
	if name == "" {
		name = "cluster n/a"
	}
	parts = append(parts, name)
	nodes := fmt.Sprintf("nodes %d/%d", s.NodesReady, s.NodesTotal)
	switch {
	case !a.frame.Synced:
	case s.NodesReady < s.NodesTotal:
		nodes = st.Bad.Render(nodes)
	default:
		nodes = okStyle(a.ctx, &a.frame).Render(nodes)
	}
	parts = append(parts, nodes)
	if s.VIP.Owner != "" {
		parts = append(parts, "VIP "+s.VIP.Owner)
	}
	if ag := a.frame.Agent; ag != nil && ag.Running {
		parts = append(parts, "agent "+ag.Phase)
	}
	line := strings.Join(parts, st.Muted.Render(" │ "))
	var badge string
	switch {
	case a.frame.Problem != "" && !a.frame.Synced:
		badge = st.Badge.Render(" NO DATA ")
	case stale(&a.frame) != nil:
		badge = st.Badge.Render(" STALE " + Age(s.Stale.AsOf, now, true) + " ")
	}
	clock := now.Format("15:04:05")
	if badge != "" {
		line = badge + " " + line
	}
	gap := w - lipgloss.Width(line) - len(clock)
	if gap < 1 {
		return ui.Fit(line, w)
	}
	return line + strings.Repeat(" ", gap) + st.Muted.Render(clock)
}

func (a *App) tabs(w int) string {
	st := a.ctx.Styles
	title := ""
	if a.logs != nil {
		title = a.logs.title()
	} else {
		title = a.screens[a.current].title()
	}
	line := a.tabLine(false)
	if title != "" && lipgloss.Width(line)+2+lipgloss.Width(title) > w {
		// The title (what is open: a namespace, a row's detail, a log)
		// matters more here than the other screens' names: they give way
		// to their numbers, which still jump to them.
		line = a.tabLine(true)
	}
	if title != "" {
		line += "  " + st.Section.Render(title)
	}
	return ui.Fit(line, w)
}

// tabLine is the screens' tabs, the current one marked; short: the
// others by their number alone.
func (a *App) tabLine(short bool) string {
	st := a.ctx.Styles
	var b strings.Builder
	for i, name := range keymap.ScreenNames {
		label := fmt.Sprintf(" %d %s ", i+1, name)
		switch {
		case i == a.current && st.Marked:
			label = fmt.Sprintf("[%d %s]", i+1, name)
		case i != a.current && short:
			label = fmt.Sprintf(" %d ", i+1)
		}
		if i == a.current {
			b.WriteString(st.ActiveTab.Render(label))
		} else {
			b.WriteString(st.Tab.Render(label))
		}
	}
	return b.String()
}

func (a *App) footer(w int) string {
	st := a.ctx.Styles
	switch a.mode {
	case modeCommand:
		return ui.Fit(st.Key.Render(":")+a.input.View(), w)
	case modeFilter:
		return ui.Fit(st.Key.Render("/")+a.input.View(), w)
	}
	if a.message != "" {
		// Messages quote errors, which quote the cluster and files.
		return ui.Fit(st.Warn.Render(ui.Clean(a.message)), w)
	}
	if a.dialog != nil {
		return ui.Fit(a.fitKeys(a.dialog.footerKeys(a.guard.Armed()), w), w)
	}
	var extra []string
	if a.logs != nil {
		if f := a.logs.filterText(); f != "" {
			extra = append(extra, "filter /"+f)
		}
	} else if t := a.screens[a.current].table(); t != nil {
		if f := t.Filter(); f != "" {
			extra = append(extra, "filter /"+f)
		}
		if c := t.SortColumn(); c != "" {
			extra = append(extra, "sorted by "+c)
		}
	}
	if a.ctx.ReadOnly {
		extra = append(extra, "read-only")
	}
	var prefix string
	if len(extra) > 0 {
		prefix = st.Warn.Render(strings.Join(extra, " · ")) + "  "
	}
	return ui.Fit(prefix+a.fitKeys(a.shortHelp(), w-lipgloss.Width(prefix)), w)
}

// fitKeys is the footer's keys in room cells: whole entries only, in their
// order, as many as fit, and `? help` always among them when it is one
// of them, since it lists the ones left out. A cut entry (`a add nod…`)
// or a footer without `? help` leaves a narrow terminal's technician no
// way to find the rest.
func (a *App) fitKeys(keys []key.Binding, room int) string {
	h := a.help
	h.Width = 0 // measured here, never cut by the help model
	all := h.ShortHelpView(keys)
	if lipgloss.Width(all) <= room {
		return all
	}
	// Each entry's width once (a frame at 80 columns comes here every
	// time), and the separator's between two.
	sep := lipgloss.Width(h.Styles.ShortSeparator.Inline(true).Render(h.ShortSeparator))
	width := make([]int, len(keys))
	helpAt := -1
	for i, b := range keys {
		width[i] = lipgloss.Width(h.ShortHelpView([]key.Binding{b}))
		if helpAt < 0 && slices.Equal(b.Keys(), a.ctx.Keys.Help.Keys()) && width[i] > 0 {
			helpAt = i
		}
	}
	total, shown := 0, 0 // the line's width so far, and its entries
	grow := func(w int) int {
		if shown == 0 {
			return w
		}
		return total + sep + w
	}
	var chosen []key.Binding
	for i, b := range keys {
		if width[i] == 0 {
			continue // disabled: the help model draws nothing for it
		}
		next := grow(width[i])
		if helpAt > i {
			next += sep + width[helpAt] // room kept for the help key still to come
		}
		if next <= room {
			total, shown = grow(width[i]), shown+1
			chosen = append(chosen, b)
		}
	}
	return h.ShortHelpView(chosen)
}
