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

// tableScreen is a screen that is one table built from the frame.
type tableScreen struct {
	ctx   *ui.Context
	t     *ui.Table
	build func(f *Frame, now time.Time) []ui.Row
	name  string
	about screenHelp
}

func (s *tableScreen) setFrame(f *Frame, now time.Time) { s.t.SetRows(s.build(f, now)) }
func (s *tableScreen) view(w, h int) string             { return s.t.ViewWithDetail(w, h) }
func (s *tableScreen) table() *ui.Table                 { return s.t }
func (s *tableScreen) title() string                    { return s.name }
func (s *tableScreen) help() screenHelp                 { return s.about }
