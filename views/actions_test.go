package views

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/kube/safety"
	"github.com/sitecon/sitecon/ui"
)

func refusedDrain() safety.Preflight {
	return safety.Preflight{Node: "node-b",
		Refusals: []string{"server node-c is NotReady: draining node-b too would leave etcd without quorum",
			"node-b holds the only healthy replica of pvc-3f2a (eve-kube-app/historian-data-9a7e0000)"},
		Warnings: []string{"pinned app historian runs on node-b and will stop until the node is back"},
		Evict:    []string{"eve-kube-app/plc-gateway-5b0f7c1e-7d9f-x2", "kube-system/coredns-d65cb6875-qkdhz"},
		Notes:    []string{"Longhorn node-drain-policy: block-if-contains-last-replica (its PodDisruptionBudgets are honoured: pods are evicted, never deleted)"}}
}

// drainDialogApp is the console on the nodes screen with a drain dialog
// that got the preflight p.
func drainDialogApp(t *testing.T, ctx *ui.Context, p safety.Preflight) *App {
	a := NewApp(ctx)
	a.SetActions(&Actions{Audit: testAudit(t)})
	a.Update(FrameMsg(sampleFrame()))
	press(a, "2")
	a.openDialog("drain "+p.Node, a.actions.recorder().Open(flow.ActionDrain, p.Node))
	a.Update(preflightMsg{p: p})
	// As a technician sees it: long enough on screen to be answered.
	advance(a, readTime)
	return a
}

// run carries out cmd as the program would, each message it brings fed
// back to the console, until nothing is left; a batch's commands run in
// turn. A prompt's redraw (ui.PromptArmedMsg) comes from a real timer, so
// each prompt the commands open costs its hold in real time; whether keys
// are taken is decided by the console's clock, not by this.
func run(a *App, cmd tea.Cmd) {
	queue := []tea.Cmd{cmd}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if c == nil {
			continue
		}
		msg := c()
		if batch, ok := msg.(tea.BatchMsg); ok {
			queue = append(queue, batch...)
			continue
		}
		_, next := a.Update(msg)
		queue = append(queue, next)
	}
}

