package views

import (
	"context"
	"fmt"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/kube/safety"
)

// Apps away from home: the overview's alert, the apps screen's note, and
// the return-home dialog (h on the apps screen).

// awayAlert is the overview's one alert for the apps away from home
// (away, longest away first): how many, and where the longest away is
// and since when, as a clock time and an age.
func awayAlert(away []kube.AppStatus, now time.Time) Alert {
	first := away[0]
	where := first.Name + " on " + first.Node
	since := first.AwaySince()
	if !since.IsZero() {
		where += fmt.Sprintf(" since %s, %s", clock(since, now), Age(since, now, true))
	} else {
		since = now
	}
	if len(away) > 1 {
		where += fmt.Sprintf("; +%d more", len(away)-1)
	}
	noun := "apps"
	if len(away) == 1 {
		noun = "app"
	}
	a := Alert{Since: since, ID: doctor.IDAppAway, Text: fmt.Sprintf("%d %s away from home (%s)", len(away), noun, where),
		Next:    "once their designated nodes are Ready: H on the apps screen (each in turn), or sitecon return-home --all",
		NextCLI: "once their designated nodes are Ready: sitecon return-home --all"}
	if len(away) == 1 {
		a.Subject = appSubject(first)
		a.Why = "designated " + first.DesignatedNode
		a.Next = "once " + first.DesignatedNode + " is Ready: h on the apps screen, or sitecon return-home " + first.Name
		a.NextCLI = "once " + first.DesignatedNode + " is Ready: sitecon return-home " + first.Name
	}
	return a
}

// awayNote is the apps screen's note on an app away from home: since when
// (its designated node is in its own column).
func awayNote(a kube.AppStatus, now time.Time) string {
	since := a.AwaySince()
	if since.IsZero() {
		return "away from home"
	}
	return "away since " + clock(since, now)
}

// clock is t's time of day where now is read (the header's clock).
func clock(t, now time.Time) string { return t.In(now.Location()).Format("15:04") }

// openReturnHome plans the selected app's move home off the UI goroutine
// (the flow reads its workload) and asks.
func (a *App) openReturnHome(rowID string) tea.Cmd {
	var app kube.AppStatus
	for _, x := range a.frame.Status.Apps {
		if x.Namespace+"/"+x.Object == rowID {
			app = x
		}
	}
	name := app.Name
	if uuid, ok := strings.CutPrefix(rowID, configRowPrefix); ok {
		name = uuid
		for _, p := range a.frame.Agent.appProblemsIn(nil) {
			if p.UUID == uuid {
				name = p.App
			}
		}
	}
	d := a.openDialog("return "+name+" home", a.actions.recorder().Open(flow.ActionReturnHome, name))
	switch {
	case app.Name == "":
		d.refuse(name + " is not laid out in the cluster: nothing runs to move (its note says why)")
		return nil
	case app.UUID == "":
		d.refuse(app.Name + " has no app UUID: it was not laid out by a sitecon agent")
		return nil
	}
	d.app = app
	d.state, d.lines = dialogChecking, textLines("checking "+app.Name+"'s designated node "+orDash(app.DesignatedNode)+"...")
	ac := d.actions
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rh, err := flow.PlanReturnHome(ctx, ac.recorder(), ac.Snap, flow.ReturnHomeRequest{App: app.UUID, Timeout: ac.MigrateTimeout})
		return preflightMsg{apply: func(d *dialog) { d.onReturnHome(rh, err) }}
	}
}

// onReturnHome shows the plan: refused, nothing to do, or the preflight
// and the question (the node's name typed when it warns).
func (d *dialog) onReturnHome(rh *flow.ReturnHome, err error) {
	d.lines = nil
	switch {
	case err != nil:
		d.refused(err, true)
		return
	case rh.AlreadyHome():
		d.record = rh.Record
		msg, err := rh.NothingToDo()
		d.state, d.result = dialogDone, msg
		d.notRecorded(err)
		return
	}
	d.record = rh.Record
	d.lines = returnHomeLines(rh.Verdict, rh.Move)
	if d.typed = rh.TypedName(); d.typed != "" {
		d.input.Focus()
	}
	d.state, d.action = dialogConfirm, &rh.Move.Action
}

