package views

import (
	"context"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/keymap"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/ui"
)

// Frame is one consistent picture of the site for the console, computed off
// the UI goroutine by the feed.
type Frame struct {
	Status kube.ClusterStatus
	Pods   []kube.PodRow
	Events []kube.EventRow
	Agent  *AgentSummary
	// Problem is why there is no cluster data at all (no kubeconfig, API not
	// reached yet); the console shows it and keeps going.
	Problem string
	// Synced is false until the cluster has been read once.
	Synced bool
	// Reports is what each node's agent said of itself, asked directly
	// while the cluster API does not answer (nil otherwise).
	Reports *nodestate.NodeReports
	// Basics is, while the cluster is still being read (Synced false),
	// the status of what is read already: the nodes, the leases and the
	// cluster's config maps (kube.Snapshot.BasicsData). Only the header
	// and the overview show it (shownStatus); its pod and volume figures
	// are not the cluster's. Nil otherwise.
	Basics *kube.ClusterStatus
	// cleaned: every string of the frame has been through ui.Clean (a
	// frame builder's frames are, FrameFromData's included).
	cleaned bool
}

// shownStatus is the status the header and the overview show: the
// frame's, or while the cluster is being read what is read of it.
func (f *Frame) shownStatus() *kube.ClusterStatus {
	if !f.Synced && f.Basics != nil {
		return f.Basics
	}
	return &f.Status
}

// FrameMsg delivers a new frame to the console.
type FrameMsg Frame

// TickMsg redraws ages and the stale badge once a second.
type TickMsg time.Time

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(t time.Time) tea.Msg { return TickMsg(t) })
}

type inputMode int

const (
	modeNormal inputMode = iota
	modeCommand
	modeFilter
)

// screen is one console screen.
type screen interface {
	// setFrame rebuilds the screen's rows from a frame.
	setFrame(f *Frame, now time.Time)
	view(width, height int) string
	table() *ui.Table
	// title may change on drill-in (pods of a namespace).
	title() string
	// help says what the screen shows, and declares its actions and its
	// own keys: the one list its key handling, help and footer come from.
	help() screenHelp
}

// App is the console's root model: it owns the context, switches screens,
// and handles command and filter input, help and quit.
type App struct {
	ctx     *ui.Context
	screens []screen
	current int
	frame   Frame
	mode    inputMode
	input   textinput.Model
	help    help.Model
	full    bool // full help shown
	helpTop int  // its first line shown, when it does not fit
	message string
	// actions acts on the cluster; dialog is the action in progress.
	actions *Actions
	dialog  *dialog
	taskSeq int
	// guard holds back keys from a dialog or the wizard until it has been
	// seen (docs/DESIGN.md, "A human confirms").
	guard *ui.AnswerGuard
	// newWizard builds the formation wizard (:form); wizard is the open one.
	newWizard func() *FormWizard
	wizard    *FormWizard
	// builtAt is the time of the latest frame or tick; built is when each
	// screen was last built from it (only the visible screen is rebuilt).
	builtAt time.Time
	built   []time.Time
	// keys are each screen's bindings; live, taken and footerKeys the
	// buffers App.bindings and the footer reuse.
	keys       [][]binding
	live       []binding
	taken      []string
	footerKeys []key.Binding
	// hint is a line the help always says (SetHint).
	hint string
	// logs is the open logs view (l), over the current screen; logsKeyList
	// its keys. logSource reads the logs, with streams under logsCtx,
	// batched a frame (logsFrame) apart and retried from logsRetry on.
	logs        *logsView
	logsKeyList []binding
	logSource   *LogSource
	logsCtx     context.Context
	logsFrame   time.Duration
	logsRetry   time.Duration
	// bundle takes support bundles (b on the overview), once SetBundle
	// gave it the means.
	bundle *bundleTaker
	// reports asks every node for its own report while the cluster API
	// does not answer (views/stale.go).
	reports nodeReportsAsker
	// doctor runs the doctor for its screen (7), once SetDoctor gave it
	// the means.
	doctor *doctorRunner
	// home is the walk of H on the apps screen (every app home) under
	// way: when its dialog closes, the next app's opens.
	home *homeWalk
}

// SetFormWizard enables :form, the offline formation wizard.
func (a *App) SetFormWizard(build func() *FormWizard) { a.newWizard = build }

// SetHint gives the console a line to say at start (in the footer, until
// the first key) and in its help: the demo's next step, which printed
// before the console it would be covered.
func (a *App) SetHint(hint string) {
	a.hint = hint
	a.message = hint
}

