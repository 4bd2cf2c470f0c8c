package views

import (
	"fmt"
	"slices"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
)

// binding is one key the console answers on a screen, declared once: the
// key dispatch, the help (?) and the footer all read the current screen's
// list (App.bindings), so the help lists exactly the keys that act there,
// and a key joins a screen by one entry in that screen's file.
type binding struct {
	key key.Binding
	// long is what the help says the key does, in full.
	long    string
	section section
	// footer orders the footer's words (footerNone: not in the footer).
	footer footerRank
	// applies says whether the key does something now (nil: whenever its
	// binding is enabled); a key that does not apply is neither taken nor
	// offered.
	applies func() bool
	run     func(msg tea.KeyMsg) tea.Cmd
}

// section is the block of the help a key is listed in.
type section int

const (
	sectionActions section = iota
	sectionScreen
	sectionMove
	sectionEverywhere
)

// footerRank places a key in the footer: the screen's actions first (they
// are what a technician came for), then help and quit, then the rest; the
// end of the line is what a narrow terminal cuts.
type footerRank int

const (
	footerNone footerRank = iota
	footerAction
	footerHelp
	footerQuit
	footerScreen
	footerNext
	footerCommand
	footerFilter
	footerSort
)

// acts says whether b acts now. Read-only, no action does: whatever the
// key map disables, a screen's actions are off by their section.
func (a *App) acts(b *binding) bool {
	if a.ctx.ReadOnly && b.section == sectionActions {
		return false
	}
	return b.key.Enabled() && (b.applies == nil || b.applies())
}

// bindings are the keys the current screen answers now, in the order they
// are matched: the keys that work everywhere, the screen's actions, its
// own keys, its table's. A key an earlier binding takes is not offered
// again by a later one.
func (a *App) bindings() []binding {
	// Drawn with every frame (the footer): the lists are reused, not
	// allocated anew.
	out, taken := a.live[:0], a.taken[:0]
	list := a.keys[a.current]
	if a.logs != nil {
		list = a.logsKeyList
	}
	for _, b := range list {
		if !a.acts(&b) {
			continue
		}
		fresh := false
		for _, k := range b.key.Keys() {
			if !slices.Contains(taken, k) {
				fresh, taken = true, append(taken, k)
			}
		}
		if fresh {
			out = append(out, b)
		}
	}
	a.live, a.taken = out, taken
	return out
}

// dispatch runs the binding msg matches on the current screen; false when
// there is none (the key does nothing here).
func (a *App) dispatch(msg tea.KeyMsg) (bool, tea.Cmd) {
	for _, b := range a.bindings() {
		if key.Matches(msg, b.key) {
			return true, b.run(msg)
		}
	}
	return false, nil
}

// shortHelp is the footer's key list, from the same bindings.
func (a *App) shortHelp() []key.Binding {
	bs := slices.DeleteFunc(a.bindings(), func(b binding) bool { return b.footer == footerNone })
	slices.SortStableFunc(bs, func(x, y binding) int { return int(x.footer) - int(y.footer) })
	out := a.footerKeys[:0]
	for _, b := range bs {
		out = append(out, b.key)
	}
	a.footerKeys = out
	return out
}

// screenKeys is the whole list of screen s, the i-th: built once, with the
// app, its entries' applies deciding at each key what acts.
func (a *App) screenKeys(i int, s screen) []binding {
	k := a.ctx.Keys
	do := func(f func()) func(tea.KeyMsg) tea.Cmd { return func(tea.KeyMsg) tea.Cmd { f(); return nil } }
	// The number keys of the other screens (this one's would do nothing).
	var jump []string
	for j, b := range k.Screens {
		if j != i {
			jump = append(jump, b.Keys()...)
		}
	}
	out := []binding{
		{key: k.ForceQuit, long: "quit from anywhere", section: sectionEverywhere, run: func(tea.KeyMsg) tea.Cmd { return tea.Quit }},
		{key: k.Quit, long: "quit", section: sectionEverywhere, footer: footerQuit, run: func(tea.KeyMsg) tea.Cmd { return tea.Quit }},
		{key: k.Help, long: "this help", section: sectionEverywhere, footer: footerHelp, run: do(func() { a.full = true })},
		{key: k.NextScreen, long: "next screen", section: sectionEverywhere, footer: footerNext,
			run: do(func() { a.show((a.current + 1) % len(a.screens)) })},
		{key: k.PrevScreen, long: "previous screen", section: sectionEverywhere,
			run: do(func() { a.show((a.current + len(a.screens) - 1) % len(a.screens)) })},
		{key: key.NewBinding(key.WithKeys(jump...), key.WithHelp(fmt.Sprintf("1-%d", len(k.Screens)), "jump to a screen")), long: "jump to a screen",
			section: sectionEverywhere, run: func(msg tea.KeyMsg) tea.Cmd {
				for i, b := range k.Screens {
					if key.Matches(msg, b) {
						a.show(i)
					}
				}
				return nil
			}},
		{key: k.Command, long: "command (:vol, :form)", section: sectionEverywhere, footer: footerCommand, run: func(tea.KeyMsg) tea.Cmd {
			a.mode = modeCommand
			a.input.SetValue("")
			return a.input.Focus()
		}},
	}
	h := s.help()
	for _, act := range h.actions {
		out = append(out, a.actionBinding(act, s))
	}
	if h.logs != nil {
		out = append(out, binding{key: k.Logs, long: "logs of the " + h.logsOf, section: sectionScreen, footer: footerScreen,
			applies: func() bool { _, ok := h.logs(); return ok },
			run:     func(tea.KeyMsg) tea.Cmd { req, _ := h.logs(); return a.openLogs(req) }})
	}
	out = append(out, h.keys...)
	hasTable := func() bool { return s.table() != nil }
	filtered := func() bool { return s.table() != nil && s.table().Filter() != "" }
	out = append(out,
		binding{key: k.Filter, long: "filter the rows", section: sectionScreen, footer: footerFilter, applies: hasTable, run: func(tea.KeyMsg) tea.Cmd {
			a.mode = modeFilter
			a.input.SetValue(s.table().Filter())
			return a.input.Focus()
		}},
		binding{key: k.Sort, long: "sort by next column", section: sectionScreen, footer: footerSort, applies: hasTable,
			run: do(func() { s.table().CycleSort() })},
		binding{key: key.NewBinding(key.WithKeys(k.Back.Keys()...), key.WithHelp(k.Back.Help().Key, "clear filter")), long: "clear the filter",
			section: sectionScreen, footer: footerScreen, applies: filtered, run: do(func() { s.table().SetFilter("") })},
	)
	for _, m := range []struct {
		b    key.Binding
		long string
	}{{k.Up, "up"}, {k.Down, "down"}, {k.PageUp, "page up"}, {k.PageDown, "page down"}, {k.Top, "top"}, {k.Bottom, "bottom"}} {
		out = append(out, binding{key: m.b, long: m.long, section: sectionMove, applies: hasTable, run: func(msg tea.KeyMsg) tea.Cmd {
			s.table().Update(msg, a.bodyHeight())
			return nil
		}})
	}
	return out
}
