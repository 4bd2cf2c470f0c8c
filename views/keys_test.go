package views

import (
	"context"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube"
)

// footerLine is the last line of the console's frame.
func footerLine(a *App) string { l := strings.Split(a.View(), "\n"); return l[len(l)-1] }

// reacts reports whether msg changed anything a technician sees (the frame,
// the screen, a message) or asked for something done (a command: quit, a
// cursor blink of an input line that opened).
func reacts(a *App, msg tea.KeyMsg) bool {
	before := a.View()
	_, cmd := a.Update(msg)
	return cmd != nil || a.View() != before
}

// keyMsg is the message of one key as bubbletea names it ("enter", "G").
func keyMsg(k string) tea.KeyMsg {
	special := map[string]tea.KeyType{"enter": tea.KeyEnter, "esc": tea.KeyEsc, "tab": tea.KeyTab, "shift+tab": tea.KeyShiftTab,
		"up": tea.KeyUp, "down": tea.KeyDown, "left": tea.KeyLeft, "right": tea.KeyRight, "pgup": tea.KeyPgUp, "pgdown": tea.KeyPgDown,
		"home": tea.KeyHome, "end": tea.KeyEnd, "ctrl+b": tea.KeyCtrlB, "ctrl+f": tea.KeyCtrlF, "ctrl+c": tea.KeyCtrlC,
		"backspace": tea.KeyBackspace, "delete": tea.KeyDelete, "ctrl+s": tea.KeyCtrlS, " ": tea.KeySpace}
	if t, ok := special[k]; ok {
		return tea.KeyMsg{Type: t}
	}
	return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
}

// The footer offers only keys that do something on the screen it is on:
// no filter or sort on the overview, no "esc back" with nothing to go
// back to.
func TestFooterOffersOnlyKeysThatWork(t *testing.T) {
	for screen := range 6 {
		a := newTestApp(160, 48)
		a.SetActions(&Actions{})
		press(a, string(rune('1'+screen)))
		for _, b := range a.shortHelp() {
			if !b.Enabled() {
				continue
			}
			fresh := newTestApp(160, 48)
			fresh.SetActions(&Actions{})
			press(fresh, string(rune('1'+screen)), "down")
			acted := false
			for _, k := range b.Keys() {
				acted = acted || reacts(fresh, keyMsg(k))
			}
			if !acted {
				t.Errorf("the %s screen's footer offers %q (%s), which does nothing there", a.Screen(), b.Help().Key, b.Help().Desc)
			}
		}
	}
}

// A screen's action keys act on that screen only: d on the pods screen is
// no key at all, as its help says.
func TestActionKeysBelongToTheirScreen(t *testing.T) {
	for _, c := range []struct{ screen, key string }{{"3", "d"}, {"1", "c"}, {"4", "m"}, {"2", "m"}, {"5", "X"}} {
		a := newTestApp(100, 24)
		a.SetActions(&Actions{})
		press(a, c.screen)
		if reacts(a, keyMsg(c.key)) {
			t.Errorf("%s on the %s screen, which does not list it, did something:\n%s", c.key, a.Screen(), footerLine(a))
		}
	}
}

// Esc clears an applied filter, as the README says.
func TestEscClearsTheFilter(t *testing.T) {
	a := newTestApp(100, 24)
	press(a, "2", "/", "n", "o", "d", "e", "-", "c", "enter")
	if tbl := a.screens[1].table(); tbl.Len() != 1 || !strings.Contains(footerLine(a), "filter /node-c") {
		t.Fatalf("the filter was not applied: %d rows, footer %q", tbl.Len(), footerLine(a))
	}
	press(a, "esc")
	if tbl := a.screens[1].table(); tbl.Filter() != "" || tbl.Len() != 3 || strings.Contains(footerLine(a), "filter /") {
		t.Fatalf("esc left the filter %q applied: %d rows, footer %q", tbl.Filter(), tbl.Len(), footerLine(a))
	}
}

