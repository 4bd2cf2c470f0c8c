package views

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/kube/safety"
	"github.com/sitecon/sitecon/ui"
)

// awayFrame is the site after node-b's failover, node-b back: historian
// went to node-c twelve minutes ago, hmi to node-a 75 s ago, both
// designated node-b.
func awayFrame() Frame {
	f := sampleFrame()
	st := &f.Status
	for i := range st.Nodes {
		if st.Nodes[i].Name == "node-b" {
			st.Nodes[i].Ready, st.Nodes[i].Status, st.Nodes[i].Reason = true, kube.NodeReady, ""
		}
	}
	st.NodesReady = st.NodesTotal
	at := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	st.Apps = []kube.AppStatus{
		{Name: "hmi", UUID: "0e1f0000-0000-4000-8000-000000000001", Kind: kube.AppKindVM, Mode: kube.AppModeAuto, DesignatedNode: "node-b", Node: "node-a",
			Phase: "Running", Ready: true, Object: "hmi-x", VNCPort: 5901, Started: at(75 * time.Second),
			LastMove: &kube.AppMove{At: now.Add(-75 * time.Second), From: "node-b", To: "node-a"}},
		{Name: "historian", UUID: "0e1f0000-0000-4000-8000-000000000002", Kind: kube.AppKindVM, Mode: kube.AppModeAuto, DesignatedNode: "node-b", Node: "node-c",
			Phase: "Running", Ready: true, Object: "historian-y", Started: at(12 * time.Minute)},
		{Name: "plc-gateway", UUID: "0e1f0000-0000-4000-8000-000000000003", Kind: kube.AppKindContainer, Mode: kube.AppModeAuto, DesignatedNode: "node-c", Node: "node-c",
			Phase: "Running", Ready: true, Object: "plc-gateway-1", Started: at(3 * time.Hour)},
	}
	return f
}

// Golden frames of the overview's away line and the apps screen's notes,
// at the device's 80x24 and at 100 columns (go test ./views -run Away
// -update rewrites them). The longest away is named with its clock time
// and age; the rest are counted.
func TestAwayGoldenFrames(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {100, 30}} {
		for _, screen := range []struct {
			key, name, want string
		}{
			{"1", "overview", "! 2 apps away from home (historian on node-c since 02:48, 12m; +1 more)"},
			{"5", "apps", "away since 02:48"},
		} {
			tm := teatest.NewTestModel(t, NewApp(testContext(0, 0)), teatest.WithInitialTermSize(size[0], size[1]))
			tm.Send(FrameMsg(awayFrame()))
			tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(screen.key)})
			tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
			a := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*App)
			got := a.View() + "\n"
			if !strings.Contains(got, screen.want) {
				t.Errorf("%s at %dx%d does not say %q:\n%s", screen.name, size[0], size[1], screen.want, got)
			}
			for i, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
				if w := len([]rune(l)); w > size[0] {
					t.Errorf("%s at %dx%d: line %d is %d wide: %q", screen.name, size[0], size[1], i, w, l)
				}
			}
			path := filepath.Join("testdata", fmt.Sprintf("%s-away-%dx%d.golden", screen.name, size[0], size[1]))
			checkGolden(t, path, got)
		}
	}
}

// One app away: said with its name, where and since when; none away: no
// alert; an app whose start is unknown is still counted.
func TestAwayAlert(t *testing.T) {
	f := awayFrame()
	f.Status.Apps = f.Status.Apps[:1]
	if got := alertTexts(&f); !strings.Contains(got, "1 app away from home (hmi on node-a since 02:58, 75s)") {
		t.Errorf("one app away:\n%s", got)
	}
	f.Status.Apps[0].Started, f.Status.Apps[0].LastMove = nil, nil
	if got := alertTexts(&f); !strings.Contains(got, "1 app away from home (hmi on node-a)") {
		t.Errorf("one app away, since unknown:\n%s", got)
	}
	f.Status.Apps[0].Node = "node-b"
	if got := alertTexts(&f); strings.Contains(got, "away from home") {
		t.Errorf("an app home is not away:\n%s", got)
	}
}

