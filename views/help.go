package views

import (
	"fmt"
	"slices"
	"strings"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/charmbracelet/x/ansi"

	"github.com/sitecon/sitecon/ui"
)

// screenHelp is what a screen tells the technician and the keys it
// answers: what it shows, what it can do to the cluster (first in the help
// and the footer), the commands that go with those actions, and its own
// keys.
type screenHelp struct {
	about    string
	actions  []action
	commands [][2]string // a ":command" typed on this screen, and what it does
	keys     []binding
	// logs is what l shows the log of now (false: nothing selected);
	// logsOf names it in the help ("selected app"). nil: no logs here.
	logs   func() (logRequest, bool)
	logsOf string
}

// helpSection is one titled block of the help screen.
type helpSection struct {
	title string
	lines [][2]string // key, description
}

// sections are the help of the current screen, made of the keys it
// answers now (App.bindings): its actions first, then its own keys,
// moving around, and the keys that work everywhere.
func (a *App) sections() []helpSection {
	lines := map[section][][2]string{}
	for _, b := range a.bindings() {
		lines[b.section] = append(lines[b.section], [2]string{b.key.Help().Key, b.long})
	}
	if len(lines[sectionActions]) > 0 && !a.ctx.ReadOnly {
		lines[sectionActions] = append(lines[sectionActions], a.screens[a.current].help().commands...)
	}
	var out []helpSection
	for _, s := range []struct {
		section
		title string
	}{{sectionActions, "Actions on the " + a.Screen() + " screen"}, {sectionScreen, "On this screen"}, {sectionMove, "Move"}, {sectionEverywhere, "Everywhere"}} {
		if len(lines[s.section]) > 0 {
			out = append(out, helpSection{s.title, lines[s.section]})
		}
	}
	return out
}

// fullHelp draws the help of the current screen (helpLines), from line
// helpTop when the height does not hold it all, with a line that says
// where it is and how to scroll.
func (a *App) fullHelp(w, h int) string {
	st := a.ctx.Styles
	lines := a.helpLines(w)
	foot := st.Muted.Render("any key to go back")
	if room := max(h-2, 1); len(lines) > room {
		top := a.helpTopIn(len(lines), room)
		shown := room - 1
		where := fmt.Sprintf("lines %d-%d of %d: j/k ↓/↑ pgdn/pgup space to scroll", top+1, min(top+shown, len(lines)), len(lines))
		lines = append(slices.Clone(lines[top:min(top+shown, len(lines))]), st.Muted.Render("… "+where))
		foot = st.Muted.Render("any other key to go back")
	}
	lines = append(lines, "", foot)
	for i, l := range lines {
		lines[i] = ui.Fit(l, w)
	}
	return strings.Join(lines, "\n")
}

// helpTopIn is helpTop kept within a help of n lines shown room-1 at a
// time (the last line says where it is).
func (a *App) helpTopIn(n, room int) int {
	return max(min(a.helpTop, n-(room-1)), 0)
}

// scrollHelp moves the help by by lines (clamped), for the keys that
// scroll it; false for any other key, which leaves it.
func (a *App) scrollHelp(msg tea.KeyMsg) bool {
	w, h := a.ctx.Width, a.ctx.Height
	room := max(h-2, 1)
	n := len(a.helpLines(w))
	page := max(room-2, 1)
	by := 0
	switch msg.String() {
	case "j", "down":
		by = 1
	case "k", "up":
		by = -1
	case "pgdown", " ", "f", "ctrl+f":
		by = page
	case "pgup", "b", "ctrl+b":
		by = -page
	case "g", "home":
		by = -n
	case "G", "end":
		by = n
	default:
		return false
	}
	if n <= room {
		return false // all of it shown: any key goes back, as the help says
	}
	a.helpTop = a.helpTopIn(n, room)
	a.helpTop = max(min(a.helpTop+by, n-(room-1)), 0)
	return true
}

// helpLines are the help of the current screen: what it shows, its
// actions full width (their descriptions wrapped), then the other
// sections side by side in as many columns as the width holds.
func (a *App) helpLines(w int) []string {
	st := a.ctx.Styles
	about, title := a.screens[a.current].help().about, a.Screen()+" screen"
	if a.logs != nil {
		about, title = logsAbout, "logs"
	}
	lines := []string{st.Title.Render("sitecon — " + title)}
	// wrapWords, not ansi.Wordwrap: that breaks at hyphens (node-b's)
	// and may leave a line a cell too wide, which the frame then cuts.
	if about != "" {
		lines = append(lines, wrapWords(about, w)...)
	}
	if a.hint != "" {
		for _, l := range wrapWords(ui.Clean(a.hint), w) {
			lines = append(lines, st.Warn.Render(l))
		}
	}
	sections := a.sections()
	keyWidth := func(s helpSection) int {
		kw := 0
		for _, l := range s.lines {
			kw = max(kw, ansi.StringWidth(l[0]))
		}
		return kw
	}
	if len(sections) > 0 && strings.HasPrefix(sections[0].title, "Actions") {
		s := sections[0]
		sections = sections[1:]
		kw := keyWidth(s)
		lines = append(lines, "", st.Section.Render(s.title))
		for _, l := range s.lines {
			desc := wrapWords(l[1], w-kw-2)
			lines = append(lines, st.Key.Render(ui.Fit(l[0], kw))+"  "+desc[0])
			for _, more := range desc[1:] {
				lines = append(lines, strings.Repeat(" ", kw+2)+more)
			}
		}
	}
	// The other sections as blocks, side by side, as many to a row as the
	// width holds.
	type block struct {
		lines []string
		width int
	}
	var blocks []block
	for _, s := range sections {
		kw := keyWidth(s)
		b := block{lines: []string{st.Section.Render(s.title)}}
		for _, l := range s.lines {
			b.lines = append(b.lines, st.Key.Render(ui.Fit(l[0], kw))+"  "+l[1])
		}
		for _, l := range b.lines {
			b.width = min(max(b.width, ansi.StringWidth(l)), w)
		}
		blocks = append(blocks, b)
	}
	const gap = 3
	for len(blocks) > 0 {
		n, used := 1, blocks[0].width
		for n < len(blocks) && used+gap+blocks[n].width <= w {
			used += gap + blocks[n].width
			n++
		}
		row := blocks[:n]
		blocks = blocks[n:]
		height := 0
		for _, b := range row {
			height = max(height, len(b.lines))
		}
		lines = append(lines, "")
		for i := range height {
			var parts []string
			for _, b := range row {
				cell := ""
				if i < len(b.lines) {
					cell = b.lines[i]
				}
				parts = append(parts, ui.Fit(cell, b.width))
			}
			lines = append(lines, strings.TrimRight(strings.Join(parts, strings.Repeat(" ", gap)), " "))
		}
	}
	return lines
}
