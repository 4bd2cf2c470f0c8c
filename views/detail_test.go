package views

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest"

	"github.com/sitecon/sitecon/kube"
)

// detailFrame is alertsFrame with what the details show: node-b's
// conditions and taints as the node controller leaves them on a lost
// node, the scheduler's and Longhorn's events, the agent's timeline.
func detailFrame() Frame {
	f := alertsFrame()
	lost := now.Add(-90 * time.Second)
	f.Status.Nodes[1].Reason = "Kubelet stopped posting node status."
	for _, c := range []string{"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"} {
		f.Status.Nodes[1].Conditions = append(f.Status.Nodes[1].Conditions, kube.Condition{Type: c, Status: "Unknown", Reason: "NodeStatusUnknown",
			Message: "Kubelet stopped posting node status.", Since: lost})
	}
	f.Status.Nodes[1].Taints = []string{"node.kubernetes.io/unreachable:NoExecute", "node.kubernetes.io/unreachable:NoSchedule"}
	for i := range f.Status.Volumes {
		for j := range f.Status.Volumes[i].Replicas {
			r := &f.Status.Volumes[i].Replicas[j]
			r.Name = f.Status.Volumes[i].Name + "-r-" + r.Node[len(r.Node)-1:]
		}
	}
	f.Events = append(f.Events,
		kube.EventRow{Time: now.Add(-40 * time.Second), Type: "Warning", Reason: "FailedScheduling", Object: "Pod/reports-0", Namespace: kube.AppNamespace, Count: 3,
			Message: "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector."},
		kube.EventRow{Time: now.Add(-65 * time.Second), Type: "Normal", Reason: "Degraded", Object: "Volume/vol-hmi", Namespace: "longhorn-system",
			Message: "volume vol-hmi became degraded"},
		kube.EventRow{Time: now.Add(-50 * time.Second), Type: "Normal", Reason: "Rebuilding", Object: "Volume/vol-hmi", Namespace: "longhorn-system",
			Message: "replica vol-hmi-r-c started rebuilding"})
	f.Agent.Events = append(f.Agent.Events,
		AgentEvent{Time: now.Add(-15 * time.Second), Kind: "refusal", Subject: "scada", Warning: true,
			Message: "not force-deleting scada-5c7f9: lost node node-b shows a sign of life: its agent answered; it may still run the pod"})
	return f
}

// detailApp is a console on detailFrame at w x h.
func detailApp(w, h int) *App {
	a := NewApp(testContext(w, h))
	a.Update(FrameMsg(detailFrame()))
	return a
}

// selectRow moves the cursor of screen (its number key) to the row whose
// first cell is name.
func selectRow(t *testing.T, a *App, screen, name string) {
	t.Helper()
	press(a, screen, "g")
	for range 20 {
		if tb := a.screens[a.current].table(); tb != nil && strings.HasSuffix(tb.SelectedID(), name) {
			return
		}
		press(a, "down")
	}
	t.Fatalf("no row %s on screen %s", name, screen)
}

