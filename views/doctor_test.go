package views

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest"

	"github.com/sitecon/sitecon/doctor"
)

// doctorReport is what the doctor says of a site with node-b lost: an
// error, warnings with long evidence, infos and oks, in the doctor's own
// order (by area).
func doctorReport() doctor.Report {
	since := now.Add(-70 * time.Second)
	fs := []doctor.Finding{
		{ID: doctor.IDEtcdQuorum, Area: doctor.AreaControlPlane, Severity: doctor.Warn, Summary: "1 etcd member down; quorum survives no further server loss",
			Evidence: []string{"members: node-a (leader), node-b (unreachable), node-c"}, Next: "bring node-b back before any other server goes down"},
		{ID: doctor.IDNodeNotReady, Area: doctor.AreaNodes, Severity: doctor.Error, Subject: "node-b", Since: &since,
			Summary:  "node-b is Unknown for 1m10s: Kubelet stopped posting node status",
			Evidence: []string{"Ready=Unknown since " + since.Format(time.RFC3339) + " · NodeStatusUnknown: Kubelet stopped posting node status. The node's lease was last renewed 1m10s ago by node-b's kubelet"},
			Next:     "power and network of node-b: is it on, does it answer on the cluster network? sitecon status --config shows what it reports"},
		{ID: doctor.IDNodeCordoned, Area: doctor.AreaNodes, Severity: doctor.Warn, Subject: "node-c", Summary: "node-c is cordoned for 3h",
			Next: "sitecon uncordon node-c when its maintenance is over"},
		{ID: doctor.IDVolumeDegraded, Area: doctor.AreaStorage, Severity: doctor.Warn, Subject: "vol-hmi", Since: &since,
			Summary: "volume vol-hmi is degraded for 1m10s", Evidence: []string{"replica on node-b failed", "replica on node-c rebuilding, 42 %"},
			Next: "wait for the rebuild on node-c; bring node-b back"},
		{ID: doctor.IDAppAway, Area: doctor.AreaApps, Severity: doctor.Info, Subject: "hmi", Summary: "hmi runs on node-a, away from node-b since 1m15s"},
		{ID: doctor.IDStatsLeaderLost, Area: doctor.AreaNodes, Severity: doctor.OK, Summary: "stats leader: ok"},
	}
	doctor.Sort(fs)
	return doctor.Report{At: now, Worst: doctor.Error, Findings: fs}
}

// doctorApp is a console whose doctor returns report, counting its runs.
func doctorApp(w, h int, report doctor.Report, runs *atomic.Int32) *App {
	a := NewApp(testContext(w, h))
	a.Update(FrameMsg(sampleFrame()))
	a.SetDoctor(context.Background(), func(context.Context) doctor.Report {
		runs.Add(1)
		return report
	})
	return a
}

// 7 opens the doctor screen and starts a run in the background: the
// screen says it is running until the report comes, then lists the
// findings worst first with their id, severity and subject, and says when
// it last ran. r runs it again (not while a run is under way).
func TestDoctorScreenRunsAndListsWorstFirst(t *testing.T) {
	var runs atomic.Int32
	a := doctorApp(100, 30, doctorReport(), &runs)
	cmd := press(a, "7")
	if a.Screen() != "doctor" || cmd == nil {
		t.Fatalf("7: screen %s, no run started: %v", a.Screen(), cmd == nil)
	}
	if v := a.View(); !strings.Contains(v, "running…") || runs.Load() != 0 {
		t.Errorf("before the report comes the screen does not say it runs (runs %d):\n%s", runs.Load(), v)
	}
	if reacts(a, keyMsg("r")) {
		t.Errorf("r acts while a run is under way")
	}
	runCmd(a, cmd)
	v := ansi.Strip(a.View())
	if runs.Load() != 1 || !strings.Contains(v, "last ran 03:00, 0s ago: 1 error, 3 warn, 1 info, 1 ok") {
		t.Fatalf("after the run (%d): the screen:\n%s", runs.Load(), v)
	}
	var order []int
	for _, id := range []string{doctor.IDNodeNotReady, doctor.IDEtcdQuorum, doctor.IDAppAway, doctor.IDStatsLeaderLost} {
		order = append(order, strings.Index(v, id))
	}
	for i := 1; i < len(order); i++ {
		if order[i-1] < 0 || order[i] < order[i-1] {
			t.Errorf("findings not worst first (%v):\n%s", order, v)
		}
	}
	if row := lineOf(v, doctor.IDNodeNotReady); !strings.Contains(row, "error") || !strings.Contains(row, "node-b") {
		t.Errorf("the error's row lacks its severity or subject: %q", row)
	}
	// Showing the screen again does not run it again; r does.
	press(a, "1", "7")
	if runs.Load() != 1 {
		t.Errorf("showing the screen again ran the doctor again")
	}
	runCmd(a, press(a, "r"))
	if runs.Load() != 2 {
		t.Errorf("r did not run the doctor again: %d runs", runs.Load())
	}
	if !strings.Contains(strings.Join(helpKeyLines(a), "\n"), "r  run the doctor again") {
		t.Errorf("the help does not list r:\n%s", strings.Join(helpKeyLines(a), "\n"))
	}
}

