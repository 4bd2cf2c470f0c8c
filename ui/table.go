package ui

import (
	"cmp"
	"slices"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
)

// Column is a table column. Width is its minimum; Flex columns share what
// the terminal has left.
type Column struct {
	Title string
	Width int
	Flex  bool
	// HideBelow hides the column on terminals narrower than this, so the
	// columns that matter keep their room at 80 columns.
	HideBelow int
	// GivesWay: on a narrow terminal the column shrinks first, down to its
	// Width, before the flex columns (a long name beside the text read).
	GivesWay bool
	// Drop: on a terminal too narrow for every column whole (flex and
	// GivesWay columns at their Width), columns with Drop > 0 are left
	// out, 1 first, then 2..., before a column without one is cut: a name
	// or a state is read whole or not at all. ViewWithDetail shows the
	// cursor row's text of the columns left out.
	Drop int
}

// Cell is one table cell: its text, an optional style (severity colour) and
// an optional sort key (durations and sizes sort by value, not by text).
type Cell struct {
	Text  string
	Style *lipgloss.Style
	Key   string
}

// Row is one table row; ID identifies it across refreshes, so the cursor
// stays on the same object when data changes.
type Row struct {
	ID    string
	Cells []Cell
}

// Table is a scrollable, filterable, sortable table with a cursor.
type Table struct {
	ctx     *Context
	Columns []Column
	rows    []Row // all rows, as set
	visible []Row // filtered and sorted
	cursor  int
	// chosen: the technician moved the cursor onto a row, so it follows
	// that row as data changes. Until then (and after a jump to the top) it
	// stays on the first row: rows arriving above an unchosen row (the
	// newest events) must not push the top of the list out of sight.
	chosen  bool
	offset  int
	filter  string
	sortCol int // -1: the order rows were given in
	sortAsc bool
	// Set by widths: the columns Drop left out, and each column's widest
	// cell (0: all empty).
	dropped []bool
	content []int
	// onScreen: which columns the last drawing showed (nil: not drawn
	// yet, all count); s sorts only by those.
	onScreen []bool
}

// NewTable makes an empty table.
func NewTable(ctx *Context, cols []Column) *Table {
	return &Table{ctx: ctx, Columns: cols, sortCol: -1, sortAsc: true}
}

// SetRows replaces the rows, keeping the cursor on the row the technician
// chose (by ID), or on the first row if they chose none.
func (t *Table) SetRows(rows []Row) {
	selected := t.SelectedID()
	t.rows = rows
	t.refresh(selected)
}

// SetFilter shows only rows whose text contains f (any case).
func (t *Table) SetFilter(f string) {
	selected := t.SelectedID()
	if f == "" && t.filter != "" && selected != "" {
		// A row found by filtering stays under the cursor when the
		// filter is cleared, as if the technician had moved onto it.
		t.chosen = true
	}
	t.filter = strings.ToLower(f)
	t.refresh(selected)
}

// Filter is the current filter.
func (t *Table) Filter() string { return t.filter }

// CycleSort sorts by the next column on screen; after the last, back to
// the natural order. A column hidden at this width is skipped: a sort by
// what the technician cannot see would reorder the rows for no reason
// they could read.
func (t *Table) CycleSort() {
	selected := t.SelectedID()
	for {
		t.sortCol++
		if t.sortCol >= len(t.Columns) {
			t.sortCol = -1
		}
		if t.sortCol < 0 || t.sortCol >= len(t.onScreen) || t.onScreen[t.sortCol] {
			break
		}
	}
	t.refresh(selected)
}

// SortColumn is the column sorted by, or "" for the natural order.
func (t *Table) SortColumn() string {
	if t.sortCol < 0 {
		return ""
	}
	return t.Columns[t.sortCol].Title
}

func (t *Table) refresh(selected string) {
	t.visible = t.visible[:0]
	for _, r := range t.rows {
		if t.filter == "" || t.matches(r) {
			t.visible = append(t.visible, r)
		}
	}
	if t.sortCol >= 0 {
		col := t.sortCol
		slices.SortStableFunc(t.visible, func(a, b Row) int {
			return cmp.Compare(sortKey(a, col), sortKey(b, col))
		})
	}
	if !t.chosen {
		t.cursor, t.offset = 0, 0
		return
	}
	// The chosen row gone (filtered out, or deleted): the cursor keeps its
	// place in the list rather than jumping to the top.
	for i, r := range t.visible {
		if r.ID == selected {
			t.cursor = i
			break
		}
	}
	t.clamp()
}

func sortKey(r Row, col int) string {
	if col >= len(r.Cells) {
		return ""
	}
	if r.Cells[col].Key != "" {
		return r.Cells[col].Key
	}
	return strings.ToLower(r.Cells[col].Text)
}

func (t *Table) matches(r Row) bool {
	for _, c := range r.Cells {
		if strings.Contains(strings.ToLower(c.Text), t.filter) {
			return true
		}
	}
	return false
}

