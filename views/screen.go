package views

import (
	"fmt"
	"strconv"
	"time"

	"github.com/charmbracelet/lipgloss"

	"github.com/sitecon/sitecon/ui"
)

// cell helpers keep severity colouring in one place.
func plain(s string) ui.Cell { return ui.Cell{Text: s} }

// styled points at a style of the context's theme: shared, never copied,
// so a cell costs no allocation for its colour.
func styled(s string, st *lipgloss.Style) ui.Cell { return ui.Cell{Text: s, Style: st} }

// durationKey sorts ages by value: zero-padded seconds.
func durationKey(t, now time.Time) string { return zeroPadded(int64(now.Sub(t).Seconds()), 15) }

func numberKey(n int64) string { return zeroPadded(n, 20) }

// zeroPadded is n in at least width digits, as fmt's %0*d writes it, without
// fmt's cost: a table of a thousand rows makes a key a row.
func zeroPadded(n int64, width int) string {
	if n < 0 || width > 20 {
		return fmt.Sprintf("%0*d", width, n)
	}
	var b [20]byte
	digits := strconv.AppendInt(b[:0], n, 10)
	if len(digits) >= width {
		return string(digits)
	}
	var out [20]byte
	pad := width - len(digits)
	for i := range pad {
		out[i] = '0'
	}
	copy(out[pad:], digits)
	return string(out[:width])
}

// tableScreen is a screen that is one table built from the frame; with a
// detail (views/detail.go), enter opens the row's detail over the table
// and esc comes back.
type tableScreen struct {
	ctx   *ui.Context
	t     *ui.Table
	build func(f *Frame, now time.Time) []ui.Row
	name  string
	about screenHelp
	// detail is the open row's detail, nil when the screen has none.
	detail *detailView
}

func (s *tableScreen) setFrame(f *Frame, now time.Time) {
	s.t.SetRows(s.build(f, now))
	if s.detail != nil {
		s.detail.setFrame(f, now)
	}
}

func (s *tableScreen) view(w, h int) string {
	if s.detail.isOpen() {
		return s.detail.view(w, h)
	}
	return s.t.ViewWithDetail(w, h)
}

// table is the list; a row open in detail has none (no cursor to move,
// no rows to filter or sort).
func (s *tableScreen) table() *ui.Table {
	if s.detail.isOpen() {
		return nil
	}
	return s.t
}

func (s *tableScreen) title() string {
	if s.detail.isOpen() {
		return s.detail.title()
	}
	return s.name
}

func (s *tableScreen) help() screenHelp { return s.about }

// selectedID is the row the screen's actions act on: the one open in
// detail, else the one under the cursor.
func (s *tableScreen) selectedID() string {
	if s.detail.isOpen() {
		return s.detail.open
	}
	return s.t.SelectedID()
}