// Enter on a row of the nodes, volumes and apps screens opens its detail
// over the screen; esc comes back to the table, the cursor where it was.
func TestEnterOpensTheRowsDetail(t *testing.T) {
	cases := []struct {
		screen, row, title string
		want               []string
	}{
		{"2", "node-b", "node node-b", []string{
			"Status       Unknown for 90s: Kubelet stopped posting node status.",
			// The four conditions the node controller set Unknown, on one line.
			"Ready, MemoryPressure, DiskPressure, PIDPressure=Unknown for 90s ·",
			"node.kubernetes.io/unreachable:NoExecute",
			"node node-b Unknown for 90s: kubelet stopped posting status → check", // its alert, why and next
			"NodeNotReady: Node is not ready",                                     // its Kubernetes event
			"agent:node: node-b is not Ready",                                     // the agent's timeline
		}},
		{"4", "vol-hmi", "volume vol-hmi", []string{
			"Replicas (3 of 3 wanted)",
			"node-a  healthy · vol-hmi-r-a",
			"node-b  failed (node-b lost) · vol-hmi-r-b",
			"node-c  rebuilding, 42 % · vol-hmi-r-c",
			"Rebuilding: replica vol-hmi-r-c started rebuilding",
		}},
		{"5", "reports-0", "app reports", []string{
			"Runs on      none: not placed",
			"Scheduler    Unschedulable for 4m: 0/3 nodes are available: 1 node(s) were",
			"FailedScheduling: 0/3 nodes are available", "(×3)",
		}},
		{"5", "scada-5c7f9", "app scada", []string{
			"Designated   node-b", "Runs on      node-b (lost)", "Status       Unknown (node-b lost); it last reported Running",
			"Failover     not force-deleting scada-5c7f9: lost node node-b shows a sign of life",
			"failover held: node-b still answers",
		}},
	}
	for _, c := range cases {
		t.Run(c.row, func(t *testing.T) {
			a := detailApp(100, 40)
			selectRow(t, a, c.screen, c.row)
			before := a.screens[a.current].table().SelectedID()
			press(a, "enter")
			v := a.View()
			// Wrapped lines read as one: what is said, not where it breaks.
			flat := strings.Join(strings.Fields(v), " ")
			for _, w := range append([]string{c.title}, c.want...) {
				if !strings.Contains(flat, strings.Join(strings.Fields(w), " ")) {
					t.Errorf("the detail lacks %q:\n%s", w, v)
				}
			}
			if a.screens[a.current].table() != nil {
				t.Error("a detail open leaves the table's keys (filter, sort, cursor) live")
			}
			press(a, "esc")
			tb := a.screens[a.current].table()
			if tb == nil || strings.Contains(a.View(), c.title) {
				t.Fatalf("esc did not come back to the table:\n%s", a.View())
			}
			if tb.SelectedID() != before {
				t.Errorf("back on the table the cursor is on %s, not %s", tb.SelectedID(), before)
			}
		})
	}
}

// The detail's keys are the screen's, declared in its list: the help (?)
// and the footer say enter on the table and esc and the scroll keys in the
// detail, from that one list.
func TestDetailKeysAreInTheHelp(t *testing.T) {
	for _, screen := range []struct{ key, of string }{{"2", "node"}, {"4", "volume"}, {"5", "app"}} {
		a := detailApp(100, 40)
		press(a, screen.key, "?")
		if v := a.View(); !regexp.MustCompile(`enter +the ` + screen.of + `'s detail`).MatchString(v) {
			t.Errorf("the %ss screen's help lacks enter:\n%s", screen.of, v)
		}
		press(a, "esc", "enter", "?")
		v := a.View()
		// The detail fits at 100x40: there is nothing to scroll, and the
		// scroll keys are not offered.
		if strings.Contains(v, "scroll the detail") {
			t.Errorf("the %s detail fits, yet its help offers to scroll it:\n%s", screen.of, v)
		}
		// Taller than the screen, it offers to scroll down, and once
		// scrolled, up.
		press(a, "x")
		a.Update(tea.WindowSizeMsg{Width: 100, Height: 12})
		a.View()
		keys := strings.Join(helpKeyLines(a), "\n")
		if !strings.Contains(keys, "↓/j  scroll the detail down") || !strings.Contains(keys, "pgdn  scroll a page down") || strings.Contains(keys, "scroll the detail up") {
			t.Errorf("the %s detail taller than the screen: its keys:\n%s", screen.of, keys)
		}
		press(a, "down")
		a.View()
		if keys := strings.Join(helpKeyLines(a), "\n"); !strings.Contains(keys, "↑/k  scroll the detail up") {
			t.Errorf("the %s detail scrolled down: its keys:\n%s", screen.of, keys)
		}
		a.Update(tea.WindowSizeMsg{Width: 100, Height: 40})
		press(a, "?")
		v = a.View()
		for _, want := range []string{`esc +back to the ` + screen.of + `s`} {
			if !regexp.MustCompile(want).MatchString(v) {
				t.Errorf("the %s detail's help lacks %q:\n%s", screen.of, want, v)
			}
		}
		if strings.Contains(v, "filter the rows") || strings.Contains(v, "sort by") {
			t.Errorf("the %s detail's help offers the table's keys:\n%s", screen.of, v)
		}
		press(a, "x") // leaves the help
		a.Update(tea.WindowSizeMsg{Width: 200, Height: 40})
		footer := a.View()[strings.LastIndex(a.View(), "\n")+1:]
		if !strings.Contains(footer, "esc back") {
			t.Errorf("the %s detail's footer: %q", screen.of, footer)
		}
	}
}

