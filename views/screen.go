package views

import (
	"fmt"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"

	"github.com/sitecon/sitecon/ui"
)

// cell helpers keep severity colouring in one place.
func plain(s string) ui.Cell { return ui.Cell{Text: s} }

// styled points at a style of the context's theme: shared, never copied,
// so a cell costs no allocation for its colour.
func styled(s string, st *lipgloss.Style) ui.Cell { return ui.Cell{Text: s, Style: st} }

// durationKey sorts ages by value: zero-padded seconds.
func durationKey(t, now time.Time) string { return fmt.Sprintf("%015d", int64(now.Sub(t).Seconds())) }

func numberKey(n int64) string { return fmt.Sprintf("%020d", n) }

// tableScreen is a screen that is one table built from the frame.
type tableScreen struct {
	ctx   *ui.Context
	t     *ui.Table
	build func(f *Frame, now time.Time) []ui.Row
	name  string
	about screenHelp
}

func (s *tableScreen) setFrame(f *Frame, now time.Time) { s.t.SetRows(s.build(f, now)) }
func (s *tableScreen) view(w, h int) string             { return s.t.View(w, h) }
func (s *tableScreen) key(msg tea.KeyMsg, h int) bool   { return s.t.Update(msg, h) }
func (s *tableScreen) table() *ui.Table                 { return s.t }
func (s *tableScreen) title() string                    { return s.name }
func (s *tableScreen) help() screenHelp                 { return s.about }