// SetActions lets the console act on the cluster (nil: look only).
func (a *App) SetActions(ac *Actions) { a.actions = ac }

// NewApp builds the console.
func NewApp(ctx *ui.Context) *App {
	in := textinput.New()
	in.Prompt = ""
	if ctx.ReadOnly {
		ctx.Keys.ReadOnly()
	}
	a := &App{ctx: ctx, input: in, help: help.New(), guard: ui.NewAnswerGuard(ctx),
		logsCtx: context.Background(), logsFrame: logsFrame, logsRetry: logsRetryFirst}
	a.doctor = &doctorRunner{}
	a.screens = []screen{
		newOverview(ctx), newNodes(ctx), newPods(ctx), newVolumes(ctx), newApps(ctx), newEvents(ctx), newDoctor(ctx, a.doctor),
	}
	a.bundle = &bundleTaker{}
	a.screens[0].(*overview).bundle = a.bundle
	a.screens[0].(*overview).doctor = a.doctor
	a.built = make([]time.Time, len(a.screens))
	for i, s := range a.screens {
		a.keys = append(a.keys, a.screenKeys(i, s))
	}
	a.logsKeyList = a.logsKeys()
	return a
}

// Init starts the clock.
func (a *App) Init() tea.Cmd { return tick() }

// Screen is the name of the current screen.
func (a *App) Screen() string { return keymap.ScreenNames[a.current] }

// Update handles messages. It never blocks: data arrives as FrameMsg.
func (a *App) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	cmd := a.update(msg)
	// Whatever changed the prompt on screen (a key, a preflight, a task
	// that ended), it is drawn right after this update: keys answer it only
	// from a moment later.
	return a, tea.Batch(cmd, a.guard.Show(a.prompt()), a.doctorStart())
}

// prompt identifies what answers keys in place of the screens: the open
// dialog in its state, or the formation wizard; nil when there is none.
// It changes whenever what the keys would answer does.
func (a *App) prompt() any {
	switch {
	case a.wizard != nil:
		return wizardPrompt{a.wizard, a.wizard.done}
	case a.dialog != nil:
		return dialogPrompt{a.dialog, a.dialog.state}
	}
	return nil
}

type wizardPrompt struct {
	wizard *FormWizard
	formed bool
}

type dialogPrompt struct {
	dialog *dialog
	state  dialogState
}

// entry is what the prompt on screen takes from the keyboard.
func (a *App) entry() ui.Entry {
	switch {
	case a.wizard != nil && !a.wizard.done:
		return ui.EntryText
	case a.dialog != nil && a.dialog.state == dialogConfirm && a.dialog.typed != "":
		return ui.EntryTyped
	}
	return ui.EntryKeys
}

func (a *App) update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		a.ctx.Width, a.ctx.Height = msg.Width, msg.Height
		a.help.Width = msg.Width
		return nil
	case FrameMsg:
		// Every string of the cluster's that the screens, the header and
		// the banner draw comes through here: cleaned once, here or, for a
		// frame builder's frames, as the frame was built (safety rule 7).
		a.frame = Frame(msg)
		if !a.frame.cleaned {
			a.frame = ui.CleanStrings(a.frame)
		}
		a.frame.Reports = a.reports.current(&a.frame)
		a.refresh()
		return a.reports.ask(&a.frame, a.ctx.Now())
	case TickMsg:
		a.refresh()
		return tea.Batch(tick(), a.reports.ask(&a.frame, a.ctx.Now()))
	case NodeReportsMsg:
		a.reports.got(nodestate.NodeReports(msg), a.ctx.Now())
		a.frame.Reports = a.reports.current(&a.frame)
		a.refresh()
		return nil
	case tea.KeyMsg:
		return a.handleKey(msg)
	case preflightMsg:
		if a.dialog != nil {
			a.dialog.onPreflight(msg)
		}
		return nil
	case logsResolvedMsg:
		return a.onLogsResolved(msg)
	case logsMsg:
		return a.onLogs(msg)
	case bundleMsg:
		a.onBundle(msg)
		return nil
	case doctorMsg:
		a.onDoctor(msg)
		return nil
	case ui.TaskProgressMsg, ui.TaskDoneMsg:
		if a.dialog != nil && a.dialog.task != nil {
			return a.dialog.onTask(msg)
		}
		return nil
	}
	return nil
}

