package ui

import (
	"strings"

	"github.com/charmbracelet/x/ansi"
)

// Elided is one cell of the cursor row that the table does not show
// whole at its width: its column was dropped or the text is cut.
type Elided struct {
	Title, Text string
}

// ViewWithDetail is View with, under the rows, the cursor row's cells the
// width leaves out or cuts (a Drop column, a long text), each after its
// column's title: on a narrow terminal no text the technician needs is
// out of reach. The lines it takes follow from the rows, not the cursor,
// so the rows stay put as the cursor moves; at most 3.
func (t *Table) ViewWithDetail(width, height int) string {
	if height < 2 || width < 10 {
		return ""
	}
	inner := width - t.gutter()
	widths := t.widths(inner)
	lines := min(t.detailLines(widths, inner), 3, max(height-3, 0))
	if lines == 0 {
		return t.render(widths, height)
	}
	table := t.render(widths, height-lines)
	if n := strings.Count(table, "\n") + 1; n < height-lines {
		table += strings.Repeat("\n", height-lines-n)
	}
	return table + "\n" + t.detail(widths, inner, lines)
}

// detailLines is how many lines the longest detail of any row would take
// at width inner: the columns cut or left out in some row, each at its
// widest cell.
func (t *Table) detailLines(widths []int, inner int) int {
	total := 0
	for i, c := range t.Columns {
		if t.content[i] == 0 || !(t.dropped[i] || widths[i] >= 0 && t.content[i] > widths[i]) {
			continue
		}
		if total > 0 {
			total += 2
		}
		total += textWidth(c.Title) + 1 + t.content[i]
	}
	return (total + inner - 1) / inner
}

// detailOf is the cursor row's cells that widths leave out or cut.
func (t *Table) detailOf(widths []int) []Elided {
	if t.cursor < 0 || t.cursor >= len(t.visible) {
		return nil
	}
	var out []Elided
	for i, cell := range t.visible[t.cursor].Cells {
		if i >= len(t.Columns) || cell.Text == "" {
			continue
		}
		if t.dropped[i] || widths[i] >= 0 && textWidth(cell.Text) > widths[i] {
			out = append(out, Elided{Title: t.Columns[i].Title, Text: cell.Text})
		}
	}
	return out
}

// detail writes the cursor row's elided cells in at most lines lines of
// inner cells, two spaces between cells, broken only at spaces (a node's
// name is never split); what does not fit ends in "…".
func (t *Table) detail(widths []int, inner, lines int) string {
	st := t.ctx.Styles
	var out []string
	var line strings.Builder
	lineWidth := 0
	put := func(word string, gap int) {
		ww := textWidth(word)
		if lineWidth > 0 && lineWidth+gap+ww > inner {
			out = append(out, line.String())
			line.Reset()
			lineWidth = 0
		}
		if lineWidth > 0 {
			line.WriteString(strings.Repeat(" ", gap))
			lineWidth += gap
		}
		line.WriteString(word)
		lineWidth += ww
	}
	for _, e := range t.detailOf(widths) {
		put(st.Muted.Render(e.Title), 2)
		for _, word := range strings.Fields(e.Text) {
			put(word, 1)
		}
	}
	if lineWidth > 0 {
		out = append(out, line.String())
	}
	if len(out) > lines {
		out = out[:lines]
		out[lines-1] = ansi.Truncate(out[lines-1]+" …", inner, "…")
	}
	gutter := strings.Repeat(" ", t.gutter())
	for i := range out {
		out[i] = gutter + ansi.Truncate(out[i], inner, "…")
	}
	return strings.Join(out, "\n")
}
