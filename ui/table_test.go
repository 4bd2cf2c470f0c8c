package ui

import (
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
)

func testTable(cols []Column) *Table {
	ctx := NewContext(lipgloss.NewRenderer(nil), nil, nil)
	return NewTable(ctx, cols)
}

func rowOf(id string, cells ...string) Row {
	r := Row{ID: id}
	for _, c := range cells {
		r.Cells = append(r.Cells, Cell{Text: c})
	}
	return r
}

func lines(s string) []string { return strings.Split(ansi.Strip(s), "\n") }

// Widths follow content: a column of short names stays narrow, a long
// volume name is shown whole while the terminal has room, and when it has
// not, the other columns give way before the name column.
func TestTableWidthsFollowContent(t *testing.T) {
	long := "pvc-7f3c2a9e-51d4-4e8b-9c1a-2b6f0d4e8a11"
	tb := testTable([]Column{{Title: "NAME", Width: 16}, {Title: "STATE", Width: 6}, {Title: "NOTE", Width: 5, Flex: true}})
	tb.SetRows([]Row{rowOf("a", "node-a", "attached", "x")})
	header := strings.TrimSpace(lines(tb.View(80, 5))[0])
	if !strings.HasPrefix(header, "NAME    STATE") {
		t.Errorf("a column of short names should be as wide as they are, not its 16-cell minimum: %q", header)
	}
	tb.SetRows([]Row{rowOf("a", long, "attached", "x"), rowOf("b", "vol-1", "detached", "")})
	if v := tb.View(80, 5); !strings.Contains(v, long) {
		t.Errorf("a long name is cut with room left on an 80-column line:\n%s", v)
	}
	// The cursor gutter, the name, STATE at its minimum (6), NOTE at its
	// minimum (5): STATE gives way (attached is cut), the name does not.
	if v := tb.View(2+len(long)+1+6+1+5, 5); !strings.Contains(v, long) || strings.Contains(v, "attached") {
		t.Errorf("the name column should give way last:\n%s", v)
	}
	// Narrower than every minimum: the name is cut, never the line overrun.
	for _, l := range lines(tb.View(20, 5)) {
		if ansi.StringWidth(l) > 20 {
			t.Errorf("a line is wider than the terminal: %q", l)
		}
	}
}

func TestTableHidesNarrowColumns(t *testing.T) {
	tb := testTable([]Column{{Title: "NAME", Width: 6}, {Title: "VERSION", Width: 8, HideBelow: 90}, {Title: "IP", Width: 6}})
	tb.SetRows([]Row{rowOf("a", "node-a", "v1.34.4+k3s1", "10.0.0.1")})
	if v := tb.View(80, 3); strings.Contains(v, "VERSION") || !strings.Contains(v, "10.0.0.1") {
		t.Errorf("at 80 columns VERSION hides and IP stays:\n%s", v)
	}
	if v := tb.View(100, 3); !strings.Contains(v, "v1.34.4+k3s1") {
		t.Errorf("at 100 columns VERSION shows:\n%s", v)
	}
}

// Sorting uses a cell's key when it has one (durations by value, not text),
// and the cursor stays on the row it was on.
func TestTableSortsByKey(t *testing.T) {
	tb := testTable([]Column{{Title: "NAME", Width: 6}, {Title: "SINCE", Width: 5}})
	tb.SetRows([]Row{
		{ID: "a", Cells: []Cell{{Text: "a"}, {Text: "2h", Key: "0000007200"}}},
		{ID: "b", Cells: []Cell{{Text: "b"}, {Text: "10s", Key: "0000000010"}}},
		{ID: "c", Cells: []Cell{{Text: "c"}, {Text: "5m", Key: "0000000300"}}},
	})
	tb.Update(tea.KeyMsg{Type: tea.KeyDown}, 10) // on b
	tb.CycleSort()                               // NAME
	tb.CycleSort()                               // SINCE
	var order []string
	for _, r := range tb.visible {
		order = append(order, r.ID)
	}
	if strings.Join(order, "") != "bca" {
		t.Errorf("sorted by SINCE's keys: %v, want b c a (10s, 5m, 2h)", order)
	}
	if tb.SelectedID() != "b" {
		t.Errorf("the cursor left its row on sorting: %s", tb.SelectedID())
	}
}

// Until the technician moves it, the cursor stays on the first row while
// rows arrive above; once moved, it stays on its row (by ID), and when that
// row goes it keeps its place rather than jumping to the top.
func TestTableCursor(t *testing.T) {
	tb := testTable([]Column{{Title: "NAME", Width: 6}})
	tb.SetRows([]Row{rowOf("old", "old")})
	tb.SetRows([]Row{rowOf("n2", "n2"), rowOf("n1", "n1"), rowOf("old", "old")})
	if tb.SelectedID() != "n2" {
		t.Errorf("unmoved, the cursor should stay on the first row, is on %s", tb.SelectedID())
	}
	tb.Update(tea.KeyMsg{Type: tea.KeyDown}, 10) // n1, chosen
	tb.SetRows([]Row{rowOf("n3", "n3"), rowOf("n2", "n2"), rowOf("n1", "n1"), rowOf("old", "old")})
	if tb.SelectedID() != "n1" {
		t.Errorf("a chosen row keeps the cursor, it moved to %s", tb.SelectedID())
	}
	tb.SetRows([]Row{rowOf("n3", "n3"), rowOf("n2", "n2"), rowOf("old", "old")})
	if tb.SelectedID() != "old" {
		t.Errorf("the chosen row gone, the cursor keeps its place (row 3: old), is on %s", tb.SelectedID())
	}
	tb.Update(tea.KeyMsg{Type: tea.KeyHome}, 10)
	tb.SetRows([]Row{rowOf("n4", "n4"), rowOf("n3", "n3"), rowOf("n2", "n2"), rowOf("old", "old")})
	if tb.SelectedID() != "n4" {
		t.Errorf("home makes the cursor follow the top again, is on %s", tb.SelectedID())
	}
	// A row found with the filter stays under the cursor once it is cleared.
	tb.SetFilter("n2")
	tb.SetFilter("")
	if tb.SelectedID() != "n2" {
		t.Errorf("clearing the filter lost the row found with it, on %s", tb.SelectedID())
	}
}

