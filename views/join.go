package views

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/ui"
)

// Join info for a new node: :add (a on the nodes screen) and the hand-on
// of a :replace.

// canMakeJoinInfo says whether command, which hands out a join bundle, may
// run here; if not, the message says why.
func (a *App) canMakeJoinInfo(command string) bool {
	switch {
	case a.ctx.ReadOnly:
		a.message = "read-only: " + command + " is not available (a join bundle carries the cluster token)"
	case a.actions == nil || a.actions.JoinInfo == nil:
		a.message = command + " needs this node's cluster config (sitecon --config FILE)"
	case a.actions.unavailable() != "":
		a.message = "actions unavailable: " + a.actions.unavailable()
	default:
		return true
	}
	return false
}

// joinInfo is what a new node needs to join, made from this node's
// cluster config; a console started without one (the demo's) is told how
// to give it one.
func (a *App) joinInfo(role, name, uuid, ip string) (string, error) {
	text, err := a.actions.JoinInfo(role, name, uuid, ip)
	if errors.Is(err, fs.ErrNotExist) {
		err = fmt.Errorf("%w: start the console with this node's cluster config (sitecon --config FILE)", err)
	}
	return text, err
}

// joinInfoLines is join info as a dialog shows it on a screen width wide.
// A bundle is one long word: it is wrapped rather than cut at the screen's
// edge (sitecon form --join ignores the breaks).
func joinInfoLines(text string, width int) []string {
	var lines []string
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		lines = append(lines, ui.Wrap(line, max(width-1, 20))...)
	}
	return lines
}

// addNode shows what a new node needs to join (:add ROLE NAME [UUID]): the
// join bundle for an EVE node, the k3s agent setup for an edgeworker.
func (a *App) addNode(args []string) {
	const usage = "usage: :add server|agent|edgeworker NAME [DEVICE-UUID]"
	switch {
	case !a.canMakeJoinInfo(":add"):
		return
	case len(args) < 2 || len(args) > 3:
		a.message = usage
		return
	}
	role, name, uuid := args[0], args[1], ""
	if len(args) == 3 {
		uuid = args[2]
	}
	// The join info carries the cluster token: it is shown only once the
	// log holds who asked for it (without the token), as the CLI does.
	add, err := flow.PlanAdd(a.actions.recorder(), "add-node", name, "role "+role, func() (string, error) {
		return a.joinInfo(role, name, uuid, "")
	})
	if err != nil {
		a.message = withoutNotRecorded(err).Error() + " — " + usage
		return
	}
	var shown *dialog
	err = add.Show(func(text string) error {
		shown = a.openDialog("add "+name, add.Record)
		shown.lines = textLines(joinInfoLines(text, a.ctx.Width)...)
		shown.state, shown.result = dialogDone, "join info for "+name+" ("+role+")"
		return nil
	})
	switch {
	case shown != nil:
		shown.notRecorded(err)
	case err != nil:
		// The intent could not be written: nothing is shown.
		a.message = "not shown: the audit log cannot record it: " + err.Error()
	}
}
