package views

import (
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
)

// Each screen's help says what that screen can do, its actions first, and
// fits the terminal: at 80x24 every action key of the nodes screen is
// there with what it does, no line is wider than the screen, and the help
// of a screen without actions does not offer them.
func TestHelpShowsTheScreensActions(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {110, 30}} {
		a := newTestApp(size[0], size[1])
		a.SetActions(&Actions{})
		press(a, "2", "?")
		v := a.View()
		lines := strings.Split(v, "\n")
		if len(lines) > size[1] {
			t.Errorf("%dx%d: the help has %d lines", size[0], size[1], len(lines))
		}
		for _, l := range lines {
			if w := ansi.StringWidth(l); w > size[0] {
				t.Errorf("%dx%d: a help line is %d wide: %q", size[0], size[1], w, l)
			}
		}
		for _, want := range []string{"c ", "cordon", "u ", "uncordon", "d ", "drain", "X ", "remove", "S ", "seed", "a ", "add"} {
			if !strings.Contains(v, want) {
				t.Errorf("%dx%d: the nodes screen's help lacks %q:\n%s", size[0], size[1], want, v)
			}
		}
		if strings.Index(v, "drain") > strings.Index(v, "page down") {
			t.Errorf("%dx%d: the actions should come before navigation:\n%s", size[0], size[1], v)
		}
		press(a, "esc", "3", "?")
		if v := a.View(); strings.Contains(v, "drain") || strings.Contains(v, "migrate") || !strings.Contains(v, "open") {
			t.Errorf("%dx%d: the pods screen's help offers another screen's actions, or lacks its own (enter: open):\n%s", size[0], size[1], v)
		}
	}
}

// The footer names the current screen's actions: d drain on the nodes
// screen, m migrate on the apps screen, neither on the pods screen.
func TestFooterFollowsTheScreen(t *testing.T) {
	a := newTestApp(100, 24)
	a.SetActions(&Actions{})
	footer := func() string { l := strings.Split(a.View(), "\n"); return l[len(l)-1] }
	press(a, "2")
	if f := footer(); !strings.Contains(f, "d drain") || strings.Contains(f, "migrate") {
		t.Errorf("nodes footer: %q", f)
	}
	press(a, "5")
	if f := footer(); !strings.Contains(f, "m migrate") || strings.Contains(f, "drain") {
		t.Errorf("apps footer: %q", f)
	}
	press(a, "3")
	if f := footer(); strings.Contains(f, "drain") || strings.Contains(f, "migrate") {
		t.Errorf("pods footer: %q", f)
	}
}

// Read-only, no action is offered anywhere.
func TestHelpReadOnlyOffersNoActions(t *testing.T) {
	ctx := testContext(80, 24)
	ctx.ReadOnly = true
	a := NewApp(ctx)
	a.Update(FrameMsg(sampleFrame()))
	press(a, "2", "?")
	if v := a.View(); strings.Contains(v, "drain") || strings.Contains(v, "cordon") {
		t.Errorf("read-only help offers actions:\n%s", v)
	}
}
