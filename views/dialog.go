package views

import (
	"errors"
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/kube/safety"
	"github.com/sitecon/sitecon/ui"
)

// The dialog every action runs in: its preflight, its confirmation, its
// progress and its outcome. What is particular to an action (what it
// checks, what it asks) is in the file of the screen that offers it, or
// of the action (drain.go, migrate.go).

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
	// unchosen: enter came with no target chosen.
	unchosen bool
	app      kube.AppStatus
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
	// afterDone, when set, is a line to add once the action is done (a
	// maintenance: the apps away from home); "" adds none.
	afterDone func() string
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
		return d.chooseKey(msg)
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
	if d.state == dialogRunning && d.action == nil && d.task != nil {
		// A task that changes nothing (the VNC bridge): only stopped.
		d.task.Cancel()
		return
	}
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
		switch changed := (*change.PlanChangedError)(nil); {
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
		case d.action == nil:
			// A task that changed nothing (the VNC bridge) is closed.
			d.result = "closed: " + d.title
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
		if d.afterDone != nil && !d.failed {
			if line := d.afterDone(); line != "" {
				d.progress = append(d.progress, line)
			}
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
		style := (*lipgloss.Style)(nil)
		switch l.kind {
		case lineRefused:
			style = &st.Bad
		case lineWarning:
			style = &st.Warn
		}
		text := clean(l.text)
		out = append(out, wrapLine(text, w, l.kind != lineText && labelled(text), style)...)
	}
	if d.state == dialogChoose {
		out = append(out, d.choiceLines(keys)...)
	}
	if len(d.progress) > 0 {
		out = append(out, "")
		// The latest steps: a drain of many pods scrolls.
		keep := max(h-len(out)-3, 3)
		from := max(len(d.progress)-keep, 0)
		for _, l := range d.progress[from:] {
			out = append(out, wrapLine(clean(l), w, false, nil)...)
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
		out = append(append(out, wrapLine(clean(d.result), w, false, &style)...), st.Muted.Render(keys("any key to close")))
	}
	if len(out) > h {
		out = out[len(out)-h:]
	}
	return strings.Join(out, "\n")
}

// labelWidth is the width of a preflight line's label ("REFUSED  "): the
// lines that go on under a label start under its text.
const labelWidth = 9

// labelled says whether a preflight line starts with its label.
func labelled(text string) bool {
	for _, l := range []string{"REFUSED  ", "WARNING  ", "note     "} {
		if strings.HasPrefix(text, l) {
			return true
		}
	}
	return false
}

// wrapLine breaks text into lines of at most w cells, at spaces (a word
// longer than a line where it must: a name broken at its hyphens would
// read as two), each drawn in style (nil: plain); a labelled line's
// continuations are indented under its text. A dialog wraps rather than
// cuts: its most important line is often its longest.
func wrapLine(text string, w int, labelled bool, style *lipgloss.Style) []string {
	indent := 0
	if labelled {
		indent = labelWidth
	}
	w = max(w, indent+10)
	var out []string
	line, width := "", 0
	flush := func() {
		if style != nil {
			line = style.Render(line)
		}
		out = append(out, line)
		line, width = strings.Repeat(" ", indent), indent
	}
	for i, word := range strings.Split(text, " ") {
		ww := ansi.StringWidth(word)
		if i > 0 && width+1+ww > w && width > indent {
			flush()
		} else if i > 0 {
			line, width = line+" ", width+1
		}
		for width+ww > w {
			cut := ansi.Truncate(word, w-width, "")
			line += cut
			word = strings.TrimPrefix(word, cut)
			ww = ansi.StringWidth(word)
			flush()
		}
		line, width = line+word, width+ww
	}
	flush()
	return out
}

// footerKeys are the keys that answer the dialog in its state, for the
// footer in place of the screen's (none of those act under a dialog);
// nothing until the guard takes keys.
func (d *dialog) footerKeys(armed bool) []key.Binding {
	if !armed {
		return nil
	}
	b := func(keys, desc string) key.Binding {
		return key.NewBinding(key.WithKeys(keys), key.WithHelp(keys, desc))
	}
	switch d.state {
	case dialogChecking:
		return []key.Binding{b("esc", "close")}
	case dialogChoose:
		return []key.Binding{b("↑/↓", "choose"), b("enter", "plan the move"), b("esc", "cancel")}
	case dialogConfirm:
		if d.typed != "" {
			return []key.Binding{b("enter", "go on"), b("esc", "cancel")}
		}
		return []key.Binding{b("y", "go on"), b("n/esc", "cancel")}
	case dialogRunning:
		return []key.Binding{b("esc", "cancel the action")}
	}
	return []key.Binding{b("any key", "close")}
}
