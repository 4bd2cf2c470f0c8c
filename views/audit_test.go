package views

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/audit/audittest"
)

// docs/DESIGN.md, "A human confirms": every action is recorded before and after, or
// not taken. These tests drive the console with a real audit log in a
// temporary directory.

// A log that can no longer be written (its directory gone: a full or
// read-only disk behaves the same) refuses the action when it is
// confirmed, and the dialog says why; nothing runs.
func TestConsoleRefusesAnActionItCannotRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	l, err := audit.Open(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	a := actionApp(t)
	a.actions.Audit = l
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	a.Update(runes("c"))
	ran := false
	if a.dialog == nil {
		t.Fatalf("c opened no dialog (message %q)", a.message)
	}
	a.dialog.action.Change = func(context.Context, func(string)) error { ran = true; return nil }
	advance(a, readTime)
	run(a, press(a, "y"))
	if ran || started(a) {
		t.Fatal("an action that cannot be recorded was taken")
	}
	if v := a.View(); !strings.Contains(v, "audit log") || !strings.Contains(v, "not done") {
		t.Fatalf("the dialog does not say why nothing was done:\n%s", v)
	}
}

// The intent is on disk while the action runs; the outcome follows it.
func TestConsoleRecordsIntentThenOutcome(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	a := actionApp(t)
	a.actions.Audit = l
	a.Update(runes("c"))
	var during string
	a.dialog.action.Change = func(context.Context, func(string)) error {
		during = audittest.Outcomes(t, path)
		return nil
	}
	advance(a, readTime)
	run(a, press(a, "y"))
	if during != "cordon:intent" {
		t.Fatalf("while the cordon ran the log held %v, want its intent", during)
	}
	if got := audittest.Outcomes(t, path); got != "cordon:intent cordon:done" {
		t.Fatalf("records %s", got)
	}
	recs, _ := audit.Read(path)
	if recs[0].ID == "" || recs[0].ID != recs[1].ID || recs[1].Via != "console" {
		t.Fatalf("intent and outcome not linked, or not marked as the console's: %+v", recs)
	}
}

// :form writes a node's cluster config: it is recorded like any action,
// and refused when it cannot be.
func TestFormFromTheConsoleIsRecorded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	formed := 0
	wizard := func(a *App) func() *FormWizard {
		return func() *FormWizard {
			w := NewFormWizard(a.ctx, []string{"eth1"}, FormInput{ClusterName: "site1", Interface: "eth1", Prefix: "10.244.244.0/28", Servers: "node-a,node-b,node-c"})
			w.Check = func(FormInput) map[string][]string { return nil }
			w.Submit = func(FormInput) (*FormResult, error) {
				formed++
				return &FormResult{Summary: []string{"cluster site1"}, Written: "/persist/sitecon/cluster.json"}, nil
			}
			return w
		}
	}
	a := newUnformedApp(120, 40)
	a.SetActions(&Actions{Audit: l})
	a.SetFormWizard(wizard(a))
	press(a, ":", "f", "o", "r", "m", "enter")
	advance(a, readTime)
	a.Update(tea.KeyMsg{Type: tea.KeyCtrlS})
	if formed != 1 {
		t.Fatalf("ctrl+s did not form:\n%s", a.View())
	}
	if got := audittest.Outcomes(t, path); got != "form:intent form:done" {
		t.Fatalf(":form recorded as %q", got)
	}

	b := newUnformedApp(120, 40)
	b.SetActions(&Actions{Unavailable: "audit log /dev/null: is a character device, not a regular file"})
	b.SetFormWizard(wizard(b))
	press(b, ":", "f", "o", "r", "m", "enter")
	if b.wizard != nil || !strings.Contains(b.message, "audit log") {
		t.Fatalf(":form opened although it cannot be recorded (message %q)", b.message)
	}
}

// testAudit is an audit log of the test's own, for consoles that act.
func testAudit(t *testing.T) *audit.Log {
	t.Helper()
	l, err := audit.Open(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// An action still running when the console ends (the SSH session's
// SIGHUP) is stopped and recorded as interrupted, under its intent's id.
func TestConsoleRecordsAnActionCutOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	a := actionApp(t)
	a.actions.Audit = l
	a.Update(runes("c"))
	stopped := make(chan struct{})
	a.dialog.action.Change = func(ctx context.Context, _ func(string)) error {
		<-ctx.Done()
		close(stopped)
		return ctx.Err()
	}
	advance(a, readTime)
	press(a, "y")
	if !started(a) {
		t.Fatal("y did not start the cordon")
	}
	a.Abandon(errors.New("interrupted by hangup"))
	<-stopped
	recs, _ := audit.Read(path)
	if len(recs) != 2 || recs[1].Outcome != audit.OutcomeInterrupted || recs[1].ID != recs[0].ID || !strings.Contains(recs[1].Error, "hangup") {
		t.Fatalf("records %+v", recs)
	}
}

// sitecon form --wizard alone takes keys through the console's guard: a
// key typed before the form could be read is dropped.
func TestStandaloneWizardIsGuarded(t *testing.T) {
	ctx := testContext(100, 30)
	w := NewFormWizard(ctx, []string{"eth1"}, FormInput{})
	m := Guarded(w)
	m.Init()
	m.Update(runes("x"))
	if got := w.Input().ClusterName; got != "" {
		t.Fatalf("a key before the form was read was typed: %q", got)
	}
	later := ctx.Now().Add(readTime)
	ctx.Now = func() time.Time { return later }
	m.Update(runes("site1"))
	if got := w.Input().ClusterName; got != "site1" {
		t.Fatalf("typed once read: %q", got)
	}
}

// :add hands out the cluster token: recorded as the CLI records it (sitecon
// node add), its intent before the join info is shown and its outcome
// after, under one id.
func TestAddRecordsIntentThenOutcome(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	a := newTestApp(100, 30)
	a.SetActions(&Actions{Audit: l, JoinInfo: func(role, name, uuid, _ string) (string, error) {
		return "sitecon form --join sitecon-join.v1.QUJD\n", nil
	}})
	press(a, ":")
	a.Update(runes("add server node-d 0d1c2b3a"))
	a.Update(enter)
	if a.dialog == nil {
		t.Fatalf(":add showed nothing (message %q)", a.message)
	}
	if got := audittest.Outcomes(t, path); got != "add-node:intent add-node:done" {
		t.Fatalf(":add recorded as %q", got)
	}
}