// Enter on a finding opens its detail: all its evidence and its next
// step, wrapped, never cut; esc goes back to the list.
func TestDoctorFindingDetail(t *testing.T) {
	var runs atomic.Int32
	a := doctorApp(80, 24, doctorReport(), &runs)
	runCmd(a, press(a, "7"))
	selectRow(t, a, "7", doctor.IDNodeNotReady+" node-b")
	press(a, "enter")
	v := ansi.Strip(a.View())
	flat := strings.Join(strings.Fields(v), " ")
	f := doctorReport().Findings[0]
	for _, want := range []string{f.ID, "error · nodes", "node-b", f.Evidence[0], f.Next} {
		if !strings.Contains(flat, strings.Join(strings.Fields(want), " ")) {
			t.Errorf("the detail lacks %q:\n%s", want, v)
		}
	}
	for _, l := range strings.Split(v, "\n") {
		if w := ansi.StringWidth(l); w > 80 {
			t.Errorf("a line %d wide: %q", w, l)
		}
	}
	press(a, "esc")
	if tb := a.screens[a.current].table(); tb == nil || !strings.Contains(a.View(), "FINDING") {
		t.Errorf("esc did not go back to the findings:\n%s", a.View())
	}
}

// With the cluster API down the screen shows what the real doctor says:
// SC-API-UNREACHABLE, its reason and next step, and the checks of this
// node that still ran.
func TestDoctorScreenWithTheAPIDown(t *testing.T) {
	a := NewApp(testContext(100, 30))
	a.Update(FrameMsg(Frame{Problem: "the API server at https://127.0.0.1:6443 does not answer", Synced: false}))
	k3sDir := t.TempDir()
	a.SetDoctor(context.Background(), func(ctx context.Context) doctor.Report {
		return doctor.Diagnose(ctx, doctor.Options{ConfigProblem: "the API server at https://127.0.0.1:6443 does not answer", K3sDataDir: k3sDir})
	})
	runCmd(a, press(a, "7"))
	v := ansi.Strip(a.View())
	if !strings.Contains(v, doctor.IDAPIUnreachable) || !strings.Contains(v, "last ran") {
		t.Fatalf("the API down: the screen:\n%s", v)
	}
	selectRow(t, a, "7", doctor.IDAPIUnreachable+" ")
	press(a, "enter")
	v = strings.Join(strings.Fields(ansi.Strip(a.View())), " ")
	for _, want := range []string{"does not answer", "more than half the servers are up"} {
		if !strings.Contains(v, want) {
			t.Errorf("the finding's detail lacks %q:\n%s", want, a.View())
		}
	}
}

// Without a doctor (no SetDoctor) the screen says so and offers no r; a
// read-only console runs the doctor (it only reads) and opens findings.
func TestDoctorScreenAvailability(t *testing.T) {
	a := newTestApp(80, 24)
	if cmd := press(a, "7"); cmd != nil {
		t.Errorf("7 started something with no doctor")
	}
	if v := a.View(); !strings.Contains(v, "not available here") || reacts(a, keyMsg("r")) {
		t.Errorf("no doctor: r acts or the screen does not say so:\n%s", v)
	}
	ctx := testContext(80, 24)
	ctx.ReadOnly = true
	ro := NewApp(ctx)
	ro.Update(FrameMsg(sampleFrame()))
	var runs atomic.Int32
	ro.SetDoctor(context.Background(), func(context.Context) doctor.Report { runs.Add(1); return doctorReport() })
	runCmd(ro, press(ro, "7"))
	runCmd(ro, press(ro, "r"))
	press(ro, "enter")
	if runs.Load() != 2 || !strings.Contains(ro.View(), "Next step") {
		t.Errorf("read-only: %d runs, the detail:\n%s", runs.Load(), ro.View())
	}
}

// The doctor screen at 80x24 keeps each finding's severity, id and
// subject whole.
func TestDoctorFitsAt80(t *testing.T) {
	var runs atomic.Int32
	a := doctorApp(80, 24, doctorReport(), &runs)
	runCmd(a, press(a, "7"))
	v := ansi.Strip(a.View())
	lines := strings.Split(v, "\n")
	if len(lines) > 24 {
		t.Errorf("%d lines", len(lines))
	}
	for _, l := range lines {
		if w := ansi.StringWidth(l); w > 80 {
			t.Errorf("a line %d wide: %q", w, l)
		}
	}
	for _, f := range doctorReport().Findings {
		row := lineOf(v, f.ID)
		if !strings.Contains(row, f.Severity.String()) || !strings.Contains(row, orDash(f.Subject)) {
			t.Errorf("%s's row lacks its severity or subject whole: %q", f.ID, row)
		}
	}
}

// Golden frames of the doctor screen and a finding's detail, at 80x24 and
// 100x30 (go test ./views -run GoldenDoctor -update rewrites them).
func TestGoldenDoctor(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {100, 30}} {
		for _, c := range []struct {
			name string
			keys []tea.KeyMsg
		}{{"doctor-findings", nil}, {"doctor-finding-detail", []tea.KeyMsg{{Type: tea.KeyEnter}}}} {
			var runs atomic.Int32
			a := doctorApp(size[0], size[1], doctorReport(), &runs)
			runCmd(a, press(a, "7"))
			tm := teatest.NewTestModel(t, a, teatest.WithInitialTermSize(size[0], size[1]))
			for _, k := range c.keys {
				tm.Send(k)
			}
			tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
			got := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*App).View() + "\n"
			path := filepath.Join("testdata", fmt.Sprintf("%s-%dx%d.golden", c.name, size[0], size[1]))
			checkGolden(t, path, got)
		}
	}
}
