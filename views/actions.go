package views

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/kube/safety"
	"github.com/sitecon/sitecon/ui"
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

type dialogState int

const (
	dialogChecking dialogState = iota // preflight running
	dialogChoose                      // pick a target (migrate)
	dialogConfirm                     // y/n, or the node name typed
	dialogRunning
	dialogDone
)

// lineKind says how a dialog line is drawn: what it is, not what its text
// starts with (a cluster's message may well start with "REFUSED").
type lineKind int

const (
	lineText lineKind = iota
	lineRefused
	lineWarning
	lineNote
)

// dialogLine is one line of a dialog's body.
type dialogLine struct {
	kind lineKind
	text string
}

// textLines are plain lines.
func textLines(texts ...string) []dialogLine {
	out := make([]dialogLine, 0, len(texts))
	for _, t := range texts {
		out = append(out, dialogLine{lineText, t})
	}
	return out
}

func refusedLines(texts ...string) []dialogLine {
	out := make([]dialogLine, 0, len(texts))
	for _, t := range texts {
		out = append(out, dialogLine{lineRefused, t})
	}
	return out
}

// dialog is one action in progress: its preflight, confirmation, progress
// and outcome, drawn in place of the screen until closed.
type dialog struct {
	ctx     *ui.Context
	actions *Actions
	title   string
	lines   []dialogLine
	state   dialogState
	// typed, when set, must be typed back to confirm.
	typed string
	input textinput.Model
	// targets are migrate's choices; choice the highlighted one.
	targets []safety.MigrateTarget
	choice  int
	app     kube.AppStatus
	// record is the action's audit record, which its flow writes.
	record *flow.Record
	// action is the flow once planned; confirmed, it runs.
	action *flow.Action
	// drain is the drain planned, for a drain, removal or replace.
	drain *flow.Drain
	// newDrain makes a drain's flow from its preflight (a replace's drain
	// is the replace's).
	newDrain func(p safety.Preflight, err error) (*flow.Drain, error)
	task     *ui.Task
	progress []string
	result   string
	failed   bool
	// auditProblem is why a record could not be written, for the status
	// line once the dialog is closed.
	auditProblem string
	// handOn is, for a replace, what the new node gets once the old is gone.
	handOn handOn
}

// handOn is the new node of a replace: its name, the old node's address it
// takes, and its join bundle.
type handOn struct{ name, ip, bundle string }

// preflightMsg carries what a dialog waited for back to the UI goroutine:
// a drain's preflight, or a plan made off it (apply).
type preflightMsg struct {
	p   safety.Preflight
	err error
	// apply, when set, is the dialog's next step from a plan that needed
	// the network (a migrate's): the UI goroutine never waits on it.
	apply func(*dialog)
}

func (a *App) openDialog(title string, rec *flow.Record) *dialog {
	in := textinput.New()
	in.Prompt = "> "
	d := &dialog{ctx: a.ctx, actions: a.actions, title: title, record: rec, input: in}
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
	rec, snap := a.actions.recorder(), a.actions.Snap
	switch {
	case key.Matches(msg, k.Cordon), key.Matches(msg, k.Uncordon):
		cordon := key.Matches(msg, k.Cordon)
		act := flow.Cordon(rec, snap, node, cordon)
		d := a.openDialog(flow.CordonName(cordon)+" "+node, act.Record)
		if cordon {
			d.lines = textLines("New pods will not be scheduled on " + node + "; running pods stay.")
		} else {
			d.lines = textLines(node + " takes new pods again.")
		}
		d.state, d.action = dialogConfirm, act
	case key.Matches(msg, k.Seed):
		seed, err := flow.PlanSeed(rec, snap, node)
		if err != nil {
			a.openDialog("make "+node+" the seed", nil).refused(err, true)
			return true, nil
		}
		d := a.openDialog("make "+node+" the seed", seed.Record)
		d.lines = textLines("Every node's k3s config will join through "+node+" from its next start.", "A running k3s is not restarted.")
		d.state, d.action = dialogConfirm, &seed.Action
	case key.Matches(msg, k.Drain):
		return true, a.openDrain("drain "+node, rec.Open(flow.ActionDrain, node), node, nil)
	case key.Matches(msg, k.Remove):
		return true, a.openDrain("remove "+node, rec.Open(flow.ActionRemove, node), node, nil)
	}
	return true, nil
}

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
		data = a.actions.Snap.Data()
	}
	title := "replace " + old
	rp, err := flow.PlanReplace(a.actions.recorder(), data, a.frame.Status.Nodes, flow.ReplaceRequest{Old: old, New: name,
		Bundle: func(ip string) (string, error) { return a.actions.JoinInfo(role, name, uuid, ip) }})
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
	d.targets = safety.MigrateTargets(app.Node, app.Requires, kube.NodeFacts(a.actions.Snap.Data().Nodes))
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

// refuse records a refusal the console itself makes and shows it.
func (d *dialog) refuse(reasons ...string) { d.refused(d.record.Refuse(reasons...), true) }