func alertTexts(f *Frame) string {
	var out []string
	for _, a := range Alerts(f, now) {
		out = append(out, a.Text)
	}
	return strings.Join(out, "\n")
}

// h on the apps screen opens the return-home dialog of the app under the
// cursor; an app with no UUID (not laid out by an agent) is refused and
// recorded.
func TestReturnHomeKeyOpensItsDialog(t *testing.T) {
	a := actionApp(t)
	a.Update(runes("5"))
	a.Update(runes("h"))
	if a.dialog == nil || a.dialog.title != "return hmi home" || a.dialog.result != "refused: nothing was changed" ||
		!strings.Contains(a.View(), "hmi has no app UUID") {
		t.Fatalf("h on hmi (no UUID): dialog %+v\n%s", a.dialog, a.View())
	}
	if rec := a.dialog.record.Audit(); rec.Action != flow.ActionReturnHome || rec.Outcome != audit.OutcomeRefused {
		t.Errorf("the refusal's record: %+v", rec)
	}
	a.dialog = nil // closed
	a.frame.Status.Apps[0].UUID = "0e1f0000-0000-4000-8000-000000000001"
	a.Update(runes("h"))
	if a.dialog == nil || a.dialog.state != dialogChecking || !strings.Contains(a.View(), "checking hmi's designated node node-b") {
		t.Fatalf("h on hmi: dialog %+v\n%s", a.dialog, a.View())
	}
}

// The plan the dialog shows: a warning needs the home node's name typed
// (y alone does not go on); an app home already is nothing to do, said
// and recorded.
func TestReturnHomeDialog(t *testing.T) {
	app := awayFrame().Status.Apps[1]
	plan := func(a *App, v safety.ReturnHomeVerdict) *flow.ReturnHome {
		rec := a.actions.recorder().Open(flow.ActionReturnHome, app.Name)
		m := &flow.Migrate{Action: flow.Action{Record: rec}, App: app, Target: "node-b", Restart: true}
		return &flow.ReturnHome{Record: rec, Verdict: v, Move: m}
	}
	t.Run("a warning needs the name typed", func(t *testing.T) {
		a := actionApp(t)
		a.Update(runes("5"))
		v := safety.ReturnHomeVerdict{App: "historian", From: "node-c", Home: "node-b",
			Warnings: []string{"node-b holds no healthy replica of volume vol-hist: its replica there is still rebuilding"}}
		rh := plan(a, v)
		d := a.openDialog("return historian home", rh.Record)
		d.onReturnHome(rh, nil)
		stub(t, a)
		a.Update(ui.PromptArmedMsg{}) // drawn
		advance(a, readTime)
		view := a.View()
		for _, want := range []string{"WARNING  node-b holds no healthy replica of volume vol-hist", "historian is a VM: it is shut down on node-c and restarts on node-b",
			"Its layout names node-b already: no override is written.", `Type "node-b"`} {
			if !strings.Contains(view, want) {
				t.Errorf("the dialog does not say %q:\n%s", want, view)
			}
		}
		a.Update(runes("y"))
		a.Update(enter)
		if started(a) {
			t.Fatalf("y and enter went on without the node's name typed")
		}
		a.dialog.input.SetValue("") // the y typed is cleared
		a.Update(runes("node-b"))
		a.Update(enter)
		if !started(a) {
			t.Fatalf("the name typed did not start it:\n%s", a.View())
		}
	})
	t.Run("already home", func(t *testing.T) {
		a := actionApp(t)
		a.Update(runes("5"))
		rh := plan(a, safety.ReturnHomeVerdict{App: "historian", From: "node-b", Home: "node-b", AlreadyHome: true})
		rh.Move = nil
		d := a.openDialog("return historian home", rh.Record)
		d.onReturnHome(rh, nil)
		if d.state != dialogDone || d.failed || d.result != "historian runs on its designated node node-b already; nothing to do" {
			t.Fatalf("already home: state %v, result %q", d.state, d.result)
		}
		if rec := rh.Record.Audit(); rec.Outcome != audit.OutcomeDone {
			t.Errorf("the record of nothing to do: %+v", rec)
		}
	})
}