// The drain dialog: a refusal lists every reason and closes on any key;
// pinned apps need the node name typed, and a wrong name does not start it.
func TestDrainDialog(t *testing.T) {
	a := drainDialogApp(t, testContext(120, 30), refusedDrain())
	v := a.View()
	for _, want := range []string{"REFUSED  server node-c is NotReady", "REFUSED  node-b holds the only healthy replica", "refused: ", "any key to close"} {
		if !strings.Contains(v, want) {
			t.Errorf("refused dialog lacks %q:\n%s", want, v)
		}
	}
	press(a, "x")
	if a.dialog != nil {
		t.Fatal("any key closes a finished dialog")
	}

	pinned := refusedDrain()
	pinned.Refusals = nil
	a = drainDialogApp(t, testContext(120, 30), pinned)
	if !strings.Contains(a.View(), `Type "node-b" and enter`) {
		t.Fatalf("pinned apps need the name typed:\n%s", a.View())
	}
	for _, r := range "node-c" {
		a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
	a.Update(tea.KeyMsg{Type: tea.KeyEnter})
	if a.dialog == nil || a.dialog.state != dialogConfirm || !strings.Contains(a.View(), `type "node-b" exactly`) {
		t.Fatalf("a wrong name started the drain:\n%s", a.View())
	}
	a.Update(tea.KeyMsg{Type: tea.KeyEsc})
	if a.dialog != nil {
		t.Fatal("esc cancels")
	}
}

// The cluster changes between the confirmation and the drain: the re-check
// refuses, and the dialog says so as a refusal (nothing was changed), not as
// a failed drain.
func TestDrainRefusedAtRecheck(t *testing.T) {
	confirmed := refusedDrain()
	confirmed.Refusals, confirmed.Warnings = nil, nil
	a := drainDialogApp(t, testContext(120, 30), confirmed)
	if a.dialog == nil || a.dialog.state != dialogConfirm {
		t.Fatal("a clean preflight asks for confirmation")
	}
	reason := "node-b holds the only healthy replica of pvc-3f2a"
	a.dialog.action.Change = func(context.Context, func(string)) error {
		return &change.PlanChangedError{Node: "node-b", Reasons: []string{reason}}
	}
	run(a, press(a, "y"))
	v := a.View()
	for _, want := range []string{"The cluster changed since you confirmed:", "REFUSED  " + reason, "refused: nothing was changed"} {
		if !strings.Contains(v, want) {
			t.Errorf("dialog lacks %q:\n%s", want, v)
		}
	}
	if a.dialog.record.Audit().Outcome != audit.OutcomeRefused || !slices.Contains(a.dialog.record.Audit().Preflight, reason) {
		t.Fatalf("audit record: %+v", a.dialog.record.Audit())
	}
}

// Read-only: the action keys do nothing and the help does not list them;
// otherwise they say why they cannot act without a cluster connection.
func TestReadOnlyHidesActions(t *testing.T) {
	ctx := testContext(160, 48)
	ctx.ReadOnly = true
	ro := NewApp(ctx)
	ro.Update(FrameMsg(sampleFrame()))
	ro.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("2")})
	ro.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("c")})
	if ro.dialog != nil || ro.message != "" {
		t.Fatalf("read-only console reacted to cordon: dialog=%v message=%q", ro.dialog != nil, ro.message)
	}
	ro.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("?")})
	if v := ro.View(); strings.Contains(v, "cordon") || strings.Contains(v, "drain") || !strings.Contains(v, "quit") {
		t.Fatalf("read-only help lists actions:\n%s", v)
	}

	rw := newTestApp(160, 48)
	rw.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("5")})
	rw.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("?")})
	if v := rw.View(); !strings.Contains(v, "migrate the app") {
		t.Fatalf("the apps screen's help lacks migrate:\n%s", v)
	}
	rw.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("x")})
	rw.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("2")})
	rw.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("?")})
	if v := rw.View(); !strings.Contains(v, "cordon the node") {
		t.Fatalf("the nodes screen's help lacks cordon:\n%s", v)
	}
	rw.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("x")})
	rw.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("d")})
	if rw.dialog != nil || !strings.Contains(rw.View(), "actions need a live cluster connection") {
		t.Fatalf("drain without a cluster: dialog=%v\n%s", rw.dialog != nil, rw.View())
	}
}

