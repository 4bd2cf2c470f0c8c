package views

import (
	"context"
	"fmt"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/kube/safety"
)

// The drain dialog: drain (d), remove (X) and :replace, which all drain a
// node first and share its preflight.

// openDrain opens the dialog of a drain of node (drain, remove or replace,
// by rec's action) and starts its preflight; newDrain makes the flow from
// it (nil: a drain or removal of its own).
func (a *App) openDrain(title string, rec *flow.Record, node string, newDrain func(safety.Preflight, error) (*flow.Drain, error)) tea.Cmd {
	d := a.openDialog(title, rec)
	d.lines = textLines("checking what draining " + node + " would do...")
	d.newDrain = newDrain
	snap := a.actions.Snap
	if snap == nil {
		return nil
	}
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := flow.CheckDrain(ctx, snap, rec.Audit().Action, node, "", flow.DefaultDrainOptions())
		return preflightMsg{p: p, err: err}
	}
}

// openMaintenance opens the dialog of node's maintenance walk (M), the
// flow `sitecon maintenance` runs: the drain's preflight, then, confirmed,
// the drain, "power it off or reboot it now" with the node's state, its
// return, its volumes healthy again, the uncordon, each step said as it
// comes. Closing the dialog while the walk runs cancels it, and the walk
// leaves the node as it found it.
func (a *App) openMaintenance(node string) tea.Cmd {
	rec := a.actions.recorder().Open(flow.ActionMaintenance, node)
	snap := a.actions.Snap
	cmd := a.openDrain("maintenance "+node, rec, node, func(p safety.Preflight, err error) (*flow.Drain, error) {
		m, err := flow.NewMaintenance(rec, snap, p, err, flow.MaintenanceOptions{Drain: flow.DefaultDrainOptions()})
		if err != nil {
			return nil, err
		}
		return m.Drain, nil
	})
	if a.dialog != nil {
		// Done, the walk says which apps run away from home now and
		// offers the command that returns them (as sitecon maintenance
		// does); it runs nothing.
		a.dialog.afterDone = func() string { return flow.AwayLine(kube.AwayApps(a.frame.Status.Apps)) }
	}
	return cmd
}

// replaceNode replaces a device (:replace OLD NEW DEVICE-UUID [server|agent]):
// OLD is drained and removed as by X, then NEW's join bundle is shown with
// OLD's cluster address, so the site's addressing stays as it was. The
// bundle is made before anything changes: without this node's cluster
// config there is none, and nothing is removed.
func (a *App) replaceNode(args []string) tea.Cmd {
	const usage = "usage: :replace OLD NEW DEVICE-UUID [server|agent]"
	switch {
	case !a.canMakeJoinInfo(":replace"):
		return nil
	case len(args) < 3 || len(args) > 4:
		a.message = usage
		return nil
	}
	old, name, uuid, role := args[0], args[1], args[2], "server"
	if len(args) == 4 {
		role = args[3]
	}
	if role != "server" && role != "agent" {
		a.message = fmt.Sprintf("the new node's role must be server or agent, not %q — %s", role, usage)
		return nil
	}
	var data kube.Data
	if a.actions.Snap != nil {
		if !a.frame.Synced {
			a.message = flow.NotRead
			return nil
		}
		data = a.actions.Snap.Data()
	}
	title := "replace " + old
	rp, err := flow.PlanReplace(a.actions.recorder(), data, a.frame.Status.Nodes, flow.ReplaceRequest{Old: old, New: name,
		Bundle: func(ip string) (string, error) { return a.joinInfo(role, name, uuid, ip) }})
	if err != nil {
		a.openDialog(title, nil).refused(err, true)
		return nil
	}
	snap := a.actions.Snap
	cmd := a.openDrain(title, rp.Record, old, func(p safety.Preflight, err error) (*flow.Drain, error) {
		return rp.Drain(snap, p, err, flow.DefaultDrainOptions())
	})
	a.dialog.handOn = handOn{name: name, ip: rp.IP, bundle: rp.Bundle}
	return cmd
}

// preflightLines is a drain's preflight as the dialog shows it.
func preflightLines(p safety.Preflight) []dialogLine {
	var lines []dialogLine
	for _, r := range p.Refusals {
		lines = append(lines, dialogLine{lineRefused, "REFUSED  " + r})
	}
	for _, w := range p.Warnings {
		lines = append(lines, dialogLine{lineWarning, "WARNING  " + inConsoleWords(w)})
	}
	for _, n := range p.Notes {
		lines = append(lines, dialogLine{lineNote, "note     " + n})
	}
	return append(lines, dialogLine{lineText, fmt.Sprintf("pods to evict (%d): %s", len(p.Evict), strings.Join(p.Evict, ", "))})
}

func (d *dialog) onPreflight(msg preflightMsg) {
	if msg.apply != nil {
		msg.apply(d)
		return
	}
	newDrain := d.newDrain
	if newDrain == nil {
		var snap *kube.Snapshot
		if d.actions != nil {
			snap = d.actions.Snap
		}
		newDrain = func(p safety.Preflight, err error) (*flow.Drain, error) {
			return flow.NewDrain(d.record, snap, p, err, flow.DefaultDrainOptions())
		}
	}
	d.lines = nil
	if msg.err == nil {
		d.lines = preflightLines(msg.p)
	}
	drain, err := newDrain(msg.p, msg.err)
	if err != nil {
		d.refused(err, msg.err != nil)
		return
	}
	// Destructive: pinned apps stop, or the node leaves the cluster.
	if d.typed = drain.TypedName(); d.typed != "" {
		d.input.Focus()
	}
	if drain.Removes {
		d.lines = append(d.lines, dialogLine{lineText, "then " + msg.p.Node + " is deleted from the cluster (k3s drops its etcd member)"})
	}
	d.state, d.action, d.drain = dialogConfirm, &drain.Action, drain
}

// cliWords are the preflight's phrases written for the command line and
// what the console says instead: it has no --force, a destructive action
// asks for the node's name.
var cliWords = strings.NewReplacer(
	"needs --force and its name typed", "needs its name typed",
	"--force", "its name typed",
)

// inConsoleWords is a preflight line as the console says it.
func inConsoleWords(s string) string { return cliWords.Replace(s) }
