package views

import (
	"strings"
	"testing"
)

// words is a frame's text as a technician reads it: its words in order,
// whatever the line breaks and padding.
func words(s string) string { return strings.Join(strings.Fields(s), " ") }

// A dialog wraps its lines, never cuts them: the most important line of a
// refusal is the whole sentence, at 100 columns as at 80. And it speaks
// the console's language: the console has no --force, it asks for the
// node's name.
func TestDialogWrapsAndSpeaksTheConsolesLanguage(t *testing.T) {
	quorum := "draining node-c leaves 2 of the 2 needed: one more failure loses etcd quorum, and the cluster stops taking changes until node-c is back"
	live := "node-c is Ready (the device is alive): removing a live node needs --force and its name typed; to service it, drain it instead"
	for _, w := range []int{80, 100} {
		p := refusedDrain()
		p.Node = "node-c"
		p.Refusals = []string{quorum}
		p.Warnings = []string{live}
		a := drainDialogApp(t, testContext(w, 30), p)
		v := a.View()
		if !strings.Contains(words(v), words("REFUSED "+quorum)) {
			t.Errorf("%d columns: the refusal is cut:\n%s", w, v)
		}
		if strings.Contains(v, "--force") || !strings.Contains(words(v), "removing a live node needs its name typed") {
			t.Errorf("%d columns: the dialog should ask for the name, in the console's words:\n%s", w, v)
		}
	}
}

// A dialog's footer shows the dialog's keys, not the screen's: under a
// drain dialog, c and d do nothing, and the footer must not offer them.
func TestDialogFooterShowsItsOwnKeys(t *testing.T) {
	done := drainDialogApp(t, testContext(120, 30), refusedDrain())
	if f := footerLine(done); strings.Contains(f, "cordon") || strings.Contains(f, "drain") || !strings.Contains(f, "any key close") {
		t.Errorf("a finished dialog's footer: %q", f)
	}
	pinned := refusedDrain()
	pinned.Refusals = nil
	typed := drainDialogApp(t, testContext(120, 30), pinned)
	if f := footerLine(typed); strings.Contains(f, "cordon") || !strings.Contains(f, "enter go on") || !strings.Contains(f, "esc cancel") {
		t.Errorf("a dialog asking for the name: footer %q", f)
	}
	mig := migrateDialogApp(t)
	if f := footerLine(mig); strings.Contains(f, "migrate") || !strings.Contains(f, "↑/↓ choose") {
		t.Errorf("the migrate choice's footer: %q", f)
	}
}
