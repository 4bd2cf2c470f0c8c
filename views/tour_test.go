package views

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/sitecon/sitecon/keymap"
	"github.com/sitecon/sitecon/ui"
)

// The tour: on every screen, on every row the sample site has (VM and
// container apps, pinned and auto, a lost node's rows, a namespace's
// pods), every key of the keyboard is pressed on a fresh console, at
// 80x24 and 120x36, in colour and without. No frame may be wider or
// taller than the terminal, none may show an error of the console's own
// (a panic recovered, a row it cannot find), and the footer's key line is
// never cut mid-key.
func TestTourEveryKeyOnEveryRow(t *testing.T) {
	type mode struct {
		w, h    int
		profile termenv.Profile
	}
	modes := []mode{{80, 24, termenv.Ascii}, {80, 24, termenv.TrueColor}, {120, 36, termenv.Ascii}, {120, 36, termenv.TrueColor}}
	frame := sampleFrame()
	// Rows per screen, and the namespace open on the pods screen.
	screens := []struct {
		name string
		keys []string
	}{}
	for i, name := range keymap.ScreenNames {
		screens = append(screens, struct {
			name string
			keys []string
		}{name, []string{fmt.Sprint(i + 1)}})
	}
	screens = append(screens, struct {
		name string
		keys []string
	}{"pods of a namespace", []string{"3", "enter"}})
	start := time.Now()
	frames := 0
	for _, m := range modes {
		ctx := func() *ui.Context {
			r := lipgloss.NewRenderer(io.Discard)
			r.SetColorProfile(m.profile)
			c := ui.NewContext(r, func() time.Time { return now }, nil)
			c.Width, c.Height = m.w, m.h
			return c
		}
		for _, sc := range screens {
			console := func(row int) *App {
				a := NewApp(ctx())
				a.SetActions(&Actions{})
				a.Update(FrameMsg(frame))
				press(a, sc.keys...)
				for range row {
					press(a, "down")
				}
				return a
			}
			rows := 1
			if tb := console(0).screens[console(0).current].table(); tb != nil {
				rows = max(tb.Len(), 1)
			}
			for row := range rows {
				for _, k := range keyUniverse() {
					if k == "ctrl+c" || k == "q" {
						continue // quits
					}
					a := console(row)
					where := fmt.Sprintf("%dx%d %v, %s row %d, key %q", m.w, m.h, m.profile, sc.name, row, k)
					func() {
						defer func() {
							if r := recover(); r != nil {
								t.Errorf("%s: panic: %v", where, r)
							}
						}()
						a.Update(keyMsg(k))
						checkTourFrame(t, where, a.View(), m.w, m.h)
						frames++
					}()
				}
			}
		}
	}
	t.Logf("%d frames in %s", frames, time.Since(start).Round(time.Millisecond))
}

// checkTourFrame holds one frame to the terminal's size, and looks for
// the console's own errors and a cut key line.
func checkTourFrame(t *testing.T, where, v string, w, h int) {
	t.Helper()
	lines := strings.Split(v, "\n")
	if len(lines) > h {
		t.Errorf("%s: %d lines, the terminal has %d", where, len(lines), h)
	}
	for _, l := range lines {
		if lw := ansi.StringWidth(l); lw > w {
			t.Errorf("%s: a line %d wide: %q", where, lw, ansi.Strip(l))
		}
	}
	plain := ansi.Strip(v)
	for _, bad := range []string{"panic", "no pod or app named", "index out of range", "nil pointer", "%!"} {
		if strings.Contains(plain, bad) {
			t.Errorf("%s: the frame says %q:\n%s", where, bad, plain)
		}
	}
	if foot := strings.TrimRight(ansi.Strip(lines[len(lines)-1]), " "); strings.HasSuffix(foot, "…") && !strings.Contains(foot, ":") {
		t.Errorf("%s: the key line is cut: %q", where, foot)
	}
}
