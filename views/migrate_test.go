package views

import (
	"strings"
	"testing"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/safety"
	"github.com/sitecon/sitecon/ui"
)

// migrateDialogApp is the console on the apps screen with hmi's migrate
// dialog open, read: node-c may take it, node-a runs it, node-b is lost.
func migrateDialogApp(t *testing.T) *App {
	t.Helper()
	a := newTestApp(100, 30)
	a.SetActions(&Actions{Audit: testAudit(t)})
	press(a, "5")
	app := a.frame.Status.Apps[0]
	app.UUID = "0e1f0000-0000-4000-8000-000000000001"
	a.openMigrateTo(app, func() []safety.MigrateTarget {
		return []safety.MigrateTarget{{Node: "node-a", Why: "the app runs here"}, {Node: "node-b", Why: "not Ready"}, {Node: "node-c", Eligible: true}}
	})
	a.Update(ui.PromptArmedMsg{}) // drawn
	advance(a, readTime)
	return a
}

// m, enter, y must not move an app: nothing is chosen until the
// technician picks a node, and enter before that says so.
func TestMigrateMovesNothingUnchosen(t *testing.T) {
	a := migrateDialogApp(t)
	if v := a.View(); strings.Contains(v, "> node-c") {
		t.Fatalf("a target is chosen before anyone chose it:\n%s", v)
	}
	press(a, "enter")
	if a.dialog == nil || a.dialog.state != dialogChoose || !strings.Contains(a.View(), "choose a node") {
		t.Fatalf("enter with no node chosen went on (state %v):\n%s", a.dialog.state, a.View())
	}
	press(a, "down")
	if v := a.View(); !strings.Contains(v, "> node-c") {
		t.Fatalf("down should choose the one eligible node:\n%s", v)
	}
}

// The confirmation says what happens to the app: it restarts, a VM's
// guest boots again.
func TestMigrateSaysTheAppRestarts(t *testing.T) {
	vm := kube.AppStatus{Name: "hmi", Kind: kube.AppKindVM, Node: "node-a"}
	if got := strings.Join(migrateLines(vm, "node-c"), "\n"); !strings.Contains(got, "hmi is a VM: it is shut down on node-a and restarts on node-c") {
		t.Errorf("a VM's move should say it restarts:\n%s", got)
	}
	ct := kube.AppStatus{Name: "plc-gateway", Kind: kube.AppKindContainer, Node: "node-c"}
	if got := strings.Join(migrateLines(ct, "node-a"), "\n"); !strings.Contains(got, "plc-gateway stops on node-c and starts again on node-a") {
		t.Errorf("a container's move should say it starts again:\n%s", got)
	}
}