// Len is the number of visible rows.
func (t *Table) Len() int { return len(t.visible) }

// SelectedID is the ID of the row under the cursor, or "".
func (t *Table) SelectedID() string {
	if t.cursor < 0 || t.cursor >= len(t.visible) {
		return ""
	}
	return t.visible[t.cursor].ID
}

// Update moves the cursor for navigation keys; it reports whether the key was one.
func (t *Table) Update(msg tea.KeyMsg, height int) bool {
	k := t.ctx.Keys
	page := max(height-1, 1)
	switch {
	case key.Matches(msg, k.Up):
		t.cursor--
	case key.Matches(msg, k.Down):
		t.cursor++
	case key.Matches(msg, k.PageUp):
		t.cursor -= page
	case key.Matches(msg, k.PageDown):
		t.cursor += page
	case key.Matches(msg, k.Top):
		t.cursor = 0
	case key.Matches(msg, k.Bottom):
		t.cursor = len(t.visible) - 1
	default:
		return false
	}
	t.clamp()
	// Back on the first row (home, or up past it), the cursor follows the
	// top of the list again, as when the screen opened.
	t.chosen = t.cursor > 0
	return true
}

func (t *Table) clamp() {
	t.cursor = max(0, min(t.cursor, len(t.visible)-1))
}

// View renders the table in width x height (header included).
func (t *Table) View(width, height int) string {
	if height < 2 || width < 10 {
		return ""
	}
	return t.render(t.widths(width-t.gutter()), height)
}

// gutter is the columns the cursor mark takes: two when the terminal
// shows no styles.
func (t *Table) gutter() int {
	if t.ctx.Styles.Marked {
		return 2
	}
	return 0
}

