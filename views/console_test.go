package views

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/muesli/termenv"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/keymap"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/kube/safety"
	"github.com/sitecon/sitecon/ui"
)

// updateGolden reads -update, the flag teatest's golden package defines.
func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// sampleFrame is a site mid-failure: node-b lost a minute ago, a volume
// degraded for a week, one app not running.
func sampleFrame() Frame {
	st := sample()
	st.Nodes = append(st.Nodes, kube.NodeStatus{Name: "node-c", Ready: true, Status: kube.NodeReady, Since: now.Add(-50 * time.Hour),
		Roles: []string{"control-plane", "etcd", "master"}, Schedulable: false, KubeletVersion: "v1.34.4+k3s1", InternalIP: "10.244.244.3", Pods: 12,
		CPUAllocatable: 4000, CPURequested: 1500, MemoryAllocatable: 7 << 30, MemoryRequested: 3 << 29})
	st.NodesReady, st.NodesTotal = 2, 3
	st.Namespaces = []kube.NamespaceHealth{{Name: "kube-system", Ready: 9, NotReady: 2}, {Name: "longhorn-system", Ready: 7, NotReady: 3, Failed: 1},
		{Name: "kubevirt", Ready: 4}, {Name: "cdi", Ready: 2}, {Name: "eve-kube-app", Ready: 3, NotReady: 1}}
	st.Volumes = append(st.Volumes,
		kube.VolumeStatus{Name: "vol-hmi", State: "attached", Robustness: "degraded", Since: now.Add(-70 * time.Second), SinceExact: true, Size: 20 << 30, ActualSize: 3 << 30, Node: "node-a", WantReplicas: 3,
			Replicas: []kube.ReplicaStatus{{Node: "node-a", State: kube.ReplicaHealthy}, {Node: "node-b", State: kube.ReplicaFailed}, {Node: "node-c", State: kube.ReplicaRebuilding, Progress: 42}}},
		kube.VolumeStatus{Name: "vol-plc", State: "attached", Robustness: "healthy", Since: now.Add(-3 * time.Hour), Size: 10 << 30, ActualSize: 1 << 30, Node: "node-c", WantReplicas: 3,
			Replicas: []kube.ReplicaStatus{{Node: "node-a", State: kube.ReplicaHealthy}, {Node: "node-c", State: kube.ReplicaHealthy}}})
	st.Apps = []kube.AppStatus{
		{Name: "hmi", Kind: kube.AppKindVM, Mode: kube.AppModeAuto, DesignatedNode: "node-b", Node: "node-a", Phase: "Running", Ready: true, Object: "hmi-x", VNCPort: 5901,
			LastMove: &kube.AppMove{At: now.Add(-75 * time.Second), From: "node-b", To: "node-a"}},
		{Name: "historian", Kind: kube.AppKindVM, Mode: kube.AppModePinned, DesignatedNode: "node-b", Node: "node-b", Phase: "Scheduled", Object: "historian"},
		{Name: "plc-gateway", Kind: kube.AppKindContainer, Mode: kube.AppModeAuto, DesignatedNode: "node-c", Node: "node-c", Phase: "Running", Ready: true, Object: "plc-gateway-1"},
	}
	var pods []kube.PodRow
	for i, ns := range []string{"kube-system", "kube-system", "longhorn-system", "eve-kube-app"} {
		pods = append(pods, kube.PodRow{Namespace: ns, Name: fmt.Sprintf("pod-%d", i), Phase: "Running", Ready: "1/1", Node: "node-a", Created: now.Add(-time.Hour), Healthy: true})
	}
	pods = append(pods, kube.PodRow{Namespace: "kube-system", Name: "coredns-x", Phase: "Running", Ready: "0/1", Restarts: 4, Node: "node-b", Created: now.Add(-2 * time.Hour)})
	events := []kube.EventRow{
		{Time: now.Add(-10 * time.Second), Type: "Warning", Reason: "NodeNotReady", Object: "Node/node-b", Message: "Node is not ready"},
		{Time: now.Add(-5 * time.Minute), Type: "Normal", Reason: "Scheduled", Object: "Pod/hmi-x", Namespace: "eve-kube-app", Message: "Successfully assigned eve-kube-app/hmi-x to node-a"},
	}
	return Frame{Status: st, Pods: pods, Events: events, Synced: true,
		Agent: &AgentSummary{Running: true, Node: "node-a", Role: "seed", Phase: "joined", Since: now.Add(-48 * time.Hour), ClusterIP: "10.244.244.1", ClusterIPReady: true,
			Events: []AgentEvent{
				{Time: now.Add(-20 * time.Second), Kind: "refusal", Subject: "historian", Warning: true, Message: "pinned app historian is on lost node node-b; not moved"},
				{Source: "audit", Time: now.Add(-30 * time.Second), Kind: "cordon", Subject: "node-b", Message: "done by tech via ssh from 192.168.1.20"},
				{Time: now.Add(-60 * time.Second), Kind: "move", Subject: "hmi", Message: "hmi moved from node-b to node-a"},
				{Time: now.Add(-65 * time.Second), Kind: "node", Subject: "node-b", Warning: true, Message: "node-b is not Ready"},
			}}}
}

