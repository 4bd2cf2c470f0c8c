package views

import (
	"context"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/safety"
)

// docs/DESIGN.md, "A human confirms": a dialog is confirmed only by a key that
// arrived after it was drawn. These tests drive the console's Update with
// key messages as bubbletea delivers them: runes read together come as one
// message, a bracketed paste as one message marked Paste. Time moves on the
// console's own clock, never by sleeping.

// advance moves the console's clock on by d.
func advance(a *App, d time.Duration) {
	t := a.ctx.Now().Add(d)
	a.ctx.Now = func() time.Time { return t }
}

// readTime is more than a prompt's hold (ui.AnswerDelay): the time a
// human takes to see a dialog before answering it.
const readTime = 400 * time.Millisecond

func runes(s string) tea.KeyMsg { return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)} }

func paste(s string) tea.KeyMsg { return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s), Paste: true} }

var enter = tea.KeyMsg{Type: tea.KeyEnter}

// actionApp is the console on the nodes screen, able to act through a
// snapshot of an address where nothing listens: dialogs open from the
// frame's data. The tests put a stub in place of each action they expect to
// start (stub), so nothing tries to reach a cluster.
func actionApp(t *testing.T) *App {
	t.Helper()
	snap, err := kube.NewSnapshot(&rest.Config{Host: "http://127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := newTestApp(120, 30)
	a.SetActions(&Actions{Snap: snap, Audit: testAudit(t)})
	a.Update(runes("2"))
	// An action the test confirmed runs on after the test's last look and
	// writes its outcome into the audit log's directory: wait for it, or
	// the directory's removal races with the write (registered after
	// testAudit's TempDir, this runs before its removal).
	t.Cleanup(func() {
		if a.dialog == nil || a.dialog.task == nil {
			return
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for a.dialog.task.Next()() != nil {
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the confirmed action did not end within 10 s")
		}
	})
	return a
}

// stub replaces the open dialog's action with one that changes nothing.
func stub(t *testing.T, a *App) {
	t.Helper()
	if a.dialog == nil {
		t.Fatal("no dialog open")
	}
	a.dialog.action.Change = func(context.Context, func(string)) error { return nil }
}

// started reports whether the open dialog's action was confirmed.
func started(a *App) bool {
	return a.dialog != nil && (a.dialog.state == dialogRunning || a.dialog.task != nil)
}

// "Gcy" read at once: G goes to the last node, c opens the cordon dialog,
// and y must not confirm it. "Sy": the seed dialog opens and y must not
// answer it (here it is a refusal, the snapshot never synced; end to end
// the seed itself is tried).
func TestBurstDoesNotAnswerTheDialogItOpens(t *testing.T) {
	t.Run("cordon", func(t *testing.T) { burstOpensCordon(t) })
	t.Run("seed", func(t *testing.T) { burstOpensSeed(t) })
}

func burstOpensCordon(t *testing.T) {
	a := actionApp(t)
	// node-a, the first row (the last, node-c, is cordoned already: its
	// c asks nothing).
	a.Update(runes("gcy"))
	if a.dialog == nil || a.dialog.title != "cordon node-a" {
		t.Fatalf("gc did not open the cordon dialog of the first node (message %q)", a.message)
	}
	if started(a) || a.dialog.state != dialogConfirm {
		t.Fatalf("the y of the burst that opened the dialog confirmed it: state %v", a.dialog.state)
	}
	if strings.Contains(a.View(), "y to go on") {
		t.Errorf("the prompt invites a key before it takes one:\n%s", a.View())
	}
	advance(a, readTime)
	if !strings.Contains(a.View(), "Cordon node-a? y to go on") {
		t.Errorf("once read, the prompt says which key answers it:\n%s", a.View())
	}
}

func burstOpensSeed(t *testing.T) {
	a := actionApp(t)
	a.Update(runes("GSy"))
	if a.dialog == nil || !strings.HasPrefix(a.dialog.title, "make ") {
		t.Fatalf("the seed dialog is not open after \"GSy\" (message %q)", a.message)
	}
	if started(a) {
		t.Fatal("the y of the burst confirmed the seed dialog")
	}
}

// A key needs the prompt to have been on screen for a moment: y 100 ms
// after the cordon dialog opened is dropped, y once it has been read
// confirms. A dialog whose prompt changes (the drain's preflight arrives)
// holds keys again from then.
func TestDialogTakesKeysOnlyOnceRead(t *testing.T) {
	a := actionApp(t)
	a.Update(runes("c"))
	stub(t, a)
	advance(a, 100*time.Millisecond)
	a.Update(runes("y"))
	if started(a) {
		t.Fatal("y 100 ms after the dialog opened confirmed it")
	}
	advance(a, readTime)
	a.Update(runes("y"))
	if !started(a) {
		t.Fatalf("y after the dialog was read did not confirm it:\n%s", a.View())
	}

	a = actionApp(t)
	a.Update(runes("d"))
	if a.dialog == nil || a.dialog.state != dialogChecking {
		t.Fatalf("d did not open the drain dialog (message %q)", a.message)
	}
	advance(a, 2*time.Second) // the preflight takes its time
	clean := refusedDrain()
	clean.Refusals, clean.Warnings = nil, nil
	a.Update(preflightMsg{p: clean})
	stub(t, a)
	if a.dialog.state != dialogConfirm {
		t.Fatalf("a clean preflight asks: state %v", a.dialog.state)
	}
	a.Update(runes("y"))
	if started(a) {
		t.Fatal("y right as the preflight's question was drawn confirmed the drain")
	}
	advance(a, readTime)
	a.Update(runes("y"))
	if !started(a) {
		t.Fatalf("y after the question was read did not confirm the drain:\n%s", a.View())
	}
}

// A paste is text, never keys: on a screen it opens nothing, in a dialog it
// answers nothing, and a node's name pasted is not the name typed. Free
// text (the command line) takes it, but only enter runs the command.
func TestPasteAnswersNothing(t *testing.T) {
	a := actionApp(t)
	for _, p := range []string{"c", "Sy", "d", "X"} {
		a.Update(paste(p))
		if a.dialog != nil || a.message != "" {
			t.Fatalf("pasted %q acted: dialog %v, message %q", p, a.dialog != nil, a.message)
		}
	}

	a.Update(runes("c"))
	stub(t, a)
	advance(a, readTime)
	a.Update(paste("y"))
	if started(a) {
		t.Fatal("a pasted y confirmed the cordon")
	}

	a = actionApp(t)
	a.Update(runes("G"))
	a.Update(runes("X"))
	a.Update(preflightMsg{p: safety.Preflight{Node: "node-c", Evict: []string{"default/web-1"}}})
	stub(t, a)
	advance(a, readTime)
	if a.dialog == nil || a.dialog.typed != "node-c" {
		t.Fatalf("remove should ask for the name typed:\n%s", a.View())
	}
	a.Update(paste("node-c"))
	a.Update(enter)
	if started(a) {
		t.Fatal("a pasted name confirmed the removal")
	}
	// Typed, even several runes at once as a slow link delivers them, it
	// does.
	a.Update(runes("node-c"))
	a.Update(enter)
	if !started(a) {
		t.Fatalf("the typed name did not confirm:\n%s", a.View())
	}

	a = actionApp(t)
	a.Update(runes(":"))
	a.Update(paste("volumes\n"))
	if a.Screen() != "nodes" || a.mode != modeCommand {
		t.Fatalf("a pasted newline ran the command: screen %s, mode %v", a.Screen(), a.mode)
	}
	a.Update(enter)
	if a.Screen() != "volumes" {
		t.Fatalf("enter after the paste: screen %s (line %q)", a.Screen(), a.input.Value())
	}
}

// What else a burst reaches: the command line opens a dialog with enter,
// and what follows at once (the name and enter, scripted) must not answer
// it; the formation wizard opened from the command line drops what comes
// right behind it, and takes pasted text in its fields once read.
func TestBurstAfterCommandLine(t *testing.T) {
	a := actionApp(t)
	a.SetActions(&Actions{Snap: a.actions.Snap, Audit: a.actions.Audit, JoinInfo: func(role, name, uuid, ip string) (string, error) {
		return "sitecon form --join sitecon-join.v1.QUJD\n", nil
	}})
	for _, m := range []tea.KeyMsg{runes(":replace"), runes(" "), runes("node-c"), runes(" "), runes("node-d"), runes(" "), runes("0d1c2b3a"), enter} {
		a.Update(m)
	}
	if a.dialog == nil || a.dialog.record.Audit().Action != "replace-node" {
		t.Fatalf(":replace opened no dialog (message %q)", a.message)
	}
	a.Update(preflightMsg{p: safety.Preflight{Node: "node-c", Evict: []string{"default/web-1"}}})
	stub(t, a)
	a.Update(runes("node-c"))
	a.Update(enter)
	if started(a) || a.dialog.input.Value() != "" {
		t.Fatalf("the name and enter scripted behind the command answered the dialog (typed %q)", a.dialog.input.Value())
	}

	w := newUnformedApp(100, 30)
	formed := false
	w.SetActions(&Actions{Audit: testAudit(t)})
	w.SetFormWizard(func() *FormWizard {
		fw := NewFormWizard(w.ctx, []string{"eth1"}, FormInput{ClusterName: "site1", Interface: "eth1", Prefix: "10.244.244.0/28", Servers: "a,b,c"})
		fw.Submit = func(FormInput) (*FormResult, error) { formed = true; return &FormResult{Written: "cluster.json"}, nil }
		return fw
	})
	w.Update(runes(":form"))
	w.Update(enter)
	if w.wizard == nil {
		t.Fatalf(":form did not open the wizard:\n%s", w.View())
	}
	// ctrl+s forms from any field: scripted right behind :form it must not.
	w.Update(tea.KeyMsg{Type: tea.KeyCtrlS})
	if formed {
		t.Fatal("ctrl+s right behind :form formed the cluster")
	}
	advance(w, readTime)
	w.Update(paste("x"))
	if got := w.wizard.Input().ClusterName; got != "site1x" {
		t.Errorf("a form's text field takes pasted text: cluster name %q", got)
	}
	w.Update(tea.KeyMsg{Type: tea.KeyCtrlS})
	if !formed {
		t.Errorf("ctrl+s once the form was read did not form:\n%s", w.View())
	}
}