// :form opens the formation wizard inside the console of a device in no
// cluster yet; esc comes back.
// Read-only consoles do not offer it.
func TestFormFromConsole(t *testing.T) {
	a := newUnformedApp(100, 30)
	a.SetActions(&Actions{Audit: testAudit(t)})
	a.SetFormWizard(func() *FormWizard { return NewFormWizard(a.ctx, []string{"eth1"}, FormInput{}) })
	for _, r := range ":form" {
		a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
	a.Update(tea.KeyMsg{Type: tea.KeyEnter})
	if v := a.View(); !strings.Contains(v, "form a cluster") || !strings.Contains(v, "Cluster interface") {
		t.Fatalf(":form did not open the wizard:\n%s", v)
	}
	advance(a, readTime)
	a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")}) // typed into the name, not quit
	if a.wizard == nil {
		t.Fatal("q in the wizard's text field left it")
	}
	a.Update(tea.KeyMsg{Type: tea.KeyEsc})
	if a.wizard != nil || !strings.Contains(a.View(), "1 overview") {
		t.Fatalf("esc did not come back to the console:\n%s", a.View())
	}

	ctx := testContext(100, 30)
	ctx.ReadOnly = true
	ro := NewApp(ctx)
	ro.SetFormWizard(func() *FormWizard { return NewFormWizard(ctx, nil, FormInput{}) })
	for _, r := range ":form" {
		ro.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
	ro.Update(tea.KeyMsg{Type: tea.KeyEnter})
	if ro.wizard != nil || !strings.Contains(ro.View(), "read-only") {
		t.Fatalf("read-only console opened the wizard:\n%s", ro.View())
	}
}

// a on the nodes screen opens ":add server "; the join info comes back in a
// dialog, the bundle wrapped to the screen so none of it is cut; a wrong
// role says what is right; read-only has neither key nor command.
func TestAddNodeCommand(t *testing.T) {
	a := newTestApp(80, 24)
	bundle := "sitecon-join.v1." + strings.Repeat("QUJD", 40) + ".0123456789abcdef"
	var asked []string
	a.SetActions(&Actions{Audit: testAudit(t), JoinInfo: func(role, name, uuid, _ string) (string, error) {
		asked = append(asked, role+" "+name+" "+uuid)
		if role != "server" && role != "agent" && role != "edgeworker" {
			return "", fmt.Errorf("the role must be server, agent or edgeworker, not %q", role)
		}
		return "# " + name + " joins site1 as a " + role + " at 10.244.244.4/28\nsitecon form --join " + bundle + "\n", nil
	}})
	press(a, "2", "a")
	if a.mode != modeCommand || a.input.Value() != "add server " {
		t.Fatalf("a: mode %v, line %q", a.mode, a.input.Value())
	}
	for _, r := range "node-d 0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d" {
		a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
	press(a, "enter")
	if a.dialog == nil || !slices.Equal(asked, []string{"server node-d 0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}) {
		t.Fatalf("no join info shown (asked %v, message %q)", asked, a.message)
	}
	v := a.View()
	for _, line := range strings.Split(v, "\n") {
		if len([]rune(line)) > 80 {
			t.Errorf("line wider than the screen: %q", line)
		}
	}
	// What a technician copies off the screen: its breaks and padding go.
	copied := strings.Join(strings.Fields(v), "")
	if !strings.Contains(copied, bundle) || !strings.Contains(v, "join info for node-d (server)") {
		t.Fatalf("the bundle is not all on screen:\n%s", v)
	}
	advance(a, readTime)
	press(a, "x")
	press(a, ":", "a", "d", "d", " ", "h", "u", "b", " ", "n", "o", "d", "e", "-", "e", "enter")
	if a.dialog != nil || !strings.Contains(a.message, `not "hub"`) || !strings.Contains(a.message, "usage: :add") {
		t.Fatalf("a wrong role: dialog %v, message %q", a.dialog != nil, a.message)
	}

	ctx := testContext(80, 24)
	ctx.ReadOnly = true
	ro := NewApp(ctx)
	ro.Update(FrameMsg(sampleFrame()))
	press(ro, "2", "a")
	if ro.mode != modeNormal {
		t.Fatal("read-only: a opened the command line")
	}
	press(ro, ":", "a", "d", "d", " ", "s", "e", "r", "v", "e", "r", " ", "x", " ", "y", "enter")
	if ro.dialog != nil || !strings.Contains(ro.message, "read-only") {
		t.Fatalf("read-only :add: dialog %v, message %q", ro.dialog != nil, ro.message)
	}
}

// :replace drains and removes the old node (its name typed), then shows
// the new node's bundle at the old node's address. The bundle is made first:
// an unknown node or a bundle that cannot be made is refused before any
// drain.
func TestReplaceNodeCommand(t *testing.T) {
	a := newTestApp(80, 24)
	var asked []string
	a.SetActions(&Actions{Audit: testAudit(t), JoinInfo: func(role, name, uuid, ip string) (string, error) {
		asked = append(asked, strings.Join([]string{role, name, uuid, ip}, " "))
		if uuid == "bad" {
			return "", errors.New("no cluster config at /persist/sitecon/cluster.json")
		}
		return "# " + name + " joins site1 as a " + role + " at " + ip + "/28\nsitecon form --join sitecon-join.v1.QUJD\n", nil
	}})
	command := func(line string) tea.Cmd {
		press(a, ":")
		for _, r := range line {
			a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
		}
		_, cmd := a.Update(tea.KeyMsg{Type: tea.KeyEnter})
		return cmd
	}
	// Refused, and recorded as the CLI's node replace records it; nothing
	// is drained.
	refused := func(what, want string) {
		t.Helper()
		v := a.View()
		if a.dialog == nil || a.dialog.state != dialogDone || !strings.Contains(v, want) || !strings.Contains(v, "refused: nothing was changed") {
			t.Fatalf("%s: want a refusal saying %q:\n%s", what, want, v)
		}
		if rec := a.dialog.record.Audit(); rec.Action != "replace-node" || rec.Outcome != audit.OutcomeRefused {
			t.Fatalf("%s: audit record %+v", what, rec)
		}
		advance(a, readTime)
		press(a, "x")
	}
	command("replace node-z node-d 0d1c2b3a")
	refused("unknown node", "node-z: no such node")
	command("replace node-c node-d bad")
	refused("no bundle", "no cluster config")
	command("replace node-c node-d 0d1c2b3a agent")
	if a.dialog == nil || a.dialog.record.Audit().Action != "replace-node" || a.dialog.record.Audit().Target != "node-c → node-d" {
		t.Fatalf("no replace dialog (message %q)", a.message)
	}
	if got := asked[len(asked)-1]; got != "agent node-d 0d1c2b3a 10.244.244.3" {
		t.Fatalf("the bundle must carry node-c's address: asked %q", got)
	}
	a.Update(preflightMsg{p: safety.Preflight{Node: "node-c", Evict: []string{"default/web-1"}}})
	advance(a, readTime)
	if !strings.Contains(a.View(), "then node-c is deleted from the cluster") || a.dialog.typed != "node-c" {
		t.Fatalf("a replace removes the node: the name must be typed:\n%s", a.View())
	}
	ran := false
	a.dialog.action.Change = func(context.Context, func(string)) error { ran = true; return nil }
	for _, r := range "node-c" {
		a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
	_, cmd := a.Update(tea.KeyMsg{Type: tea.KeyEnter})
	run(a, cmd)
	v := a.View()
	if !ran || !strings.Contains(v, "sitecon form --join sitecon-join.v1.QUJD") || !strings.Contains(v, "node-d joins at 10.244.244.3") {
		t.Fatalf("after the removal the bundle is on screen (ran %v):\n%s", ran, v)
	}
}

// A provisioned volume is named by its claim, on the volumes screen and in
// the alerts: its Longhorn name is a generated pvc-<uuid> nobody on site
// recognises.
func TestVolumesNamedByClaim(t *testing.T) {
	f := sampleFrame()
	f.Status.Volumes[0].Name, f.Status.Volumes[0].PVC = "pvc-3f1c2a9e-0b7d-4c1e-9a55-2b1c3d4e5f60", "plc-data-9a7e"
	a := NewApp(testContext(120, 30))
	a.Update(FrameMsg(f))
	press(a, "4")
	if v := a.View(); !strings.Contains(v, "plc-data-9a7e") || strings.Contains(v, "pvc-3f1c") {
		t.Errorf("volumes screen should name the claim:\n%s", v)
	}
	press(a, "1")
	if v := a.View(); !strings.Contains(v, "volume plc-data-9a7e degraded for 7d") {
		t.Errorf("the alert should name the claim:\n%s", v)
	}
}

// The console drains as sitecon drain does: with the flows' options, the
// CLI's flag defaults (it once hard-coded a 10-minute timeout where the
// CLI gives up after 5).
func TestConsoleDrainsWithTheCLIsDefaults(t *testing.T) {
	clean := refusedDrain()
	clean.Refusals, clean.Warnings = nil, nil
	a := drainDialogApp(t, testContext(120, 30), clean)
	if a.dialog == nil || a.dialog.drain == nil {
		t.Fatalf("no drain planned:\n%s", a.View())
	}
	if got := a.dialog.drain.Options; got != flow.DefaultDrainOptions() || got.Timeout != 5*time.Minute {
		t.Fatalf("the console drains with %+v, want the CLI's defaults %+v", got, flow.DefaultDrainOptions())
	}
}

// Read-only, no screen offers or takes an action key: every binding a
// screen declares in its actions is off, whatever the key map's own list
// of action keys holds (a new action joined a screen's list and had to be
// added to that list by hand too).
func TestReadOnlyLeavesNoActionLive(t *testing.T) {
	ctx := testContext(160, 48)
	ctx.ReadOnly = true
	a := NewApp(ctx)
	a.Update(FrameMsg(sampleFrame()))
	for screen, list := range a.keys {
		for _, b := range list {
			if b.section == sectionActions && a.acts(&b) {
				t.Errorf("screen %d: read-only, the action %q (%s) is live", screen, b.key.Help().Key, b.key.Help().Desc)
			}
		}
	}
	for _, b := range a.logsKeyList {
		if b.section == sectionActions && a.acts(&b) {
			t.Errorf("logs view: read-only, the action %q is live", b.key.Help().Key)
		}
	}
}

// :replace before the cluster is read is refused as every action is
// (flow.NotRead), not planned on empty lists ("no such node").
func TestReplaceNodeWaitsForTheClusterRead(t *testing.T) {
	snap, err := kube.NewSnapshot(&rest.Config{Host: "https://127.0.0.1:1"}, nil) // never started: nothing is sent
	if err != nil {
		t.Fatal(err)
	}
	a := NewApp(testContext(120, 30))
	a.SetActions(&Actions{Audit: testAudit(t), Snap: snap, JoinInfo: func(role, name, uuid, ip string) (string, error) {
		t.Fatalf("a join bundle was made for %s before the cluster was read", name)
		return "", nil
	}})
	a.Update(FrameMsg(FrameFromData(kube.Data{}, false, nil, "", now)))
	press(a, ":")
	for _, r := range "replace node-c node-d 0d1c2b3a" {
		a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
	a.Update(tea.KeyMsg{Type: tea.KeyEnter})
	if a.dialog != nil || a.message != flow.NotRead {
		t.Fatalf(":replace before the cluster is read: dialog %v, message %q; want %q", a.dialog != nil, a.message, flow.NotRead)
	}
}

// Issue 38: cordon on a cordoned node asked "Cordon node-c? y to go on".
// It says there is nothing to do, as sitecon cordon does, and asks nothing;
// uncordon of it asks.
func TestCordonOfACordonedNodeAsksNothing(t *testing.T) {
	a := NewApp(testContext(120, 30))
	a.SetActions(&Actions{Audit: testAudit(t)})
	a.Update(FrameMsg(sampleFrame())) // node-c is cordoned there
	a.openCordon("node-c", true)
	if a.dialog == nil || a.dialog.state != dialogDone || !strings.Contains(a.View(), "node-c is already cordoned: nothing to do") {
		t.Fatalf("cordon of a cordoned node:\n%s", a.View())
	}
	press(a, "x")
	a.openCordon("node-c", false)
	if a.dialog == nil || a.dialog.state != dialogConfirm {
		t.Fatalf("uncordon of a cordoned node does not ask:\n%s", a.View())
	}
}

// Issue 38: the seed change has the preflight, confirm and outcome of
// every other action. Making the seed the seed asks nothing and says so
// (recorded, as cordon's no-op is).
func TestSeedOfTheSeedAsksNothing(t *testing.T) {
	a := NewApp(testContext(120, 30))
	a.SetActions(&Actions{Audit: testAudit(t)})
	a.Update(FrameMsg(sampleFrame())) // node-a is the seed there
	a.openSeed("node-a")
	if a.dialog == nil || a.dialog.state != dialogDone || !strings.Contains(a.View(), "node-a is the seed already (join_server_ip 10.244.244.1): nothing to do") {
		t.Fatalf("seed of the seed:\n%s", a.View())
	}
}