// testContext renders without colour so golden frames are plain text.
func testContext(w, h int) *ui.Context {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii)
	ctx := ui.NewContext(r, func() time.Time { return now }, nil)
	ctx.Width, ctx.Height = w, h
	return ctx
}

func newTestApp(w, h int) *App {
	a := NewApp(testContext(w, h))
	a.Update(FrameMsg(sampleFrame()))
	return a
}

func press(a *App, keys ...string) tea.Cmd {
	var cmd tea.Cmd
	for _, k := range keys {
		var msg tea.KeyMsg
		switch k {
		case "enter":
			msg = tea.KeyMsg{Type: tea.KeyEnter}
		case "esc":
			msg = tea.KeyMsg{Type: tea.KeyEsc}
		case "tab":
			msg = tea.KeyMsg{Type: tea.KeyTab}
		case "shift+tab":
			msg = tea.KeyMsg{Type: tea.KeyShiftTab}
		case "down":
			msg = tea.KeyMsg{Type: tea.KeyDown}
		case "ctrl+c":
			msg = tea.KeyMsg{Type: tea.KeyCtrlC}
		default:
			msg = tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
		}
		_, cmd = a.Update(msg)
	}
	return cmd
}

func TestNavigation(t *testing.T) {
	a := newTestApp(80, 24)
	if a.Screen() != "overview" {
		t.Fatalf("starts on %s", a.Screen())
	}
	press(a, "tab")
	if a.Screen() != "nodes" {
		t.Errorf("tab: %s", a.Screen())
	}
	press(a, "shift+tab", "shift+tab")
	if a.Screen() != "events" {
		t.Errorf("shift+tab wraps: %s", a.Screen())
	}
	press(a, "4")
	if a.Screen() != "volumes" {
		t.Errorf("4: %s", a.Screen())
	}
	press(a, ":", "a", "p", "p", "enter")
	if a.Screen() != "apps" {
		t.Errorf(":app: %s", a.Screen())
	}
	press(a, ":", "b", "o", "g", "u", "s", "enter")
	if a.Screen() != "apps" || !strings.Contains(a.View(), "unknown command :bogus") {
		t.Errorf(":bogus should stay and say so:\n%s", a.View())
	}
	press(a, "?")
	if !strings.Contains(a.View(), "apps screen") || !strings.Contains(a.View(), "filter") {
		t.Errorf("? shows no help:\n%s", a.View())
	}
	press(a, "x")
	if strings.Contains(a.View(), "any key to go back") {
		t.Error("a key should leave the help screen")
	}
	if cmd := press(a, "q"); cmd == nil || cmd() != tea.Quit() {
		t.Error("q does not quit")
	}
}