func TestClip(t *testing.T) {
	got := Clip("abcdef\n\x1b[31mred line\x1b[0m\nthird", 4, 2)
	lines := strings.Split(got, "\n")
	if len(lines) != 2 || lines[0] != "abcd" || ansi.Strip(lines[1]) != "red " {
		t.Errorf("Clip = %q", got)
	}
}

// Too narrow for every column whole, the columns with a Drop give way,
// lowest first, before a name is cut; the cursor row's text of the columns
// left out (and of a cut note) is shown whole under the rows, in lines that
// do not move as the cursor does.
func TestTableDropsColumnsAndShowsTheCursorRow(t *testing.T) {
	tb := testTable([]Column{{Title: "NAME", Width: 6}, {Title: "KIND", Width: 4, Drop: 2}, {Title: "PORT", Width: 4, Drop: 1},
		{Title: "NODE", Width: 6}, {Title: "NOTE", Width: 10, Flex: true}})
	tb.SetRows([]Row{
		rowOf("a", "historian-database", "vm", "5902", "press-line-c", "old VMI terminating on press-line-b"),
		rowOf("b", "plc-gateway-modbus", "container", "", "press-line-a", ""),
	})
	v := tb.ViewWithDetail(50, 8)
	ls := lines(v)
	if len(ls) != 8 {
		t.Fatalf("%d lines, want the 8 given:\n%s", len(ls), v)
	}
	for _, l := range ls {
		if ansi.StringWidth(l) > 50 {
			t.Errorf("a line is wider than the terminal: %q", l)
		}
	}
	if !strings.Contains(ls[0], "NAME") || strings.Contains(ls[0], "PORT") || strings.Contains(ls[0], "KIND") {
		t.Errorf("PORT and KIND should give way, NAME not: %q", ls[0])
	}
	for _, want := range []string{"historian-database", "press-line-c", "plc-gateway-modbus", "press-line-a"} {
		if !strings.Contains(v, want) {
			t.Errorf("%q is cut:\n%s", want, v)
		}
	}
	detail := strings.Join(strings.Fields(strings.Join(ls[len(ls)-2:], " ")), " ")
	if want := "KIND vm PORT 5902 NOTE old VMI terminating on press-line-b"; !strings.Contains(detail, want) {
		t.Errorf("the cursor row's detail should read %q:\n%s", want, v)
	}
	tb.Update(tea.KeyMsg{Type: tea.KeyDown}, 8)
	moved := lines(tb.ViewWithDetail(50, 8))
	if moved[0] != ls[0] || !strings.Contains(moved[2], "plc-gateway-modbus") || !strings.Contains(ls[2], "plc-gateway-modbus") {
		t.Errorf("the rows moved with the cursor:\n%s\n---\n%s", v, strings.Join(moved, "\n"))
	}
	if d := strings.Join(moved[3:], " "); !strings.Contains(d, "KIND container") || strings.Contains(d, "5902") {
		t.Errorf("the detail should follow the cursor to plc-gateway-modbus:\n%s", strings.Join(moved, "\n"))
	}
	// Wide enough for all: no column left out, no detail.
	if wide := tb.ViewWithDetail(160, 8); !strings.Contains(lines(wide)[0], "PORT") || strings.Contains(wide, "KIND container") {
		t.Errorf("at 160 columns everything fits in the rows:\n%s", wide)
	}
}

// s sorts only by the columns on screen: a column hidden at this width
// (HideBelow) or left out (Drop) is skipped, or the technician would sort
// by what they cannot see, with nothing on screen to say so.
func TestTableSortSkipsHiddenColumns(t *testing.T) {
	tb := testTable([]Column{{Title: "NAME", Width: 6}, {Title: "VERSION", Width: 8, HideBelow: 90}, {Title: "IP", Width: 6}, {Title: "NOTE", Width: 30, Drop: 1}})
	tb.SetRows([]Row{rowOf("a", "node-a", "v1.34.4+k3s1", "10.0.0.1", strings.Repeat("n", 30))})
	tb.View(40, 3)
	var seen []string
	for range 4 {
		tb.CycleSort()
		seen = append(seen, tb.SortColumn())
	}
	if got := strings.Join(seen, ","); got != "NAME,IP,,NAME" {
		t.Errorf("at 40 columns s went through %q, want NAME,IP,(natural order),NAME: VERSION and NOTE are not shown", got)
	}
	tb.View(120, 3)
	seen = seen[:0]
	for range 5 {
		tb.CycleSort()
		seen = append(seen, tb.SortColumn())
	}
	if got := strings.Join(seen, ","); got != "VERSION,IP,NOTE,,NAME" {
		t.Errorf("at 120 columns s went through %q, want every column", got)
	}
}
