package views

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"golang.org/x/term"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/ui"
)

// ConsoleOptions is what the console runs with; the command line decides
// each of them.
type ConsoleOptions struct {
	// Snap is the cluster, started; nil when it cannot be read, with
	// Problem saying why (the console still opens and shows the agent).
	Snap    *kube.Snapshot
	Problem string
	// Agent reads this node's agent.
	Agent AgentSource
	// ReadOnly hides every action and :form.
	ReadOnly bool
	// AuditPath is the audit log: actions are recorded there and its tail
	// is shown on the events screen.
	AuditPath string
	// JoinInfo makes a new node's join bundle for :add and :replace; nil
	// where this device holds no cluster config.
	JoinInfo func(role, name, uuid, ip string) (string, error)
	// Hint is a line to say at start and in the help (the demo's next step).
	Hint string
	// NodeReports asks every node's agent for its own report, given the
	// nodes last seen (their names and addresses); nil where this device
	// holds no cluster config. Asked while the cluster API does not answer.
	NodeReports func(ctx context.Context, known []kube.NodeStatus) nodestate.NodeReports
	// FormWizard builds the :form wizard.
	FormWizard func(*ui.Context) *FormWizard
	// Bundle takes a support bundle and says where it went and what is
	// missing (b on the overview); nil: the key is not offered.
	Bundle func(context.Context) (string, error)
	// Doctor runs what sitecon doctor runs, within its deadlines, and
	// returns its report (the doctor screen); nil: the screen says it is
	// not available.
	Doctor func(context.Context) doctor.Report
	Log    *slog.Logger
}

// RunConsole runs the console until q, Ctrl-C or ctx ends. It starts even
// when the cluster cannot be read (it shows why, and the agent's local
// state) and never exits on its own.
func RunConsole(ctx context.Context, opts ConsoleOptions) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	uiCtx := ui.NewContext(lipgloss.DefaultRenderer(), time.Now, opts.Log)
	uiCtx.ReadOnly = opts.ReadOnly
	app := NewApp(uiCtx)
	if opts.Hint != "" {
		app.SetHint(opts.Hint)
	}
	if !opts.ReadOnly {
		// Actions and :form need the audit log; without a cluster the
		// cluster actions say so themselves, :form does not need one.
		actions := &Actions{Snap: opts.Snap}
		if auditLog, err := audit.Open(opts.AuditPath); err != nil {
			actions.Unavailable = err.Error()
		} else {
			actions.Audit = auditLog
		}
		if opts.Snap != nil {
			actions.JoinInfo = opts.JoinInfo
		}
		app.SetActions(actions)
		if opts.FormWizard != nil {
			app.SetFormWizard(func() *FormWizard { return opts.FormWizard(uiCtx) })
		}
	}
	if opts.Bundle != nil {
		// A bundle changes nothing in the cluster: read-only consoles
		// take them too.
		app.SetBundle(ctx, opts.Bundle)
	}
	if opts.Doctor != nil {
		// The doctor only reads: read-only consoles run it too.
		app.SetDoctor(ctx, opts.Doctor)
	}
	app.SetNodeReports(ctx, opts.NodeReports)
	if opts.Snap != nil && opts.Snap.Clients() != nil {
		// Reading logs changes nothing: read-only consoles have them too.
		app.SetLogSource(ctx, PodLogSource(opts.Snap.Clients()))
	}
	term, closeTerm, err := OpenTerminal(os.Stdout, "/dev/tty")
	if err != nil {
		return err
	}
	defer closeTerm()
	prog := tea.NewProgram(app, append(term, tea.WithAltScreen(), tea.WithContext(ctx), tea.WithFPS(FramesPerSecond))...)
	auditTail := audit.NewTail(opts.AuditPath, 200)
	go Feed(ctx, opts.Snap, func(ctx context.Context) *AgentSummary {
		sum := opts.Agent(ctx)
		sum.Events = append(sum.Events, AuditEvents(auditTail)...)
		return sum
	}, opts.Problem, prog.Send)
	opts.Log.Info("console started", "readonly", opts.ReadOnly)
	_, err = prog.Run()
	// A signal (the SSH session's SIGHUP) ended the console, maybe with an
	// action under way: its outcome is recorded before the process goes.
	app.Abandon(context.Cause(ctx))
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// FramesPerSecond is how often the terminal is redrawn, at most: bubbletea
// wakes its renderer that often whether or not anything changed, and at
// its default 60 those wake-ups were most of an idle console's CPU (0.61 s
// a minute on a 10,000-pod site, against 0.42 at 30 and 0.32 at 10). At
// 30 a key's echo waits at most 33 ms for its frame.
const FramesPerSecond = 30

// OpenTerminal is where the console draws and reads keys: stdout when it
// is a terminal; else (piped, as in make demo | tee, or redirected) the
// controlling terminal, tty, opened for both, as terminal programs do
// (less, top); else an error saying why nothing can be drawn, rather than
// drawing into the pipe.
func OpenTerminal(stdout *os.File, tty string) ([]tea.ProgramOption, func(), error) {
	if term.IsTerminal(int(stdout.Fd())) {
		return nil, func() {}, nil
	}
	f, err := os.OpenFile(tty, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("the console needs a terminal: its output is not one (piped or redirected) and %s cannot be opened (%v); sitecon status prints a report a pipe can take", tty, err)
	}
	if !term.IsTerminal(int(f.Fd())) {
		f.Close()
		return nil, nil, fmt.Errorf("the console needs a terminal: its output is not one (piped or redirected), nor is %s; sitecon status prints a report a pipe can take", tty)
	}
	return []tea.ProgramOption{tea.WithOutput(f), tea.WithInput(f)}, func() { f.Close() }, nil
}