// Ctrl-C leaves from anywhere; q typed into a line is only a letter.
func TestCtrlCQuitsFromAnywhere(t *testing.T) {
	quits := func(cmd tea.Cmd) bool { return cmd != nil && cmd() == tea.Quit() }
	typing := func() *App {
		// A drain that needs the node name typed: the dialog has a text input.
		p := refusedDrain()
		p.Refusals = nil
		return drainDialogApp(t, testContext(120, 30), p)
	}
	for name, tc := range map[string]struct {
		app  func() *App
		keys []string
	}{
		"command line":     {func() *App { return newTestApp(80, 24) }, []string{":", "n", "o"}},
		"filter line":      {func() *App { return newTestApp(80, 24) }, []string{"2", "/", "x"}},
		"typed-name input": {typing, nil},
	} {
		a := tc.app()
		press(a, tc.keys...)
		if quits(press(a, "q")) {
			t.Errorf("%s: q quit instead of being typed", name)
		}
		if !quits(press(a, "ctrl+c")) {
			t.Errorf("%s: ctrl+c did not quit", name)
		}
	}
}

func TestFilterAndSort(t *testing.T) {
	a := newTestApp(80, 24)
	press(a, "4", "/", "h", "m", "i")
	vols := a.screens[3].table()
	if vols.Len() != 1 || vols.SelectedID() != "vol-hmi" {
		t.Errorf("filter 'hmi' shows %d rows", vols.Len())
	}
	press(a, "enter")
	if !strings.Contains(a.View(), "filter /hmi") {
		t.Errorf("the footer should show the active filter:\n%s", a.View())
	}
	press(a, "/", "esc")
	if vols.Len() != 3 {
		t.Errorf("esc clears the filter: %d rows", vols.Len())
	}
	press(a, "s") // sort by NAME
	if vols.SortColumn() != "NAME" || vols.SelectedID() != "vol-hmi" {
		t.Errorf("sort: column %q, cursor on %s", vols.SortColumn(), vols.SelectedID())
	}
	press(a, "s", "s", "s") // by SINCE: shortest-lived state first
	if vols.SortColumn() != "SINCE" {
		t.Fatalf("sort column %q", vols.SortColumn())
	}
	press(a, "g")
	if vols.SelectedID() != "vol-hmi" {
		t.Errorf("sorted by since, the first row is %s, want vol-hmi (70s)", vols.SelectedID())
	}
}

func TestPodsDrillIn(t *testing.T) {
	a := newTestApp(80, 24)
	press(a, "3", "enter")
	if !strings.Contains(a.View(), "pods in kube-system") || !strings.Contains(a.View(), "coredns-x") {
		t.Fatalf("enter on kube-system:\n%s", a.View())
	}
	if strings.Contains(a.View(), "pod-2") {
		t.Error("pods of another namespace shown")
	}
	press(a, "esc")
	if strings.Contains(a.View(), "pods in") || !strings.Contains(a.View(), "longhorn-system") {
		t.Errorf("esc goes back to the namespaces:\n%s", a.View())
	}
}

func TestStaleAndNoData(t *testing.T) {
	a := newTestApp(80, 24)
	f := sampleFrame()
	f.Status.API = kube.Health{Connected: false, Since: now.Add(-42 * time.Second), LastError: "connection refused"}
	a.Update(FrameMsg(f))
	if v := a.View(); !strings.Contains(v, "STALE 42s") || !strings.Contains(v, "connection refused") || !strings.Contains(v, "vol-hmi") {
		t.Errorf("stale data must stay on screen with its age and reason:\n%s", v)
	}
	a.Update(FrameMsg(Frame{Problem: "no kubeconfig found", Agent: &AgentSummary{Problem: "no agent socket"}}))
	if v := a.View(); !strings.Contains(v, "NO DATA") || !strings.Contains(v, "no kubeconfig found") {
		t.Errorf("no data must say why:\n%s", v)
	}
}

func TestResizeReflows(t *testing.T) {
	a := newTestApp(160, 48)
	wide := a.View()
	a.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	narrow := a.View()
	for name, v := range map[string]string{"160x48": wide, "80x24": narrow} {
		lines := strings.Split(v, "\n")
		w, h := 160, 48
		if name == "80x24" {
			w, h = 80, 24
		}
		if len(lines) != h {
			t.Errorf("%s: %d lines", name, len(lines))
		}
		for i, l := range lines {
			if lipgloss.Width(l) != w {
				t.Errorf("%s line %d is %d wide: %q", name, i, lipgloss.Width(l), l)
				break
			}
		}
	}
}