// A detail taller than the screen is not cut: the arrows scroll it, and
// its last line says how much more there is.
func TestDetailScrolls(t *testing.T) {
	a := detailApp(80, 14)
	selectRow(t, a, "2", "node-b")
	press(a, "enter")
	body := func() []string { l := strings.Split(a.View(), "\n"); return l[2 : len(l)-1] }
	first := body()
	if !strings.Contains(first[len(first)-1], "more lines") {
		t.Fatalf("a cut detail does not say so:\n%s", strings.Join(first, "\n"))
	}
	var seen []string
	for range 40 {
		seen = append(seen, body()[0])
		press(a, "down")
	}
	all := strings.Join(seen, "\n") + strings.Join(body(), "\n")
	for _, w := range []string{"Status", "Conditions", "Taints", "Recent events", "agent:node: node-b is not Ready"} {
		if !strings.Contains(all, w) {
			t.Errorf("scrolling never shows %q:\n%s", w, all)
		}
	}
	if last := body(); !strings.Contains(last[len(last)-1], "end") {
		t.Errorf("scrolled to the end, the last line says %q", last[len(last)-1])
	}
	for range 6 {
		a.Update(tea.KeyMsg{Type: tea.KeyPgUp})
	}
	if got := body(); got[0] != first[0] {
		t.Errorf("pgup back to the top shows %q, not %q", got[0], first[0])
	}
}

// A detail whose object goes away (a node removed) closes: the table is
// back, not a detail of what no longer is.
func TestDetailClosesWhenItsObjectGoes(t *testing.T) {
	a := detailApp(80, 24)
	selectRow(t, a, "2", "node-b")
	press(a, "enter")
	f := detailFrame()
	f.Status.Nodes = append(f.Status.Nodes[:1], f.Status.Nodes[2:]...)
	a.Update(FrameMsg(f))
	if v := a.View(); strings.Contains(v, "node node-b") || a.screens[a.current].table() == nil {
		t.Errorf("the detail of a node gone stays open:\n%s", v)
	}
}

// Golden frames of each kind of detail at the device console's 80x24; go
// test ./views -run GoldenDetails -update rewrites them.
func TestGoldenDetails(t *testing.T) {
	for _, c := range []struct{ name, screen, row string }{
		{"node", "2", "node-b"}, {"volume", "4", "vol-hmi"}, {"app", "5", "reports-0"}, {"app-failover", "5", "scada-5c7f9"},
	} {
		a := detailApp(80, 24)
		selectRow(t, a, c.screen, c.row)
		// The cursor is placed by keys above; the frame is drawn by the
		// program loop from here, as the technician's terminal is.
		tm := teatest.NewTestModel(t, a, teatest.WithInitialTermSize(80, 24))
		tm.Send(tea.KeyMsg{Type: tea.KeyEnter})
		tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
		got := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*App).View() + "\n"
		for i, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
			if w := ansi.StringWidth(l); w != 80 {
				t.Errorf("%s line %d is %d wide: %q", c.name, i, w, l)
			}
		}
		path := filepath.Join("testdata", fmt.Sprintf("detail-%s-80x24.golden", c.name))
		checkGolden(t, path, got)
	}
}

