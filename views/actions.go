package views

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

// Actions is what the console acts with. Without it (no cluster, tests of
// the look) the action keys say why nothing happens.
type Actions struct {
	Snap  *kube.Snapshot
	Audit *audit.Log
	// MigrateTimeout bounds the wait for a moved app to run (default 5 min).
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

// record writes a record that is the whole of an action that changed
// nothing (refused, cancelled) or that only showed something (join info).
func (ac *Actions) record(r audit.Record) error {
	if ac.Audit == nil {
		return errors.New("no audit log")
	}
	r.Via = "console"
	return ac.Audit.Write(r)
}

// begin writes an action's intent before it runs.
func (ac *Actions) begin(r audit.Record) (*audit.Entry, error) {
	if ac.Audit == nil {
		return nil, errors.New("no audit log")
	}
	r.Via = "console"
	return ac.Audit.Begin(r)
}

type dialogState int

const (
	dialogChecking dialogState = iota // preflight running
	dialogChoose                      // pick a target (migrate)
	dialogConfirm                     // y/n, or the node name typed
	dialogRunning
	dialogDone
)

// dialog is one action in progress: its preflight, confirmation, progress
// and outcome, drawn in place of the screen until closed.
type dialog struct {
	ctx     *ui.Context
	actions *Actions
	title   string
	lines   []string
	state   dialogState
	// typed, when set, must be typed back to confirm.
	typed string
	input textinput.Model
	// targets are migrate's choices; choice the highlighted one.
	targets []kube.MigrateTarget
	choice  int
	app     kube.AppStatus
	// run is the action itself, once confirmed.
	run      func(ctx context.Context, progress func(string)) error
	task     *ui.Task
	progress []string
	result   string
	failed   bool
	rec      audit.Record
	// entry is the action's intent on disk, once confirmed; its outcome is
	// written through it.
	entry *audit.Entry
	// auditProblem is why a record could not be written, for the status
	// line once the dialog is closed.
	auditProblem string
	// handOn is, for a replace, what the new node gets once the old is gone.
	handOn handOn
}

// handOn is the new node of a replace: its name, the old node's address it
// takes, and its join bundle.
type handOn struct{ name, ip, bundle string }

// preflightMsg carries a drain preflight back to the UI goroutine.
type preflightMsg struct {
	p   kube.Preflight
	err error
}

func (a *App) openDialog(title string, rec audit.Record) *dialog {
	in := textinput.New()
	in.Prompt = "> "
	d := &dialog{ctx: a.ctx, actions: a.actions, title: title, rec: rec, input: in}
	a.dialog = d
	return d
}

// startAction opens the dialog for an action key; false when the key is
// not an action here.
func (a *App) startAction(msg tea.KeyMsg) (bool, tea.Cmd) {
	k := a.ctx.Keys
	isAction := key.Matches(msg, k.Cordon) || key.Matches(msg, k.Uncordon) || key.Matches(msg, k.Drain) ||
		key.Matches(msg, k.Remove) || key.Matches(msg, k.Seed) || key.Matches(msg, k.Migrate)
	if key.Matches(msg, k.AddNode) {
		// The command line, filled in: what a new node needs is typed.
		a.mode = modeCommand
		a.input.SetValue("add server ")
		a.input.CursorEnd()
		return true, a.input.Focus()
	}
	if !isAction {
		return false, nil
	}
	switch {
	case a.actions != nil && a.actions.unavailable() != "":
		a.message = "actions unavailable: " + a.actions.unavailable()
		return true, nil
	case a.actions == nil || a.actions.Snap == nil || !a.frame.Synced:
		a.message = "actions need a live cluster connection"
		return true, nil
	}
	screen := a.Screen()
	selected := ""
	if t := a.screens[a.current].table(); t != nil {
		selected = t.SelectedID()
	}
	if key.Matches(msg, k.Migrate) {
		if screen != "apps" || selected == "" {
			a.message = "migrate: pick an app on the apps screen (5)"
			return true, nil
		}
		return true, a.openMigrate(selected)
	}
	if screen != "nodes" || selected == "" {
		a.message = "node actions: pick a node on the nodes screen (2)"
		return true, nil
	}
	node := selected
	cs := a.actions.Snap.Clients().Core
	switch {
	case key.Matches(msg, k.Cordon), key.Matches(msg, k.Uncordon):
		cordon := key.Matches(msg, k.Cordon)
		name := map[bool]string{true: "cordon", false: "uncordon"}[cordon]
		d := a.openDialog(fmt.Sprintf("%s %s", name, node), audit.Record{Action: name, Target: node})
		if cordon {
			d.lines = []string{"New pods will not be scheduled on " + node + "; running pods stay."}
		} else {
			d.lines = []string{node + " takes new pods again."}
		}
		d.state = dialogConfirm
		d.run = func(ctx context.Context, progress func(string)) error {
			changed, err := kube.Cordon(ctx, cs, node, cordon)
			if err == nil && !changed {
				progress(node + " was already " + name + "ed")
			}
			return err
		}
	case key.Matches(msg, k.Seed):
		d := a.openDialog("make "+node+" the seed", audit.Record{Action: "seed", Target: node})
		data := a.actions.Snap.Data()
		if err := kube.SeedCheck(data, node); err != nil {
			d.refuse([]string{err.Error()})
			return true, nil
		}
		d.lines = []string{"Every node's k3s config will join through " + node + " from its next start.", "A running k3s is not restarted."}
		d.state = dialogConfirm
		d.run = func(ctx context.Context, progress func(string)) error {
			ip, err := kube.SetSeed(ctx, cs, data, node)
			if err == nil {
				progress("join_server_ip is now " + ip)
			}
			return err
		}
	case key.Matches(msg, k.Drain):
		return true, a.openDrain("drain "+node, audit.Record{Action: "drain", Target: node}, node)
	case key.Matches(msg, k.Remove):
		// Joiners need the seed: it moves first (sitecon seed), as the CLI says.
		if why := kube.SeedRemovalRefusal(a.actions.Snap.Data(), node); why != "" {
			a.openDialog("remove "+node, audit.Record{Action: "remove-node", Target: node}).refuse([]string{why})
			return true, nil
		}
		return true, a.openDrain("remove "+node, audit.Record{Action: "remove-node", Target: node}, node)
	}
	return true, nil
}

// openDrain opens the dialog of a drain of node (drain, remove or replace,
// by rec.Action) and starts its preflight.
func (a *App) openDrain(title string, rec audit.Record, node string) tea.Cmd {
	d := a.openDialog(title, rec)
	d.lines = []string{"checking what draining " + node + " would do..."}
	snap := a.actions.Snap
	if snap == nil {
		return nil
	}
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p, err := kube.CheckDrain(ctx, snap.Clients(), snap.Data(), node, kube.DrainOptions{Purpose: kube.PurposeOf(rec.Action)})
		return preflightMsg{p, err}
	}
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
	ip := ""
	var names []string
	for _, n := range a.frame.Status.Nodes {
		names = append(names, n.Name)
		if n.Name == old {
			ip = n.InternalIP
			if ip == "" {
				a.message = old + " has no internal address to hand on"
				return nil
			}
		}
	}
	if ip == "" {
		a.message = fmt.Sprintf("%s: no such node (nodes: %s)", old, strings.Join(names, ", "))
		return nil
	}
	// The seed's address handed to a new device would make it the seed of
	// a cluster it never was part of: the seed moves first.
	if a.actions.Snap != nil {
		if why := kube.SeedRemovalRefusal(a.actions.Snap.Data(), old); why != "" {
			a.openDialog("replace "+old, audit.Record{Action: "replace-node", Target: old + " → " + name}).refuse([]string{why})
			return nil
		}
	}
	bundle, err := a.actions.JoinInfo(role, name, uuid, ip)
	if err != nil {
		a.message = err.Error() + " — " + usage
		return nil
	}
	cmd := a.openDrain("replace "+old, audit.Record{Action: "replace-node", Target: old + " → " + name}, old)
	a.dialog.handOn = handOn{name: name, ip: ip, bundle: bundle}
	return cmd
}