func TestAlertsOrder(t *testing.T) {
	f := sampleFrame()
	alerts := Alerts(&f, now)
	if len(alerts) == 0 || !alerts[0].Bad {
		t.Fatalf("alerts = %+v", alerts)
	}
	// Degraded for a week (bad) comes before a node lost 90s ago.
	if !strings.Contains(alerts[0].Text, "vol-1 degraded for 7d") {
		t.Errorf("first alert %q, want the week-old degraded volume", alerts[0].Text)
	}
	var texts []string
	for _, a := range alerts {
		texts = append(texts, a.Text)
	}
	joined := strings.Join(texts, "\n")
	for _, want := range []string{"node node-b Unknown", "vol-hmi degraded for 70s (2 of 3 replicas not healthy)", "longhorn-system: 1 pod(s) failed", "app historian (vm) not running"} {
		if !strings.Contains(joined, want) {
			t.Errorf("alerts lack %q:\n%s", want, joined)
		}
	}
}

func TestThisNodeStatus(t *testing.T) {
	f := sampleFrame()
	if got := ThisNodeStatus(&f); got != "READY" {
		t.Errorf("node-a: %s", got)
	}
	f.Agent.Node = "node-b"
	if got := ThisNodeStatus(&f); got != "NOTREADY" {
		t.Errorf("node-b: %s", got)
	}
	f.Status.API.Connected = false
	if got := ThisNodeStatus(&f); got != "DOWN" {
		t.Errorf("API down: %s", got)
	}
}

// The Events screen merges the agent's timeline with the cluster's events,
// newest first.
func TestEventsMergeAgentTimeline(t *testing.T) {
	a := newTestApp(160, 48)
	a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("6")})
	v := a.View()
	order := []string{"NodeNotReady", "agent:refusal", "audit:cordon", "agent:move", "agent:node", "Scheduled"}
	last := -1
	for _, want := range order {
		i := strings.Index(v, want)
		if i < 0 || i < last {
			t.Fatalf("events not merged newest first (%v); %q at %d after %d:\n%s", order, want, i, last, v)
		}
		last = i
	}
}

// Golden frames: every screen at 80x24 and 160x48, fixed clock and data.
// go test ./views -run Golden -update rewrites them.
// Each frame comes out of the real program loop (teatest): the terminal's
// size arrives as a WindowSizeMsg, the data as a frame, the screen by its
// key, and the frame is the last one drawn before q.
func TestGoldenFrames(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {160, 48}} {
		for i, name := range keymap.ScreenNames {
			tm := teatest.NewTestModel(t, NewApp(testContext(0, 0)), teatest.WithInitialTermSize(size[0], size[1]))
			tm.Send(FrameMsg(sampleFrame()))
			tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(fmt.Sprint(i + 1))})
			tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
			a := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*App)
			if a.Screen() != name {
				t.Fatalf("key %d showed %s, not %s", i+1, a.Screen(), name)
			}
			got := a.View() + "\n"
			path := filepath.Join("testdata", fmt.Sprintf("%s-%dx%d.golden", name, size[0], size[1]))
			if updateGolden() {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the golden frame:\n--- got\n%s\n--- want\n%s", path, got, want)
			}
		}
	}
}

// The whole program: frames in, keys in, a clean quit.
func TestProgram(t *testing.T) {
	app := NewApp(testContext(0, 0))
	tm := teatest.NewTestModel(t, app, teatest.WithInitialTermSize(80, 24))
	tm.Send(FrameMsg(sampleFrame()))
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte("vol-1 degraded for 7d")) },
		teatest.WithDuration(5*time.Second))
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("2")})
	teatest.WaitFor(t, tm.Output(), func(b []byte) bool {
		return bytes.Contains(b, []byte("ROLES"))
	},
		teatest.WithDuration(5*time.Second))
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	final := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*App)
	if final.Screen() != "nodes" {
		t.Errorf("final screen %s", final.Screen())
	}
}

