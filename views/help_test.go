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

// At 80×24, a device's console, the help of the busiest screen does not
// fit: it scrolls (j/k, the arrows, pgdn/pgup, space) so that every line
// a tall terminal shows can be read, says where it is, and any other key
// still leaves it.
func TestHelpScrollsAt80x24(t *testing.T) {
	tall := newTestApp(80, 200)
	tall.SetActions(&Actions{})
	press(tall, "2", "?")
	want := map[string]bool{}
	for _, l := range strings.Split(ansi.Strip(tall.View()), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.Contains(l, "go back") {
			want[l] = true
		}
	}
	a := newTestApp(80, 24)
	a.SetActions(&Actions{})
	press(a, "2", "?")
	seen := map[string]bool{}
	for range 40 {
		v := ansi.Strip(a.View())
		if n := len(strings.Split(v, "\n")); n > 24 {
			t.Fatalf("the help is %d lines at 80x24", n)
		}
		for _, l := range strings.Split(v, "\n") {
			seen[strings.TrimSpace(l)] = true
		}
		press(a, "j")
		if a.Screen() != "nodes" || !a.full {
			t.Fatal("j left the help: it should scroll it")
		}
	}
	for l := range want {
		if !seen[l] {
			t.Errorf("scrolling the help at 80x24 never shows %q", l)
		}
	}
	press(a, "pgup", "pgup", "pgup", "pgup", "pgup")
	if v := ansi.Strip(a.View()); !strings.Contains(v, "sitecon — nodes screen") {
		t.Errorf("pgup back to the top does not show the title:\n%s", v)
	}
	press(a, "x")
	if a.full {
		t.Error("another key should leave the help")
	}
}

// The help wraps what it says (the screen's about, the demo's hint, an
// action's description) within the width, at spaces: the demo's hint at
// 80 columns was broken at node-b's hyphen and its first line cut with an
// ellipsis.
func TestHelpWrapsWithinTheWidthAtSpaces(t *testing.T) {
	const hint = "In another terminal: bin/sitebox fail node-b --dir .sitebox   (and: recover node-b)"
	for _, w := range []int{60, 80, 83, 100} {
		a := newTestApp(w, 200)
		a.SetActions(&Actions{})
		a.SetHint(hint)
		press(a, "2", "?")
		lines := strings.Split(ansi.Strip(a.View()), "\n")
		for _, l := range lines {
			if ansi.StringWidth(l) > w {
				t.Errorf("at %d columns a help line is %d wide: %q", w, ansi.StringWidth(l), l)
			}
			if strings.Contains(l, "…") {
				t.Errorf("at %d columns a help line is cut: %q", w, l)
			}
		}
		whole := false
		for _, l := range lines {
			for _, word := range strings.Fields(l) {
				whole = whole || word == "node-b)"
			}
		}
		if !whole {
			t.Errorf("at %d columns the hint's node-b is broken at its hyphen:\n%s", w, strings.Join(lines, "\n"))
		}
	}
}