// openMigrate lists where the selected app may go.
func (a *App) openMigrate(rowID string) tea.Cmd {
	var app kube.AppStatus
	for _, x := range a.frame.Status.Apps {
		if x.Namespace+"/"+x.Object == rowID {
			app = x
		}
	}
	d := a.openDialog("migrate "+app.Name, audit.Record{Action: "migrate", Target: app.Name})
	d.app = app
	if app.UUID == "" {
		d.refuse([]string{app.Name + " has no app UUID: it was not laid out by a sitecon agent"})
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
		d.refuse(append([]string{"no node can take " + app.Name}, why...))
		return nil
	}
	d.state = dialogChoose
	return nil
}

func (d *dialog) refuse(reasons []string) {
	d.lines = append(d.lines, reasons...)
	d.refused(reasons)
}

// refused ends the dialog with a refusal already shown in its lines.
func (d *dialog) refused(reasons []string) {
	d.state, d.failed = dialogDone, true
	// The reasons are in the lines above: the verdict says what it means.
	d.result = "refused: nothing was changed"
	d.rec.Preflight = reasons
	d.finish(audit.OutcomeRefused, nil)
}

// finish records the dialog's outcome: through its intent once it ran,
// else as a record of its own. A record that cannot be written is said on
// screen: the log no longer holds what happened.
func (d *dialog) finish(outcome string, err error) {
	d.rec.Outcome, d.rec.Error = outcome, ""
	if err != nil {
		d.rec.Error = err.Error()
	}
	var werr error
	if d.entry != nil {
		d.entry.Rec = d.rec
		werr = d.entry.End(outcome, err)
	} else {
		werr = d.actions.record(d.rec)
	}
	if werr != nil {
		d.auditProblem = "the audit log could not record " + d.title + ": " + werr.Error()
		d.lines = append(d.lines, "WARNING  "+d.auditProblem)
	}
}