// helpKeyLines are the key lines of the help on screen: key and what it
// does, as the help draws them.
func helpKeyLines(a *App) []string {
	var out []string
	for _, s := range a.sections() {
		for _, l := range s.lines {
			out = append(out, l[0]+"  "+l[1])
		}
	}
	return out
}

// keyUniverse is every key a technician could press that the console
// might bind: the printable characters and the named keys.
func keyUniverse() []string {
	keys := []string{"enter", "esc", "tab", "shift+tab", "up", "down", "left", "right", "pgup", "pgdown", "home", "end",
		"ctrl+b", "ctrl+f", "ctrl+c", "ctrl+s", "backspace", "delete", " "}
	for r := '!'; r <= '~'; r++ {
		keys = append(keys, string(r))
	}
	return keys
}

// `?` on every screen lists exactly the keys that screen handles: the
// help and the key handling both come from the screen's bindings, and
// this holds them to it from the outside. On each screen and in each of
// its states (a row chosen mid-list, a filter applied, a namespace or an
// event open), every key of the keyboard is pressed on a fresh console:
// a key that does something is one the help lists, a key the help lists
// does something, and every listed binding is a line of the help drawn.
func TestHelpListsExactlyTheKeysThatAct(t *testing.T) {
	frame := sampleFrame()
	// Three rows or more on every table, the cursor in the middle: every
	// move then moves.
	frame.Status.Volumes = append(frame.Status.Volumes, kube.VolumeStatus{Name: "vol-extra", State: "detached", Robustness: "unknown", Since: now.Add(-time.Hour)})
	states := []struct {
		name string
		keys []string
		// doctor: the console has a doctor, which ran once.
		doctor bool
	}{
		{"overview", []string{"1"}, false},
		{"nodes", []string{"2", "down"}, false},
		{"nodes filtered", []string{"2", "/", "n", "o", "d", "e", "enter", "down"}, false},
		{"pods", []string{"3", "down"}, false},
		{"pods of a namespace", []string{"3", "enter", "down"}, false},
		{"volumes", []string{"4", "down"}, false},
		{"apps", []string{"5", "down"}, false},
		{"events", []string{"6", "down"}, false},
		{"an event open", []string{"6", "down", "enter"}, false},
		{"a pod open", []string{"3", "enter", "down", "enter"}, false},
		{"doctor without one", []string{"7"}, false},
		{"doctor", []string{"7", "down"}, true},
		{"a finding open", []string{"7", "down", "enter"}, true},
	}
	for _, st := range states {
		console := func() *App {
			a := NewApp(testContext(120, 40))
			a.SetActions(&Actions{})
			a.Update(FrameMsg(frame))
			if st.doctor {
				a.SetDoctor(context.Background(), func(context.Context) doctor.Report { return doctorReport() })
				runCmd(a, press(a, "7"))
			}
			press(a, st.keys...)
			return a
		}
		a := console()
		listed := map[string]bool{}
		for _, b := range a.bindings() {
			for _, k := range b.key.Keys() {
				listed[k] = true
			}
		}
		for _, k := range keyUniverse() {
			if acted := reacts(console(), keyMsg(k)); acted != listed[k] {
				t.Errorf("%s: key %q acts=%v but the help lists it=%v", st.name, k, acted, listed[k])
			}
		}
		drawn := map[string]bool{}
		for _, l := range helpKeyLines(a) {
			drawn[l] = true
		}
		for _, b := range a.bindings() {
			if line := b.key.Help().Key + "  " + b.long; !drawn[line] {
				t.Errorf("%s: the help lacks %q", st.name, line)
			}
		}
		press(a, "?")
		v := a.View()
		for l := range drawn {
			parts := strings.SplitN(l, "  ", 2)
			if !strings.Contains(v, parts[1]) {
				t.Errorf("%s: the help drawn lacks %q:\n%s", st.name, l, v)
			}
		}
	}
}