// refused ends the dialog with a refusal its flow recorded; show: its
// reasons are not in the lines yet.
func (d *dialog) refused(err error, show bool) {
	d.state, d.failed = dialogDone, true
	if r := (*flow.Refused)(nil); errors.As(err, &r) {
		if d.record == nil {
			d.record = r.Record
		}
		if show {
			d.lines = append(d.lines, refusedLines(r.Reasons...)...)
		}
	} else if show {
		d.lines = append(d.lines, refusedLines(err.Error())...)
	}
	// The reasons are in the lines above: the verdict says what it means.
	d.result = "refused: nothing was changed"
	d.notRecorded(err)
}

// notRecorded says on screen that a record could not be written: the log
// no longer holds what happened.
func (d *dialog) notRecorded(err error) {
	if nr := (*flow.NotRecorded)(nil); errors.As(err, &nr) {
		d.auditProblem = "the audit log could not record " + d.title + ": " + nr.Err.Error()
		d.lines = append(d.lines, dialogLine{lineWarning, "WARNING  " + d.auditProblem})
	}
}

// preflightLines is a drain's preflight as the dialog shows it.
func preflightLines(p safety.Preflight) []dialogLine {
	var lines []dialogLine
	for _, r := range p.Refusals {
		lines = append(lines, dialogLine{lineRefused, "REFUSED  " + r})
	}
	for _, w := range p.Warnings {
		lines = append(lines, dialogLine{lineWarning, "WARNING  " + w})
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
			return false, d.chooseTarget()
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
				d.lines = append(d.lines, dialogLine{lineText, fmt.Sprintf("type %q exactly to go on, esc to cancel", d.typed)})
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
	d.notRecorded(d.record.Cancel(errors.New("not confirmed")))
}

// start runs the confirmed action once its intent is on disk; an intent
// that cannot be written ends the dialog with nothing done, saying why.
func (d *dialog) start(id int) tea.Cmd {
	if err := d.action.Begin(); err != nil {
		d.state, d.failed = dialogDone, true
		d.result = "not done: the audit log cannot record it (" + err.Error() + "); nothing was changed"
		return nil
	}
	d.state = dialogRunning
	var cmd tea.Cmd
	d.task, cmd = ui.StartTask(id, d.action.Run)
	return cmd
}

// abandon records an action still running when the console goes (a
// signal, the SSH session dropped, ctrl+c): it is stopped and its outcome
// is "interrupted", so its intent does not stand alone.
func (d *dialog) abandon(cause error) {
	if d.state != dialogRunning || d.action == nil || d.action.Ended() {
		return
	}
	if d.task != nil {
		d.task.Cancel()
	}
	if cause == nil {
		cause = errors.New("the console was closed while it ran")
	}
	d.action.Interrupt(cause)
}

// onTask follows the running task; the flow has recorded its outcome by
// the time it is done, and the dialog tells it.
func (d *dialog) onTask(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case ui.TaskProgressMsg:
		d.progress = append(d.progress, msg.Line)
		return d.task.Next()
	case ui.TaskDoneMsg:
		d.state = dialogDone
		err := withoutNotRecorded(msg.Err)
		switch changed := (*kube.PlanChangedError)(nil); {
		case errors.As(err, &changed):
			d.lines = append(d.lines, dialogLine{lineText, "The cluster changed since you confirmed:"})
			for _, r := range changed.Reasons {
				d.lines = append(d.lines, dialogLine{lineRefused, "REFUSED  " + r})
			}
			d.refused(msg.Err, false)
			return nil
		case err != nil:
			d.failed = true
			d.result = "failed: " + err.Error()
		case d.handOn.bundle != "":
			// What the new device needs is what matters now: the drain's
			// steps give it the screen (the audit log keeps them).
			d.result = fmt.Sprintf("done: %s; %s joins at %s with the above", d.title, d.handOn.name, d.handOn.ip)
			d.lines, d.progress = nil, joinInfoLines(d.handOn.bundle, d.ctx.Width)
		case d.action.Done != "":
			d.result = "done: " + d.action.Done
		default:
			d.result = "done: " + d.title
		}
		d.notRecorded(msg.Err)
		if d.auditProblem != "" {
			d.failed = true
			d.result += " — " + d.auditProblem
		}
	}
	return nil
}

// withoutNotRecorded is what a change returned, without the audit log's
// part (told apart, as a warning).
func withoutNotRecorded(err error) error {
	var rest []error
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	for _, e := range errs {
		if _, nr := e.(*flow.NotRecorded); !nr {
			rest = append(rest, e)
		}
	}
	return errors.Join(rest...)
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
		text := clean(l.text)
		switch l.kind {
		case lineRefused:
			out = append(out, st.Bad.Render(text))
		case lineWarning:
			out = append(out, st.Warn.Render(text))
		default:
			out = append(out, text)
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
	// The join info carries the cluster token: it is shown only once the
	// log holds who asked for it (without the token), as the CLI does.
	add, err := flow.PlanAdd(a.actions.recorder(), "add-node", name, "role "+role, func() (string, error) {
		return a.actions.JoinInfo(role, name, uuid, "")
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

// Abandon records the outcome of an action still running as the console
// ends; cause is why it ends (the signal), nil when it was closed.
func (a *App) Abandon(cause error) {
	if a.dialog != nil {
		a.dialog.abandon(cause)
	}
}