func (a *App) handleKey(msg tea.KeyMsg) tea.Cmd {
	k := a.ctx.Keys
	if key.Matches(msg, k.ForceQuit) {
		return tea.Quit
	}
	if a.prompt() != nil {
		// Every dialog and the wizard answer only keys the guard admits:
		// none that came before the prompt could be read, no paste where a
		// key is asked for.
		if !a.guard.Admits(msg, a.entry()) {
			return nil
		}
		if a.wizard != nil {
			return a.wizardKey(msg)
		}
		closeIt, cmd := a.dialog.key(msg, func() int { a.taskSeq++; return a.taskSeq })
		if closeIt {
			if a.dialog.auditProblem != "" {
				// The log lacks this record: say so once the dialog goes.
				a.message = a.dialog.auditProblem
			}
			closed := a.dialog
			a.dialog = nil
			if a.home != nil {
				return tea.Batch(cmd, a.homeDialogClosed(closed))
			}
		}
		return cmd
	}
	if msg.Paste && a.mode == modeNormal {
		// Pasted text is text: only an input line takes it. It is never a
		// key that acts.
		return nil
	}
	if msg.Type == tea.KeyRunes && len(msg.Runes) > 1 && a.mode == modeNormal {
		return a.burst(msg)
	}
	if a.mode != modeNormal {
		switch {
		case key.Matches(msg, k.Back):
			switch {
			case a.mode == modeFilter && a.logs != nil:
				a.logs.setFilter("")
			case a.mode == modeFilter:
				a.screens[a.current].table().SetFilter("")
			}
			a.mode = modeNormal
			a.input.Blur()
			return nil
		case key.Matches(msg, k.Enter):
			value := strings.TrimSpace(a.input.Value())
			var cmd tea.Cmd
			if a.mode == modeCommand {
				cmd = a.runCommand(value)
			}
			a.mode = modeNormal
			a.input.Blur()
			return cmd
		}
		var cmd tea.Cmd
		a.input, cmd = a.input.Update(msg)
		switch {
		case a.mode == modeFilter && a.logs != nil:
			a.logs.setFilter(a.input.Value())
		case a.mode == modeFilter:
			a.screens[a.current].table().SetFilter(a.input.Value())
		}
		return cmd
	}
	if a.full {
		// The scrolling keys scroll it; any other leaves the help
		// screen; q still quits.
		if a.scrollHelp(msg) {
			return nil
		}
		a.full, a.helpTop = false, 0
		if key.Matches(msg, k.Quit) {
			return tea.Quit
		}
		return nil
	}
	a.message = ""
	_, cmd := a.dispatch(msg)
	return cmd
}

// wizardKey drives the open formation wizard; leaving it (esc, or any key
// once formed) comes back to the console.
func (a *App) wizardKey(msg tea.KeyMsg) tea.Cmd {
	_, cmd := a.wizard.Update(msg)
	// Run alone the wizard quits its program; inside the console it hands
	// control back.
	if a.wizard.Closed() {
		a.wizard = nil
		return nil
	}
	return cmd
}

// burst handles several runes that came in one message (keys typed faster
// than they are read, over SSH or scripted) one by one, so ":nodes" opens
// the command line and types "nodes" into it. A prompt that opens on the
// way ends the burst: the rest was typed before anyone could read it, and
// is dropped rather than let answer it.
func (a *App) burst(msg tea.KeyMsg) tea.Cmd {
	var cmds []tea.Cmd
	for i, r := range msg.Runes {
		cmds = append(cmds, a.handleKey(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}}))
		rest := tea.KeyMsg{Type: tea.KeyRunes, Runes: msg.Runes[i+1:]}
		if len(rest.Runes) == 0 {
			break
		}
		if a.prompt() != nil {
			a.ctx.Log.Debug("keys dropped: a prompt opened in the middle of a burst", "keys", rest.String())
			break
		}
		if a.mode != modeNormal {
			// The rest is typed into the command or filter line.
			cmds = append(cmds, a.handleKey(rest))
			break
		}
	}
	return tea.Batch(cmds...)
}

// refresh rebuilds the visible screen from the frame (ages move with the
// clock); the others are rebuilt when they are shown.
func (a *App) refresh() {
	a.builtAt = a.ctx.Now()
	for i := range a.built {
		a.built[i] = time.Time{}
	}
	a.show(a.current)
}

// show makes screen i the current one, rebuilt if the frame or the clock
// moved since it was last built.
func (a *App) show(i int) {
	a.current = i
	if a.built[i] != a.builtAt {
		a.screens[i].setFrame(&a.frame, a.builtAt)
		a.built[i] = a.builtAt
	}
}