func BenchmarkView(b *testing.B) {
	f := sampleFrame()
	for i := range 1000 {
		f.Pods = append(f.Pods, kube.PodRow{Namespace: kube.Namespaces[i%5], Name: fmt.Sprintf("pod-%04d", i), Phase: "Running", Ready: "1/1", Node: "node-a", Created: now.Add(-time.Hour), Healthy: true})
	}
	f.Status.Volumes = nil
	for i := range 200 {
		f.Status.Volumes = append(f.Status.Volumes, kube.VolumeStatus{Name: fmt.Sprintf("vol-%03d", i), State: "attached", Robustness: "healthy", Since: now.Add(-time.Hour),
			Size: 10 << 30, WantReplicas: 3, Replicas: []kube.ReplicaStatus{{Node: "node-a", State: "healthy"}, {Node: "node-b", State: "healthy"}, {Node: "node-c", State: "healthy"}}})
	}
	for _, name := range []string{"overview", "pods", "volumes"} {
		b.Run(name, func(b *testing.B) {
			a := NewApp(testContext(160, 48))
			a.Update(FrameMsg(f))
			press(a, map[string]string{"overview": "1", "pods": "3", "volumes": "4"}[name])
			if name == "pods" {
				press(a, "enter")
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = a.View()
			}
		})
	}
	b.Run("frame", func(b *testing.B) {
		a := NewApp(testContext(160, 48))
		b.ReportAllocs()
		for b.Loop() {
			a.Update(FrameMsg(f))
		}
	})
}

// Keys that arrive together (fast typing over SSH) act one by one.
func TestBatchedRunes(t *testing.T) {
	a := newTestApp(80, 24)
	a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(":vol")})
	a.Update(tea.KeyMsg{Type: tea.KeyEnter})
	if a.Screen() != "volumes" {
		t.Errorf(":vol typed at once: screen %s", a.Screen())
	}
	a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("2")})
	a.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("/node-c")})
	if tbl := a.screens[1].table(); tbl.Len() != 1 || tbl.SelectedID() != "node-c" {
		t.Errorf("/node-c typed at once: %d rows", tbl.Len())
	}
}

// TestWriteScreenshotFrames writes every screen's real frame, in colour, to
// $SITECON_SCREENSHOT_DIR for `make screenshots` (skipped otherwise).
func TestWriteScreenshotFrames(t *testing.T) {
	dir := os.Getenv("SITECON_SCREENSHOT_DIR")
	if dir == "" {
		t.Skip("SITECON_SCREENSHOT_DIR not set")
	}
	for i, name := range keymap.ScreenNames {
		r := lipgloss.NewRenderer(io.Discard)
		r.SetColorProfile(termenv.ANSI)
		ctx := ui.NewContext(r, func() time.Time { return now }, nil)
		ctx.Width, ctx.Height = 100, 24
		a := NewApp(ctx)
		a.Update(FrameMsg(sampleFrame()))
		press(a, fmt.Sprint(i+1))
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d-%s.ansi", i+1, name)), []byte(a.View()+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.ANSI)
	ctx := ui.NewContext(r, func() time.Time { return now }, nil)
	ctx.Width, ctx.Height = 100, 24
	a := drainDialogApp(t, ctx, refusedDrain())
	if err := os.WriteFile(filepath.Join(dir, "7-drain-refused.ansi"), []byte(a.View()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The nodes screen's help, as ? shows it at 80x24.
	ctx = ui.NewContext(r, func() time.Time { return now }, nil)
	ctx.Width, ctx.Height = 80, 24
	a = NewApp(ctx)
	a.SetActions(&Actions{})
	a.Update(FrameMsg(sampleFrame()))
	press(a, "2", "?")
	if err := os.WriteFile(filepath.Join(dir, "8-nodes-help.ansi"), []byte(a.View()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

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
		return &kube.PlanChangedError{Node: "node-b", Reasons: []string{reason}}
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

// :form opens the formation wizard inside the console; esc comes back.
// Read-only consoles do not offer it.
func TestFormFromConsole(t *testing.T) {
	a := newTestApp(100, 30)
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
