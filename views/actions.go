package views

import (
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
)

// Actions is what the console acts with. Without it (no cluster, tests of
// the look) the action keys say why nothing happens. The actions
// themselves are package flow's, as the CLI's are: the console asks and
// tells.
type Actions struct {
	Snap  *kube.Snapshot
	Audit *audit.Log
	// MigrateTimeout bounds the wait for a moved app to run (0: the
	// flows' default, as for the CLI).
	MigrateTimeout time.Duration
	// Unavailable says why actions cannot run (the audit log cannot be
	// written: an action that cannot be recorded is not taken).
	Unavailable string
	// JoinInfo is what a new node needs to join: role server, agent or
	// edgeworker, its name, and an EVE node's device UUID. nil: this device
	// has no cluster config to make it from. It reads local files only.
	JoinInfo func(role, name, uuid, ip string) (string, error)
}

// unavailable says why no action can be taken here, "" when they can: an
// action that cannot be recorded is not taken.
func (ac *Actions) unavailable() string {
	switch {
	case ac.Unavailable != "":
		return ac.Unavailable
	case ac.Audit == nil:
		return "no audit log to record actions in"
	}
	return ""
}

// recorder is where the flows started here record themselves.
func (ac *Actions) recorder() flow.Recorder { return flow.Recorder{Log: ac.Audit, Via: "console"} }

// action is one thing a screen does to the cluster, declared in that
// screen's file: its key (disabled when read-only), what the help says it
// does, and the dialog it opens on the selected row.
type action struct {
	key  key.Binding
	long string
	// row names what the action acts on ("node", "app"); "" when it needs
	// no row, no cluster and no record (it only fills in the command line).
	row string
	// start opens the action's dialog on the row whose ID is id.
	start func(a *App, id string) tea.Cmd
	// when says whether the action is offered now (nil: always).
	when func(a *App) bool
}

// actionBinding is act as one of screen s's keys: it starts only with a
// live cluster, an audit log to record in and a row to act on, and says
// which is missing otherwise.
func (a *App) actionBinding(act action, s screen) binding {
	var applies func() bool
	if act.when != nil {
		applies = func() bool { return act.when(a) }
	}
	return binding{key: act.key, long: act.long, section: sectionActions, footer: footerAction, applies: applies, run: func(tea.KeyMsg) tea.Cmd {
		if act.row == "" {
			return act.start(a, "")
		}
		switch {
		case a.actions != nil && a.actions.unavailable() != "":
			a.message = "actions unavailable: " + a.actions.unavailable()
			return nil
		case a.actions == nil || a.actions.Snap == nil || !a.frame.Synced:
			a.message = "actions need a live cluster connection"
			return nil
		}
		id := ""
		switch {
		case selectedOf(s) != nil:
			// A row open in detail is the one acted on.
			id = selectedOf(s).selectedID()
		case s.table() != nil:
			id = s.table().SelectedID()
		}
		if id == "" {
			a.message = act.key.Help().Desc + ": no " + act.row + " selected (clear the filter with esc)"
			return nil
		}
		return act.start(a, id)
	}}
}

// selected is a screen that says which row its actions act on (a row
// open in its detail, or the cursor's).
type selected interface{ selectedID() string }

// selectedOf is s as a selected, nil when it is not one.
func selectedOf(s screen) selected {
	if sel, ok := s.(selected); ok {
		return sel
	}
	return nil
}

// Abandon records the outcome of an action still running as the console
// ends; cause is why it ends (the signal), nil when it was closed.
func (a *App) Abandon(cause error) {
	if a.dialog != nil {
		a.dialog.abandon(cause)
	}
}
