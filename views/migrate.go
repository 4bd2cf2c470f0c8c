package views

import (
	"context"
	"fmt"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
)

// The migrate dialog (m on the apps screen): the nodes that may take the
// app, the one chosen, the move planned and confirmed.

// openMigrate lists where the selected app may go.
func (a *App) openMigrate(rowID string) tea.Cmd {
	var app kube.AppStatus
	for _, x := range a.frame.Status.Apps {
		if x.Namespace+"/"+x.Object == rowID {
			app = x
		}
	}
	d := a.openDialog("migrate "+app.Name, a.actions.recorder().Open(flow.ActionMigrate, app.Name))
	d.app = app
	if app.UUID == "" {
		d.refuse(app.Name + " has no app UUID: it was not laid out by a sitecon agent")
		return nil
	}
	d.targets = kube.MigrateTargets(app, a.actions.Snap.Data().Nodes)
	d.choice = -1
	for i, t := range d.targets {
		if t.Eligible && d.choice < 0 {
			d.choice = i
		}
	}
	if d.choice < 0 {
		var why []string
		for _, t := range d.targets {
			why = append(why, t.Node+": "+t.Why)
		}
		d.refuse(append([]string{"no node can take " + app.Name}, why...)...)
		return nil
	}
	d.state = dialogChoose
	return nil
}

// chooseTarget plans the move to the highlighted target off the UI
// goroutine (it reads the app's workload), then asks.
func (d *dialog) chooseTarget() tea.Cmd {
	t := d.targets[d.choice]
	d.state, d.lines = dialogChecking, textLines("checking the move of "+d.app.Name+" to "+t.Node+"...")
	ac, app := d.actions, d.app
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m, err := flow.PlanMigrate(ctx, ac.recorder(), ac.Snap, flow.MigrateRequest{App: app.UUID, Target: t.Node, Timeout: ac.MigrateTimeout})
		return preflightMsg{apply: func(d *dialog) {
			d.lines = nil
			if err != nil {
				d.refused(err, true)
				return
			}
			d.record = m.Record
			d.lines = textLines(fmt.Sprintf("Move %s from %s to %s.", m.App.Name, orDash(m.App.Node), m.Target),
				"An on-site override is written; the agents lay the app out on "+m.Target+".")
			d.state, d.action = dialogConfirm, &m.Action
		}}
	}
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