// returnHomeLines are the preflight and what the move does to the app.
func returnHomeLines(v safety.ReturnHomeVerdict, m *flow.Migrate) []dialogLine {
	lines := textLines(fmt.Sprintf("Return %s home: from %s to its designated node %s.", v.App, orDash(v.From), v.Home))
	for _, w := range v.Warnings {
		lines = append(lines, dialogLine{lineWarning, "WARNING  " + w})
	}
	if len(v.Warnings) == 0 {
		lines = append(lines, dialogLine{lineNote, "ok       " + v.Home + " is Ready and schedulable"})
	}
	for _, n := range v.Notes {
		lines = append(lines, dialogLine{lineNote, "note     " + n})
	}
	what := fmt.Sprintf("%s stops on %s and starts again on %s.", v.App, orDash(v.From), v.Home)
	if m.App.Kind == kube.AppKindVM {
		what = fmt.Sprintf("%s is a VM: it is shut down on %s and restarts on %s (its guest boots again).", v.App, orDash(v.From), v.Home)
	}
	how := "Its layout names " + v.Home + " already: no override is written."
	if !m.Restart {
		how = "An on-site override is written; the agents lay the app out on " + v.Home + "."
	}
	return append(lines, textLines(what, how)...)
}

// homeWalk is H on the apps screen under way: the apps away from home
// still to ask about (their rows, longest away first), and what became
// of those asked, for the line said at the end.
type homeWalk struct {
	queue    []string
	current  string
	total    int
	returned int
	notHome  []string
	stopped  bool // a question was cancelled: the rest were not asked
}

// openReturnHomeAll walks every app away from home, as sitecon
// return-home --all does: one return-home dialog after the other, each
// with its own preflight, question and record; a refused app changes
// nothing and the walk goes on to the next.
func (a *App) openReturnHomeAll(string) tea.Cmd {
	switch {
	case a.actions != nil && a.actions.unavailable() != "":
		a.message = "actions unavailable: " + a.actions.unavailable()
		return nil
	case a.actions == nil || a.actions.Snap == nil || !a.frame.Synced:
		a.message = "actions need a live cluster connection"
		return nil
	}
	away := kube.AwayApps(a.frame.Status.Apps)
	if len(away) == 0 {
		a.message = "no app runs away from its designated node; nothing to do"
		return nil
	}
	w := &homeWalk{total: len(away)}
	for _, app := range away {
		w.queue = append(w.queue, appRowID(app))
	}
	a.home = w
	return a.nextHome()
}

// nextHome opens the next app's dialog of the walk, or ends it with a
// line that says what came home and what did not, and why.
func (a *App) nextHome() tea.Cmd {
	w := a.home
	if len(w.queue) == 0 {
		a.home = nil
		end := "all home"
		if w.stopped {
			end = "return home stopped"
		}
		msg := fmt.Sprintf("%s: %d of %d app(s) returned home", end, w.returned, w.total)
		if len(w.notHome) > 0 {
			msg += "; not returned: " + strings.Join(w.notHome, "; ")
		}
		a.message = msg
		return nil
	}
	w.current, w.queue = w.queue[0], w.queue[1:]
	return a.openReturnHome(w.current)
}

// homeDialogClosed notes how the walk's current dialog ended (d) and
// opens the next.
func (a *App) homeDialogClosed(d *dialog) tea.Cmd {
	w := a.home
	name := appLabel(&a.frame, w.current)
	switch {
	case d.failed:
		var why []string
		for _, l := range d.lines {
			if l.kind == lineRefused {
				why = append(why, l.text)
			}
		}
		if len(why) == 0 {
			why = append(why, d.result)
		}
		w.notHome = append(w.notHome, name+" ("+strings.Join(why, ", ")+")")
	case d.state == dialogDone:
		w.returned++
	default:
		// Esc on one app's question stops the walk: the next question
		// does not follow a moment later.
		w.notHome = append(w.notHome, name+" (cancelled)")
		for _, rest := range w.queue {
			w.notHome = append(w.notHome, appLabel(&a.frame, rest)+" (not asked: the walk was stopped)")
		}
		w.queue, w.stopped = nil, true
	}
	return a.nextHome()
}