func (d *dialog) onPreflight(msg preflightMsg) {
	if msg.err != nil {
		d.refuse([]string{msg.err.Error()})
		return
	}
	p := msg.p
	d.lines = nil
	for _, r := range p.Refusals {
		d.lines = append(d.lines, "REFUSED  "+r)
	}
	for _, w := range p.Warnings {
		d.lines = append(d.lines, "WARNING  "+w)
	}
	for _, n := range p.Notes {
		d.lines = append(d.lines, "note     "+n)
	}
	d.lines = append(d.lines, fmt.Sprintf("pods to evict (%d): %s", len(p.Evict), strings.Join(p.Evict, ", ")))
	if p.Refused() {
		d.refused(p.Refusals)
		return
	}
	d.rec.Preflight = append(p.Warnings, fmt.Sprintf("evict %d pod(s)", len(p.Evict)))
	remove := d.rec.Action == "remove-node" || d.rec.Action == "replace-node"
	// Destructive: pinned apps stop, or the node leaves the cluster.
	if p.NeedsForce() || remove {
		d.typed = p.Node
		d.input.Focus()
	}
	if remove {
		d.lines = append(d.lines, "then "+p.Node+" is deleted from the cluster (k3s drops its etcd member)")
	}
	d.state = dialogConfirm
	snap := d.actions.Snap
	d.run = func(ctx context.Context, progress func(string)) error {
		err := kube.DrainAsConfirmed(ctx, snap.Clients(), snap.Data(), p, kube.DrainOptions{GracePeriod: -time.Second, Timeout: 10 * time.Minute,
			Progress: func(s kube.DrainStep) { progress(strings.TrimSpace(s.Phase + " " + s.Pod + " " + s.Message)) }})
		if err != nil || !remove {
			return err
		}
		if err := kube.RemoveNode(ctx, snap.Clients().Core, p.Node); err != nil {
			return err
		}
		progress(p.Node + " deleted from the cluster")
		return nil
	}
}

