package views

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/muesli/termenv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/keymap"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/kube/safety"
	"github.com/sitecon/sitecon/kube/streams"
	"github.com/sitecon/sitecon/ui"
)

// updateGolden reads -update, the flag teatest's golden package defines.
func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// checkGolden compares got with the golden frame at path, or writes it
// there under -update.
func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if updateGolden() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden frame:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
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
		case "up":
			msg = tea.KeyMsg{Type: tea.KeyUp}
		case "pgup":
			msg = tea.KeyMsg{Type: tea.KeyPgUp}
		case "pgdown":
			msg = tea.KeyMsg{Type: tea.KeyPgDown}
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
	if last := keymap.ScreenNames[len(keymap.ScreenNames)-1]; a.Screen() != last {
		t.Errorf("shift+tab wraps: %s, not %s", a.Screen(), last)
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
	f.Status.Stale = &kube.Staleness{Since: f.Status.API.Since, AsOf: f.Status.API.Since, Reason: f.Status.API.LastError} // as kube.Derive makes it
	a.Update(FrameMsg(f))
	if v := a.View(); !strings.Contains(v, "STALE 42s") || !strings.Contains(v, "connection refused") || !strings.Contains(v, "vol-1 degraded") {
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
			checkGolden(t, path, got)
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
	// Issue 23's scale: 2,000 volumes, detached (their apps stopped), as
	// on the benchmarks' sites. The overview draws once a second.
	b.Run("overview-2000-detached-volumes", func(b *testing.B) {
		detached := f
		detached.Status.Volumes = nil
		for i := range 2000 {
			detached.Status.Volumes = append(detached.Status.Volumes, kube.VolumeStatus{Name: fmt.Sprintf("vol-%04d", i), State: "detached",
				Robustness: kube.RobustnessUnknown, Since: now.Add(-time.Hour), Size: 10 << 30, WantReplicas: 3,
				Replicas: []kube.ReplicaStatus{{Node: "node-a", State: kube.ReplicaStopped}, {Node: "node-b", State: kube.ReplicaStopped}, {Node: "node-c", State: kube.ReplicaStopped}}})
		}
		a := NewApp(testContext(160, 48))
		a.Update(FrameMsg(detached))
		b.ReportAllocs()
		for b.Loop() {
			_ = a.View()
		}
	})
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
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.ANSI)
	colour := func(w, h int) *ui.Context {
		ctx := ui.NewContext(r, func() time.Time { return now }, nil)
		ctx.Width, ctx.Height = w, h
		return ctx
	}
	write := func(name string, a *App) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name+".ansi"), []byte(a.View()+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range keymap.ScreenNames {
		if name == "doctor" {
			continue // below, with a report
		}
		a := NewApp(colour(100, 24))
		a.Update(FrameMsg(sampleFrame()))
		press(a, fmt.Sprint(i+1))
		write(fmt.Sprintf("%d-%s", i+1, name), a)
	}
	// The doctor screen, a run's findings listed worst first.
	a := NewApp(colour(100, 24))
	a.Update(FrameMsg(sampleFrame()))
	a.SetDoctor(context.Background(), func(context.Context) doctor.Report { return doctorReport() })
	runCmd(a, press(a, "7"))
	write("7-doctor", a)
	a = drainDialogApp(t, colour(100, 24), refusedDrain())
	write("8-drain-refused", a)
	// The nodes screen's help, as ? shows it at 80x24.
	a = NewApp(colour(80, 24))
	a.SetActions(&Actions{})
	a.Update(FrameMsg(sampleFrame()))
	press(a, "2", "?")
	write("9-nodes-help", a)
	// The logs view of a container app, following, filtered on "poll".
	src := newPipeSource(plcTarget())
	l := openAppLogs(t, colour(100, 24), src)
	writeLines(t, l.body(src), 0, 40, func(i int) string {
		if i%3 == 0 {
			return fmt.Sprintf("modbus poll %d: 12 registers from 10.1.4.%d in %d ms", i, 20+i%5, 3+i%7)
		}
		return fmt.Sprintf("mqtt publish plant/line1/press%d ok", i%4)
	})
	l.screenHas("press3")
	l.keys("/", "p", "o", "l", "l", "enter")
	l.screenHas("modbus poll 39")
	write("10-logs", l.a)
	// The overview while the cluster API does not answer: stale, never
	// green, and what each node's agent reports of itself.
	a = NewApp(colour(100, 24))
	a.SetNodeReports(context.Background(), func(context.Context, []kube.NodeStatus) nodestate.NodeReports { return siteReports(now) })
	_, cmd := a.Update(FrameMsg(staleFrame()))
	runReportCmds(a, cmd)
	write("11-overview-api-down", a)
	// v on a VM app: the local port a viewer is pointed at, and a viewer
	// connected (the lines the bridge's events give).
	// The bridge listens for real, on loopback; its API server is none
	// (nothing is dialled unless a viewer connects).
	snap, err := kube.NewSnapshot(&rest.Config{Host: "http://127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a = NewApp(colour(100, 24))
	a.SetActions(&Actions{Snap: snap, Audit: testAudit(t)})
	a.Update(FrameMsg(sampleFrame()))
	press(a, "5")
	cmd = a.openVNC("/hmi-x")
	if a.dialog == nil || a.dialog.state != dialogRunning || cmd == nil {
		t.Fatalf("v on hmi opened no bridge:\n%s", a.View())
	}
	a.Update(cmd()) // the bridge's first word: where it listens
	a.dialog.progress = append(a.dialog.progress, streams.VNCEvent{Kind: streams.VNCViewerConnected, Viewer: "127.0.0.1:51512"}.String())
	write("12-vnc", a)
	// The maintenance walk of node-b under way, in the steps the flow
	// reports (kube/flow/maintenance.go).
	a = NewApp(colour(100, 24))
	a.SetActions(&Actions{Audit: testAudit(t)})
	a.Update(FrameMsg(sampleFrame()))
	press(a, "2")
	a.openDialog("maintenance node-b", a.actions.recorder().Open(flow.ActionMaintenance, "node-b"))
	a.Update(preflightMsg{p: safety.Preflight{Node: "node-b", Evict: []string{"eve-kube-app/plc-gateway-5b0f7c1e-7d9f-x2"}}})
	a.dialog.state = dialogRunning
	a.dialog.progress = append(a.dialog.progress, "step 1/5: drain node-b", "node-b cordoned",
		"evicted eve-kube-app/plc-gateway-5b0f7c1e-7d9f-x2", "step 2/5: power node-b off or reboot it now",
		"  node-b: NotReady (went down 02:58:10)", "step 3/5: waiting for node-b to come back", "  node-b: Ready again",
		"step 4/5: waiting for node-b's volumes to be healthy again (pvc-3f2a)", "  pvc-3f2a: degraded, rebuilding on node-b 64 %")
	write("13-maintenance", a)
}

// While the cluster is still being read, the header and the overview show
// what is read already (the nodes, the VIP, the seed, the stats leader)
// and say what is not; no other screen takes the basics' empty pod and
// volume figures for the cluster's.
func TestOverviewShowsTheBasicsWhileTheClusterIsRead(t *testing.T) {
	full := sampleFrame()
	basics := full.Status
	basics.Volumes, basics.Apps, basics.Namespaces = nil, nil, nil
	for i := range basics.Nodes {
		basics.Nodes[i].Pods, basics.Nodes[i].CPURequested = 0, 0
	}
	// As the feed makes it: a frame of an unread cluster, with the basics.
	f := FrameFromData(kube.Data{}, false, full.Agent, "", now)
	f.Basics = &basics
	f.Problem = ""
	if got := withBasics(FrameFromData(kube.Data{}, false, full.Agent, "", now), kube.Data{}, "", now); got.Problem != "" || got.Basics == nil {
		t.Fatalf("the feed's frame with the basics has problem %q, basics %v", got.Problem, got.Basics)
	}
	a := NewApp(testContext(120, 30))
	a.Update(FrameMsg(f))
	v := a.View()
	for _, want := range []string{basics.Cluster.Name, "VIP", "on " + basics.VIP.Owner, "Nodes         2/3 ready", "node-a READY",
		"reading the cluster's pods, volumes and apps…", "nodes 2/3"} {
		if !strings.Contains(v, want) {
			t.Errorf("the overview while the cluster is read lacks %q:\n%s", want, v)
		}
	}
	for _, not := range []string{"NO DATA", "No cluster data", "none: every node ready"} {
		if strings.Contains(v, not) {
			t.Errorf("the overview while the cluster is read says %q:\n%s", not, v)
		}
	}
	a.Update(runes("2"))
	if v := a.View(); strings.Contains(v, "node-c") {
		t.Errorf("the nodes screen shows a node with the basics' figures (no pods read yet):\n%s", v)
	}
	// A list failing meanwhile is said where the reading is, not as "no
	// cluster data"; the basics' strings are cleaned as the feed makes
	// them.
	hostileBasics := kube.Data{Nodes: []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-a\x1b]0;owned\x07"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}},
		Health: kube.Health{Connected: true, LastError: "list replicas: the server is busy\x1b[2J"}}
	a.Update(FrameMsg(withBasics(FrameFromData(kube.Data{}, false, full.Agent, "", now), hostileBasics, "", now)))
	a.Update(runes("1"))
	v = a.View()
	for _, want := range []string{"the last try failed: list replicas: the server is busy", ReadingTheCluster, "Nodes         1/1 ready"} {
		if !strings.Contains(v, want) {
			t.Errorf("the overview with a list failing lacks %q:\n%s", want, v)
		}
	}
	if strings.Contains(v, "NO DATA") || strings.ContainsAny(v, "\x1b\x07") {
		t.Errorf("the overview with a list failing says NO DATA or draws raw text:\n%q", v)
	}
	// Read: the basics are no longer shown, the frame's status is.
	full.Basics = &basics
	a.Update(FrameMsg(full))
	a.Update(runes("1"))
	if v := a.View(); strings.Contains(v, "reading the cluster") {
		t.Errorf("a synced frame's overview still says the cluster is being read:\n%s", v)
	}
}

// At 80 columns the footer shows whole keys and always `? help`, which
// lists the ones left out: a key cut mid-word (`a add nod…`) or a footer
// without `? help` leaves the technician no way to find the rest.
func TestFooterAt80ColumnsShowsWholeKeysAndHelp(t *testing.T) {
	for i, name := range keymap.ScreenNames {
		for _, detail := range []bool{false, true} {
			a := newTestApp(80, 24)
			press(a, fmt.Sprint(i+1))
			if detail {
				press(a, "enter")
			}
			lines := strings.Split(ansi.Strip(a.View()), "\n")
			footer := lines[len(lines)-1]
			if !strings.Contains(footer, "? help") || strings.Contains(footer, "…") {
				t.Errorf("%s (detail %v): footer %q: want whole keys and ? help", name, detail, footer)
			}
			if ansi.StringWidth(footer) > 80 {
				t.Errorf("%s: footer wider than the terminal: %q", name, footer)
			}
		}
	}
}