// An action key in a detail acts on the object open (c in node-b's detail
// asks to cordon node-b), not on "no node selected".
func TestActionInADetailActsOnItsObject(t *testing.T) {
	a := detailApp(100, 30)
	a.SetActions(&Actions{Audit: testAudit(t), Snap: new(kube.Snapshot)})
	selectRow(t, a, "2", "node-c")
	press(a, "enter")
	press(a, "u")
	if a.dialog == nil || !strings.Contains(a.View(), "Uncordon node-c") {
		t.Fatalf("u in node-c's detail: message %q, view:\n%s", a.message, a.View())
	}
}

// The details draw what the cluster wrote (conditions, taints, the
// scheduler's message, events, the agent's verdict) stripped of control
// characters, as every screen does (docs/DESIGN.md, "Nothing raw reaches
// the terminal").
func TestDetailsDrawNoRawText(t *testing.T) {
	f := detailFrame()
	f.Status.Nodes[1].Conditions[0].Message = "gone" + hostile
	f.Status.Nodes[1].Taints[0] = "evil" + clipboard + ":NoSchedule"
	f.Status.Volumes[1].Replicas[0].Name = "r" + setTitle
	f.Status.Apps[4].Unscheduled.Message = "no node" + clearHome
	f.Agent.Failovers[0].Verdict = "held" + stTitle
	f.Events[0].Message = "ready" + c1CSI
	for _, c := range []struct{ screen, row string }{{"2", "node-b"}, {"4", "vol-hmi"}, {"5", "reports-0"}, {"5", "scada-5c7f9"}} {
		a := NewApp(testContext(120, 60))
		a.Update(FrameMsg(f))
		selectRow(t, a, c.screen, c.row)
		press(a, "enter")
		v := a.View()
		if !strings.Contains(v, c.row[:4]) {
			t.Fatalf("%s: no detail:\n%s", c.row, v)
		}
		if raw := rawIn(v); len(raw) > 0 {
			t.Errorf("%s's detail draws %q raw", c.row, raw)
		}
	}
}

// A volume's detail lists the events of its own Longhorn volume and its
// own claim, not those of objects of the same names in other namespaces.
func TestVolumeDetailEventsAreItsOwnNamespaces(t *testing.T) {
	f := detailFrame()
	for i := range f.Status.Volumes {
		if f.Status.Volumes[i].Name == "vol-hmi" {
			f.Status.Volumes[i].PVC, f.Status.Volumes[i].PVCNamespace = "hmi-data", kube.AppNamespace
		}
	}
	f.Events = append(f.Events,
		kube.EventRow{Time: now.Add(-30 * time.Second), Type: "Normal", Reason: "ClaimResized", Object: "PersistentVolumeClaim/hmi-data", Namespace: kube.AppNamespace,
			Message: "the app's own claim"},
		kube.EventRow{Time: now.Add(-20 * time.Second), Type: "Warning", Reason: "ImpostorClaim", Object: "PersistentVolumeClaim/hmi-data", Namespace: "someone-else",
			Message: "another namespace's claim of the same name"},
		kube.EventRow{Time: now.Add(-10 * time.Second), Type: "Warning", Reason: "ImpostorVolume", Object: "Volume/vol-hmi", Namespace: "someone-else",
			Message: "another namespace's object of the same name"})
	a := NewApp(testContext(100, 40))
	a.Update(FrameMsg(f))
	selectRow(t, a, "4", "vol-hmi")
	press(a, "enter")
	v := a.View()
	for _, want := range []string{"ClaimResized", "Rebuilding: replica vol-hmi-r-c"} {
		if !strings.Contains(v, want) {
			t.Errorf("the volume's detail lacks its own event %s:\n%s", want, v)
		}
	}
	for _, impostor := range []string{"ImpostorClaim", "ImpostorVolume"} {
		if strings.Contains(v, impostor) {
			t.Errorf("the volume's detail shows %s, another namespace's event:\n%s", impostor, v)
		}
	}
}