// chooseTarget confirms the highlighted migrate target.
func (d *dialog) chooseTarget() {
	t := d.targets[d.choice]
	n, ok := d.actions.Snap.Node(t.Node)
	if !ok || n.Labels[kube.LabelNodeUUID] == "" {
		d.refuse([]string{t.Node + " has no " + kube.LabelNodeUUID + " label"})
		return
	}
	d.rec.Target = d.app.Name + " → " + t.Node
	d.lines = []string{fmt.Sprintf("Move %s from %s to %s.", d.app.Name, orDash(d.app.Node), t.Node),
		"An on-site override is written; the agents lay the app out on " + t.Node + "."}
	d.state = dialogConfirm
	snap, app, target, nodeUUID := d.actions.Snap, d.app, t.Node, n.Labels[kube.LabelNodeUUID]
	timeout := d.actions.MigrateTimeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	d.run = func(ctx context.Context, progress func(string)) error {
		config, err := kube.ReadAppConfigRef(ctx, snap.Clients(), app.UUID)
		if err != nil {
			return err
		}
		o := kube.PlacementOverride{Node: target, NodeUUID: nodeUUID, By: audit.CurrentUser() + " (console)", At: time.Now().UTC(), ConfigDNId: config.DNId, ConfigVersion: config.Version}
		raw, _ := json.Marshal(o)
		d.rec.Detail = string(raw)
		if err := kube.WriteOverride(ctx, snap.Clients().Core, app.UUID, o); err != nil {
			return err
		}
		progress("override written; waiting for " + app.Name + " to run on " + target)
		_, err = kube.WaitAppOn(ctx, snap, app.UUID, target, timeout, func(where string) { progress(app.Name + ": " + where) })
		switch {
		case errors.Is(err, kube.ErrNotMovedYet):
			return fmt.Errorf("%s did not run on %s within %s; the override stays", app.Name, target, timeout)
		case err != nil:
			return errors.New("stopped waiting; the override stays in place")
		}
		return nil
	}
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// key handles a key while the dialog is open; it reports whether to close.
func (d *dialog) key(msg tea.KeyMsg, nextID func() int) (closeIt bool, cmd tea.Cmd) {
	k := d.ctx.Keys
	switch d.state {
	case dialogChecking:
		return key.Matches(msg, k.Back), nil
	case dialogDone:
		return true, nil
	case dialogRunning:
		if key.Matches(msg, k.Back) && d.task != nil {
			d.task.Cancel()
			d.progress = append(d.progress, "cancelling...")
		}
		return false, nil
	case dialogChoose:
		switch {
		case key.Matches(msg, k.Back):
			return true, nil
		case key.Matches(msg, k.Up), key.Matches(msg, k.Down):
			step := 1
			if key.Matches(msg, k.Up) {
				step = -1
			}
			for i := d.choice + step; i >= 0 && i < len(d.targets); i += step {
				if d.targets[i].Eligible {
					d.choice = i
					break
				}
			}
		case key.Matches(msg, k.Enter):
			d.chooseTarget()
		}
		return false, nil
	}
	// dialogConfirm
	if d.typed != "" {
		switch msg.Type {
		case tea.KeyEsc:
			d.cancelled()
			return true, nil
		case tea.KeyEnter:
			if strings.TrimSpace(d.input.Value()) != d.typed {
				d.lines = append(d.lines, fmt.Sprintf("type %q exactly to go on, esc to cancel", d.typed))
				return false, nil
			}
			return false, d.start(nextID())
		}
		var cmd tea.Cmd
		d.input, cmd = d.input.Update(msg)
		return false, cmd
	}
	switch {
	case key.Matches(msg, k.Confirm):
		return false, d.start(nextID())
	case key.Matches(msg, k.Cancel), key.Matches(msg, k.Back):
		d.cancelled()
		return true, nil
	}
	return false, nil
}

func (d *dialog) cancelled() {
	d.finish(audit.OutcomeCancelled, errors.New("not confirmed"))
}

// start runs the confirmed action once its intent is on disk; an intent
// that cannot be written ends the dialog with nothing done, saying why.
func (d *dialog) start(id int) tea.Cmd {
	e, err := d.actions.begin(d.rec)
	if err != nil {
		d.state, d.failed = dialogDone, true
		d.result = "not done: the audit log cannot record it (" + err.Error() + "); nothing was changed"
		return nil
	}
	d.entry, d.rec.ID, d.rec.Via = e, e.Rec.ID, e.Rec.Via
	d.state = dialogRunning
	var cmd tea.Cmd
	d.task, cmd = ui.StartTask(id, d.run)
	return cmd
}

// abandon records an action still running when the console goes (a
// signal, the SSH session dropped, ctrl+c): it is stopped and its outcome
// is "interrupted", so its intent does not stand alone.
func (d *dialog) abandon(cause error) {
	if d.state != dialogRunning || d.entry == nil || d.entry.Ended() {
		return
	}
	if d.task != nil {
		d.task.Cancel()
	}
	if cause == nil {
		cause = errors.New("the console was closed while it ran")
	}
	d.finish(audit.OutcomeInterrupted, cause)
}

// onTask follows the running task.
func (d *dialog) onTask(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case ui.TaskProgressMsg:
		d.progress = append(d.progress, msg.Line)
		return d.task.Next()
	case ui.TaskDoneMsg:
		d.state = dialogDone
		d.result = "done: " + d.title
		if msg.Err == nil && d.handOn.bundle != "" {
			// What the new device needs is what matters now: the drain's
			// steps give it the screen (the audit log keeps them).
			d.result = fmt.Sprintf("done: %s; %s joins at %s with the above", d.title, d.handOn.name, d.handOn.ip)
			d.lines, d.progress = nil, joinInfoLines(d.handOn.bundle, d.ctx.Width)
		}
		if changed := (*kube.PlanChangedError)(nil); errors.As(msg.Err, &changed) {
			d.lines = append(d.lines, "The cluster changed since you confirmed:")
			for _, r := range changed.Reasons {
				d.lines = append(d.lines, "REFUSED  "+r)
			}
			d.refused(changed.Reasons)
			return nil
		}
		outcome := audit.OutcomeDone
		if msg.Err != nil {
			d.failed = true
			outcome = audit.OutcomeFailed
			if errors.Is(msg.Err, context.Canceled) {
				outcome = audit.OutcomeCancelled
			}
			d.result = "failed: " + msg.Err.Error()
		}
		d.finish(outcome, msg.Err)
		if d.auditProblem != "" {
			d.failed = true
			d.result += " — " + d.auditProblem
		}
	}
	return nil
}

