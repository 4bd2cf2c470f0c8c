package views

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/kube/safety"
	"github.com/sitecon/sitecon/ui"
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
	if uuid, ok := strings.CutPrefix(rowID, configRowPrefix); ok {
		name := uuid
		for _, p := range a.frame.Agent.appProblemsIn(nil) {
			if p.UUID == uuid {
				name = p.App
			}
		}
		d := a.openDialog("migrate "+name, a.actions.recorder().Open(flow.ActionMigrate, name))
		d.refuse(name + " is not laid out in the cluster: nothing runs to move (its note says why)")
		return nil
	}
	a.openMigrateTo(app, func() []safety.MigrateTarget {
		return safety.MigrateTargets(app.Node, app.Requires, kube.NodeFacts(a.actions.Snap.Data().Nodes))
	})
	return nil
}

// openMigrateTo asks where app goes among the targets.
func (a *App) openMigrateTo(app kube.AppStatus, targets func() []safety.MigrateTarget) {
	d := a.openDialog("migrate "+app.Name, a.actions.recorder().Open(flow.ActionMigrate, app.Name))
	d.app = app
	if app.UUID == "" {
		d.refuse(app.Name + " has no app UUID: it was not laid out by a sitecon agent")
		return
	}
	d.targets = targets()
	// Nothing is chosen until the technician chooses: m, enter, y must not
	// move an app.
	d.choice = -1
	if !slices.ContainsFunc(d.targets, func(t safety.MigrateTarget) bool { return t.Eligible }) {
		var why []string
		for _, t := range d.targets {
			why = append(why, t.Node+": "+t.Why)
		}
		d.refuse(append([]string{"no node can take " + app.Name}, why...)...)
		return
	}
	d.state = dialogChoose
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
			lines := migrateLines(m.App, m.Target)
			if m.Restart {
				// The app is away from the node its layout names: no
				// override, a restart (flow.Migrate.Restart).
				lines[len(lines)-1] = "Its layout names " + m.Target + " already (a move home): no override is written; it is started again and the scheduler places it there."
			}
			d.lines = textLines(lines...)
			d.state, d.action = dialogConfirm, &m.Action
		}}
	}
}

// migrateLines say what a move does, to the app first: it restarts.
func migrateLines(app kube.AppStatus, target string) []string {
	what := fmt.Sprintf("%s stops on %s and starts again on %s.", app.Name, orDash(app.Node), target)
	if app.Kind == kube.AppKindVM {
		what = fmt.Sprintf("%s is a VM: it is shut down on %s and restarts on %s (its guest boots again).", app.Name, orDash(app.Node), target)
	}
	return []string{fmt.Sprintf("Move %s from %s to %s.", app.Name, orDash(app.Node), target), what,
		"An on-site override is written; the agents lay the app out on " + target + "."}
}

// chooseKey answers a key while the targets are listed: the arrows choose
// among the nodes that may take the app, enter plans the move to the one
// chosen, esc closes.
func (d *dialog) chooseKey(msg tea.KeyMsg) (closeIt bool, cmd tea.Cmd) {
	k := d.ctx.Keys
	switch {
	case key.Matches(msg, k.Back):
		return true, nil
	case key.Matches(msg, k.Up), key.Matches(msg, k.Down):
		step, from := 1, d.choice
		if key.Matches(msg, k.Up) {
			step = -1
			if from < 0 {
				from = len(d.targets)
			}
		}
		for i := from + step; i >= 0 && i < len(d.targets); i += step {
			if d.targets[i].Eligible {
				d.choice, d.unchosen = i, false
				break
			}
		}
	case key.Matches(msg, k.Enter):
		if d.choice < 0 {
			d.unchosen = true
			return false, nil
		}
		return false, d.chooseTarget()
	}
	return false, nil
}

// choiceLines list the targets, the chosen one marked and the others
// saying why they cannot take the app; keys is what the prompt says of
// its keys (nothing before they are taken).
func (d *dialog) choiceLines(keys func(string) string) []string {
	st, clean := d.ctx.Styles, ui.Clean
	out := []string{"", "Move to" + keys(" (↑/↓ to choose, enter; esc to cancel)") + ":"}
	for i, t := range d.targets {
		node := clean(t.Node)
		line := "    " + node
		switch {
		case i == d.choice:
			line = st.Selected.Render("  > " + node)
		case !t.Eligible:
			line = st.Muted.Render("    " + node + "  (" + clean(t.Why) + ")")
		}
		out = append(out, line)
	}
	if d.unchosen {
		out = append(out, "", st.Warn.Render("choose a node first: ↑/↓ marks one"))
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
