// Package ui is what every console screen stands on: the shared context
// (size, styles, keys, clock, logger), the theme, and reusable widgets. It
// knows no screen.
package ui

import (
	"log/slog"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/sitecon/sitecon/keymap"
)

// Context is shared by every component. The root model owns it and sets the
// size once per resize; components read it and never keep their own copy.
type Context struct {
	Width, Height int
	Styles        Styles
	Keys          keymap.KeyMap
	// Now is the clock: tests fix it so frames are reproducible.
	Now func() time.Time
	Log *slog.Logger
	// ReadOnly hides every action.
	ReadOnly bool
}

// NewContext builds a context rendering with r (lipgloss.DefaultRenderer()
// for the terminal; tests pass one with a fixed colour profile).
func NewContext(r *lipgloss.Renderer, now func() time.Time, log *slog.Logger) *Context {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Context{Styles: NewStyles(r), Keys: keymap.Default(), Now: now, Log: log}
}

// Styles is the console's whole look, built once from the theme. Views use
// these and never create styles of their own.
type Styles struct {
	Title, Tab, ActiveTab, Header, Selected lipgloss.Style
	OK, Warn, Bad, Muted, Badge, Footer     lipgloss.Style
	Key, Section                            lipgloss.Style
	// Match marks the text a filter found (the logs view).
	Match lipgloss.Style
	// Marked: the terminal shows no styles (NO_COLOR, a dumb terminal), so
	// the cursor row and the current tab carry text marks instead of
	// reverse video, which would vanish with the colours.
	Marked bool
}

// The palette uses the 16 ANSI colours only: the device's own console
// (16 colours) and any SSH terminal show them, and NO_COLOR drops them.
const (
	colRed    = lipgloss.Color("9")
	colGreen  = lipgloss.Color("10")
	colYellow = lipgloss.Color("11")
	colBlue   = lipgloss.Color("12")
	colCyan   = lipgloss.Color("14")
	colGray   = lipgloss.Color("8")
	colWhite  = lipgloss.Color("15")
)

// NewStyles builds the styles for a renderer.
func NewStyles(r *lipgloss.Renderer) Styles {
	s := r.NewStyle
	return Styles{
		Title:     s().Bold(true).Foreground(colCyan),
		Tab:       s().Foreground(colGray),
		ActiveTab: s().Bold(true).Reverse(true),
		Header:    s().Bold(true).Underline(true),
		Selected:  s().Reverse(true),
		OK:        s().Foreground(colGreen),
		Warn:      s().Foreground(colYellow),
		Bad:       s().Foreground(colRed).Bold(true),
		Muted:     s().Foreground(colGray),
		Badge:     s().Bold(true).Foreground(colWhite).Background(colRed),
		Footer:    s().Foreground(colGray),
		Key:       s().Bold(true).Foreground(colBlue),
		Section:   s().Bold(true),
		Match:     s().Reverse(true).Foreground(colYellow),
		Marked:    r.ColorProfile() == termenv.Ascii,
	}
}