// H on the apps screen walks every app away from home, longest away
// first, one return-home dialog each (as sitecon return-home --all): a
// refused app changes nothing, is recorded as refused, and the walk goes
// on; the end says what came home and, for each app that did not, why.
// H is not offered with no app away, nor on a read-only console.
func TestReturnHomeAllWalksEveryAwayApp(t *testing.T) {
	a := actionApp(t)
	f := awayFrame()
	// Not laid out by an agent: each is refused by the console itself.
	for i := range f.Status.Apps {
		f.Status.Apps[i].UUID = ""
	}
	a.Update(FrameMsg(f))
	a.Update(runes("5"))
	if !strings.Contains(strings.Join(helpKeyLines(a), "\n"), "H  return every app away from home") {
		t.Fatalf("the help does not offer H:\n%s", strings.Join(helpKeyLines(a), "\n"))
	}
	a.Update(runes("H"))
	var titles []string
	for a.dialog != nil {
		titles = append(titles, a.dialog.title)
		if rec := a.dialog.record.Audit(); rec.Action != flow.ActionReturnHome || rec.Outcome != audit.OutcomeRefused {
			t.Errorf("%s: record %+v", a.dialog.title, rec)
		}
		a.Update(ui.PromptArmedMsg{})
		advance(a, readTime)
		a.Update(runes("x")) // closes the refused dialog
		if len(titles) > 5 {
			t.Fatal("the walk does not end")
		}
	}
	if strings.Join(titles, ", ") != "return historian home, return hmi home" {
		t.Errorf("the walk asked %v; want historian (12m away) then hmi (75s)", titles)
	}
	for _, want := range []string{"all home: 0 of 2 app(s) returned home", "historian (historian has no app UUID", "hmi (hmi has no app UUID"} {
		if !strings.Contains(a.message, want) {
			t.Errorf("the end of the walk says %q, lacking %q", a.message, want)
		}
	}

	home := awayFrame()
	home.Status.Apps = home.Status.Apps[2:] // plc-gateway, at home
	a.Update(FrameMsg(home))
	a.message = "" // the walk's line, which any key clears
	if reacts(a, runes("H")) {
		t.Errorf("H acts with no app away from home")
	}
	ctx := testContext(120, 30)
	ctx.ReadOnly = true
	ro := NewApp(ctx)
	ro.Update(FrameMsg(awayFrame()))
	ro.Update(runes("5"))
	if reacts(ro, runes("H")) {
		t.Errorf("H acts on a read-only console")
	}
}

// The console's maintenance walk, done, says which apps run away from
// home and offers sitecon return-home --all; it runs nothing.
func TestMaintenanceEndOffersReturnHome(t *testing.T) {
	a := actionApp(t)
	a.Update(FrameMsg(awayFrame()))
	a.openMaintenance("node-b")
	if a.dialog == nil || a.dialog.afterDone == nil {
		t.Fatalf("no maintenance dialog with its end line")
	}
	a.dialog.onTask(ui.TaskDoneMsg{})
	got := strings.Join(a.dialog.progress, "\n")
	if !strings.Contains(got, "2 app(s) away from home: historian (on node-c, home node-b), hmi (on node-a, home node-b)") ||
		!strings.Contains(got, "sitecon return-home --all") {
		t.Errorf("the walk's end says:\n%s", got)
	}
}

// Esc on one app's question stops the whole walk: the technician is not
// asked the next app's question a moment later. The apps not asked are
// said, and nothing is done for them.
func TestReturnHomeAllStopsWhenOneIsCancelled(t *testing.T) {
	a := actionApp(t)
	a.Update(FrameMsg(awayFrame()))
	a.Update(runes("5"))
	a.home = &homeWalk{total: 2, current: "/historian", queue: []string{"/hmi-x"}}
	a.homeDialogClosed(&dialog{state: dialogConfirm})
	if a.dialog != nil || a.home != nil {
		t.Fatalf("the walk went on after a cancel (dialog %v)", a.dialog != nil)
	}
	for _, want := range []string{"return home stopped: 0 of 2 app(s) returned home", "(cancelled)", "not asked: the walk was stopped"} {
		if !strings.Contains(a.message, want) {
			t.Errorf("the walk's end says %q, lacking %q", a.message, want)
		}
	}
}