// view draws the dialog; the keys that answer it are shown only once armed
// (the guard takes keys), so what is on screen never invites a key that
// would be dropped.
func (d *dialog) view(w, h int, armed bool) string {
	st := d.ctx.Styles
	// Everything a dialog says may carry the cluster's words (names,
	// preflight reasons, API errors, drain steps) or a file's (join info):
	// each is cleaned here, before it is styled (safety rule 7).
	clean := ui.Clean
	title := clean(d.title)
	out := []string{st.Title.Render(strings.ToUpper(title[:1]) + title[1:]), ""}
	// keys is what a prompt line says about the keys that answer it, or
	// nothing before they are taken.
	keys := func(s string) string {
		if !armed {
			return ""
		}
		return s
	}
	for _, l := range d.lines {
		l = clean(l)
		switch {
		case strings.HasPrefix(l, "REFUSED"):
			out = append(out, st.Bad.Render(l))
		case strings.HasPrefix(l, "WARNING"):
			out = append(out, st.Warn.Render(l))
		default:
			out = append(out, l)
		}
	}
	if d.state == dialogChoose {
		out = append(out, "", "Move to"+keys(" (↑/↓, enter; esc to cancel)")+":")
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
	}
	if len(d.progress) > 0 {
		out = append(out, "")
		// The latest steps: a drain of many pods scrolls.
		keep := max(h-len(out)-3, 3)
		from := max(len(d.progress)-keep, 0)
		for _, l := range d.progress[from:] {
			out = append(out, clean(l))
		}
	}
	out = append(out, "")
	switch d.state {
	case dialogChecking:
		out = append(out, st.Muted.Render("checking..."+keys(" esc to close")))
	case dialogConfirm:
		switch {
		case !armed:
			out = append(out, st.Muted.Render("…"))
		case d.typed != "":
			out = append(out, st.Warn.Render(fmt.Sprintf("Type %q and enter to go on; esc cancels.", clean(d.typed))), d.input.View())
		default:
			out = append(out, st.Warn.Render(fmt.Sprintf("%s? y to go on, n or esc to cancel.", strings.ToUpper(title[:1])+title[1:])))
		}
	case dialogRunning:
		out = append(out, st.Muted.Render("running..."+keys(" esc cancels")))
	case dialogDone:
		style := st.OK
		if d.failed {
			style = st.Bad
		}
		out = append(out, style.Render(clean(d.result)), st.Muted.Render(keys("any key to close")))
	}
	if len(out) > h {
		out = out[len(out)-h:]
	}
	return strings.Join(out, "\n")
}

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
	text, err := a.actions.JoinInfo(role, name, uuid, "")
	if err != nil {
		a.message = err.Error() + " — " + usage
		return
	}
	// The join info carries the cluster token: it is shown only once the
	// log holds who asked for it (without the token).
	rec := audit.Record{Action: "add-node", Target: name, Detail: role, Outcome: audit.OutcomeDone}
	if err := a.actions.record(rec); err != nil {
		a.message = "not shown: the audit log cannot record it: " + err.Error()
		return
	}
	d := a.openDialog("add "+name, rec)
	d.lines = joinInfoLines(text, a.ctx.Width)
	d.state, d.result = dialogDone, "join info for "+name+" ("+role+")"
}

// Abandon records the outcome of an action still running as the console
// ends; cause is why it ends (the signal), nil when it was closed.
func (a *App) Abandon(cause error) {
	if a.dialog != nil {
		a.dialog.abandon(cause)
	}
}