// render draws the header and the rows that fit in height at widths.
func (t *Table) render(widths []int, height int) string {
	st := t.ctx.Styles
	gutter := strings.Repeat(" ", t.gutter())
	var b strings.Builder
	b.WriteString(gutter)
	first := true
	for i, c := range t.Columns {
		if widths[i] < 0 {
			continue
		}
		if !first {
			b.WriteString(" ")
		}
		first = false
		title := c.Title
		if i == t.sortCol {
			title += "↑"
		}
		b.WriteString(st.Header.Render(pad(title, widths[i])))
	}
	b.WriteString("\n")
	body := height - 1
	if t.cursor < t.offset {
		t.offset = t.cursor
	}
	if t.cursor >= t.offset+body {
		t.offset = t.cursor - body + 1
	}
	t.offset = max(0, min(t.offset, max(len(t.visible)-body, 0)))
	if len(t.visible) == 0 {
		msg := "(nothing to show)"
		if t.filter != "" {
			msg = "(no match for /" + t.filter + ")"
		}
		b.WriteString(st.Muted.Render(msg))
		return b.String()
	}
	// A column of states is a few texts in a few colours: each drawn once.
	var styledCells renderMemo
	for i := t.offset; i < len(t.visible) && i < t.offset+body; i++ {
		r := t.visible[i]
		selected := i == t.cursor
		var line strings.Builder
		switch {
		case st.Marked && selected:
			line.WriteString("> ")
		case st.Marked:
			line.WriteString(gutter)
		}
		first := true
		for j := range t.Columns {
			if widths[j] < 0 {
				continue
			}
			if !first {
				if selected {
					line.WriteString(st.Selected.Render(" "))
				} else {
					line.WriteString(" ")
				}
			}
			first = false
			cell := Cell{}
			if j < len(r.Cells) {
				cell = r.Cells[j]
			}
			text := pad(cell.Text, widths[j])
			// Each cell is styled on its own, the cursor row reversed on
			// top, so severity colours survive the selection.
			switch {
			case cell.Style != nil && selected:
				text = cell.Style.Reverse(true).Render(text)
			case cell.Style != nil:
				text = styledCells.render(cell.Style, text)
			case selected:
				text = st.Selected.Render(text)
			}
			line.WriteString(text)
		}
		b.WriteString(line.String())
		if i < t.offset+body-1 && i < len(t.visible)-1 {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// renderMemo remembers the last few styled texts drawn, by style and text:
// rendering with lipgloss costs far more than a look through a few.
type renderMemo struct {
	entries [8]struct {
		style     *lipgloss.Style
		text, out string
	}
	next int
}

func (m *renderMemo) render(style *lipgloss.Style, text string) string {
	for _, e := range m.entries {
		if e.style == style && e.text == text {
			return e.out
		}
	}
	out := style.Render(text)
	e := &m.entries[m.next%len(m.entries)]
	e.style, e.text, e.out = style, text, out
	m.next++
	return out
}

// widths fits the columns to the width. Each column wants its widest cell
// (or its title) and a space, so a column of short names stays narrow and one of long
// names is not cut while room is left. What remains goes to the flex
// columns (free text: messages, notes). Too narrow, columns give way in
// this order: those marked GivesWay, the flex columns, then the others
// from the right, the name column (the first) last, each down to its
// minimum Width; below that the last columns are cut.
func (t *Table) widths(width int) []int {
	w := make([]int, len(t.Columns))
	defer func() {
		t.onScreen = t.onScreen[:0]
		for _, x := range w {
			t.onScreen = append(t.onScreen, x > 0)
		}
	}()
	floor := make([]int, len(t.Columns))
	t.dropped, t.content = t.dropped[:0], t.content[:0]
	for i, c := range t.Columns {
		t.dropped = append(t.dropped, false)
		t.content = append(t.content, 0)
		if width < c.HideBelow {
			w[i] = -1
			continue
		}
		for _, r := range t.rows {
			if i < len(r.Cells) {
				t.content[i] = max(t.content[i], textWidth(r.Cells[i].Text))
			}
		}
		w[i] = max(textWidth(c.Title), t.content[i])
		w[i]++ // with the separator, two spaces between columns
		floor[i] = min(w[i], max(c.Width, textWidth(c.Title)+1))
	}
	t.drop(w, floor, width)
	var flex []int
	for i, c := range t.Columns {
		if c.Flex && w[i] >= 0 {
			flex = append(flex, i)
		}
	}
	if extra := width - shownWidth(w); extra > 0 && len(flex) > 0 {
		for _, i := range flex {
			w[i] += extra / len(flex)
		}
		return w
	}
	var order []int
	for i, c := range t.Columns {
		if c.GivesWay {
			order = append(order, i)
		}
	}
	order = append(order, flex...)
	for i := len(w) - 1; i >= 1; i-- {
		if !t.Columns[i].Flex && !t.Columns[i].GivesWay {
			order = append(order, i)
		}
	}
	order = append(order, 0)
	for _, i := range order {
		if over := shownWidth(w) - width; over > 0 && w[i] > floor[i] {
			w[i] -= min(over, w[i]-floor[i])
		}
	}
	// Still too narrow: cut from the right.
	for i := len(w) - 1; i >= 0 && shownWidth(w) > width; i-- {
		if w[i] >= 0 {
			w[i] = max(w[i]-(shownWidth(w)-width), 0)
		}
	}
	return w
}

// drop leaves out the columns with a Drop, lowest first (the rightmost of
// equals), while the others do not fit whole: flex and GivesWay columns
// count at their floor, since they shrink before anything is cut.
func (t *Table) drop(w, floor []int, width int) {
	for {
		need, shown := 0, 0
		for i, c := range t.Columns {
			if w[i] < 0 {
				continue
			}
			shown++
			if c.Flex || c.GivesWay {
				need += floor[i]
			} else {
				need += w[i]
			}
		}
		if need+max(shown-1, 0) <= width {
			return
		}
		victim := -1
		for i, c := range t.Columns {
			if w[i] >= 0 && c.Drop > 0 && (victim < 0 || c.Drop <= t.Columns[victim].Drop) {
				victim = i
			}
		}
		if victim < 0 {
			return
		}
		w[victim] = -1
		t.dropped[victim] = true
	}
}

// shownWidth is the width of the shown columns with their separators.
func shownWidth(w []int) int {
	total, shown := 0, 0
	for _, x := range w {
		if x >= 0 {
			total += x
			shown++
		}
	}
	return total + max(shown-1, 0)
}

// pad fits s into exactly w cells, truncating with an ellipsis.
func pad(s string, w int) string {
	if w <= 0 {
		return ""
	}
	sw := textWidth(s)
	if sw > w {
		return ansi.Truncate(s, w, "…")
	}
	if sw == w {
		return s
	}
	return s + strings.Repeat(" ", w-sw)
}

// textWidth is the cells s takes: its length for printable ASCII (most of
// what a table holds: names, states, numbers), else what ansi measures.
func textWidth(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return ansi.StringWidth(s)
		}
	}
	return len(s)
}

// Fit truncates or pads a line to exactly w cells.
func Fit(s string, w int) string { return pad(s, w) }

// Wrap breaks a long unbroken line (a join bundle) into pieces of at most w
// characters, where Fit would cut it.
func Wrap(s string, w int) []string {
	var out []string
	for w > 0 && len(s) > w {
		out = append(out, s[:w])
		s = s[w:]
	}
	return append(out, s)
}

// Clip cuts s to at most h lines of at most w cells each: a view drawn
// into a terminal of that size, nothing wrapped onto the next line.
func Clip(s string, w, h int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > h {
		lines = lines[:max(h, 0)]
	}
	for i, l := range lines {
		if ansi.StringWidth(l) > w {
			lines[i] = ansi.Truncate(l, w, "")
		}
	}
	return strings.Join(lines, "\n")
}
