// Package cmd is sitecon's command tree: one file per command (cobra's
// layout, as kubectl's), the root command and its shared flags here. It
// wires the packages below it (the console's views, the agent, the doctor,
// the cluster reads and writes) and may import any of them; nothing imports
// it but main.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/access"
	"github.com/sitecon/sitecon/ui"
	"github.com/sitecon/sitecon/views"
)

// Execute runs the command line os.Args names and exits with its status.
func Execute() {
	// client-go logs through klog to stderr; sitecon logs through slog to a
	// file it chooses, so klog is silenced for every command.
	klog.SetLogger(logr.Discard())
	ctx, stop := signalContext(context.Background())
	cmd, err := newRoot().ExecuteContextC(ctx)
	stop()
	var status exitError
	if errors.As(err, &status) && status.err == nil {
		os.Exit(status.code) // the command has said why
	}
	if err != nil {
		printError(os.Stderr, err)
		os.Exit(exitCode(cmd, err))
	}
}

// exitError is a command's outcome with an exit status of its own; with
// no err the command has printed what it had to say, and nothing more is.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e exitError) Unwrap() error { return e.err }

// exitCode is the exit status for a command's error: its own, when it has
// one; for sitecon status and sitecon doctor (read by scripts) any other (a bad flag, an unknown output format,
// a kubeconfig that cannot be loaded: nothing was asked of the cluster)
// is a usage error; 1 otherwise.
func exitCode(cmd *cobra.Command, err error) int {
	var e exitError
	switch {
	case errors.As(err, &e):
		return e.code
	case cmd != nil && (cmd.Name() == "status" || cmd.Name() == "doctor") && cmd.Parent() != nil && !cmd.Parent().HasParent():
		return statusUsage
	}
	return 1
}

// sitecon status's exit codes (README, `sitecon status --help`).
const (
	statusUnhealthy  = 1
	statusUnreadable = 2
	statusUsage      = 3
)

// statusExitHelp documents the codes in --help.
const statusExitHelp = `Exit status:
  0  healthy: every node Ready, every volume healthy, every app running,
     nothing else the console's overview would alert on
  1  something needs attention: the problems are listed (a node not Ready,
     a volume degraded or faulted, an app not running, a failed pod, a
     kubelet outside the version skew policy)
  2  the cluster API could not be read within --timeout (it did not answer,
     answered that it is not ready: etcd without quorum, or answered but the
     cluster was not read whole in time), or the command was interrupted
     first; the error says what, why and what to check,
     and with this node's cluster config (--config) every node's agent is
     asked directly: what each reports is printed (-o json: "nodeReports")
  3  usage: a bad flag or argument, an unknown output format, a kubeconfig
     that cannot be loaded
With --watch the exit status is 0 when q or Ctrl-C ends it.`

// apiUnreadable is sitecon status's error when the cluster API could not
// be read: what was not reached, why, and what to check. waitFlag is the
// flag that set within, for the advice to wait longer.
func apiUnreadable(host string, within time.Duration, waitFlag string, err error) error {
	var reading kube.StillReadingError
	if errors.As(err, &reading) {
		// It answered: asking whether k3s runs would send the technician
		// after a fault that is not there.
		// Before discovery no kind is known to name.
		what := "the cluster was"
		if len(reading.Kinds) > 0 {
			what = strings.Join(reading.Kinds, ", ") + " were"
		}
		msg := fmt.Sprintf("the cluster API at %s answered, but after %s %s still being read",
			host, within, what)
		msg += fmt.Sprintf("\ncheck: a large cluster or a busy machine takes longer: run it again with %s %s", waitFlag, max(4*within, 30*time.Second))
		return exitError{code: statusUnreadable, err: errors.New(msg)}
	}
	msg := fmt.Sprintf("the cluster API at %s did not answer within %s: %v", host, within, err)
	if hint := kube.APIDownHint(err.Error()); hint != "" {
		msg += "\ncheck: " + hint
	}
	return exitError{code: statusUnreadable, err: errors.New(msg)}
}

// printError writes a command's error for the terminal. It quotes the
// cluster's words and files' (API errors, preflight reasons, names), so
// each line is cleaned (safety rule 7); the line breaks of a list of
// reasons stay.
func printError(w io.Writer, err error) {
	fmt.Fprintln(w, "sitecon:", ui.CleanLines(err.Error()))
}

// interruptedError is the cause of a command's context ended by a signal.
type interruptedError struct{ sig os.Signal }

func (e interruptedError) Error() string { return "interrupted by " + e.sig.String() }

// signalContext is ctx, cancelled (with an interruptedError as its cause)
// by the first SIGINT, SIGTERM or SIGHUP. SIGHUP is what a dropped SSH
// session or closed terminal sends: by default it kills the process in the
// middle of an action, leaving a cordoned node and no outcome. Caught, the
// action in flight sees its context end, stops as it would on Ctrl-C and
// records "interrupted". Later signals are caught too, so the outcome gets
// written.
//
// SIGPIPE is received and dropped: the kernel raises it for a write to
// any broken pipe or connection (k3s restarting under the agent, an API
// server going away under the console), so it says nothing about the
// terminal, and taken as a stop it stopped the agent each time a peer went
// mid-write. Received, every such write fails with EPIPE, a write to a gone
// terminal included (by default that one kills the process before the
// outcome is written). Not ignored (SIG_IGN): an ignored signal is
// inherited across exec, by k3s and through it by the apps' containers.
func signalContext(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		select {
		case sig := <-ch:
			cancel(interruptedError{sig})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel(nil)
	}
}

// globalFlags are shared by every command.
type globalFlags struct {
	kubeconfig string
	context    string
	logFile    string
	logLevel   slog.Level
	// readOnly hides the console's actions and makes the action commands
	// refuse (--readonly, or SITECON_READONLY set, e.g. for an SSH account).
	readOnly bool
	auditLog string
}

func newRoot() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "sitecon",
		Short:         "On-site agent and console for an EVE edge-node cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, "+kube.K3sKubeconfig+", ~/.kube/config)")
	pf.StringVar(&g.context, "context", "", "kubeconfig context (default: the current one)")
	pf.StringVar(&g.logFile, "log-file", "", "write logs to this file (default: none for commands)")
	pf.TextVar(&g.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn, error")
	pf.BoolVar(&g.readOnly, "readonly", os.Getenv("SITECON_READONLY") != "", "look, do not touch: no actions in the console, action commands refuse (env SITECON_READONLY)")
	pf.StringVar(&g.auditLog, "audit-log", audit.DefaultPath, "where actions are recorded (JSON lines, 0600)")
	var agentSocket, hint string
	var join joinSource
	root.Long = `sitecon with no command opens the site console: nodes, VIP owner, pod
health per namespace, Longhorn volumes and how long each has been in its
state, apps and where they run, and what sitecon doctor finds. Keys: 1-7 or
tab for screens, : for commands, / to filter, s to sort, enter and esc to
drill in and out, ? for help, q to quit.`
	root.Flags().StringVar(&agentSocket, "agent-socket", DefaultAgentSocket, "this node's agent socket")
	root.Flags().StringVar(&hint, "hint", "", "a line the console says at start and in its help (make demo: the next step)")
	_ = root.Flags().MarkHidden("hint")
	join.register(root.Flags(), "this node's cluster config (for :add and :replace, the join info of a new node)")
	root.Args = cobra.NoArgs
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		return runConsole(cmd.Context(), g, agentSocket, hint, join)
	}
	root.AddCommand(newStatusCmd(g), newAgentCmd(g), newFormCmd(g), newJoinInfoCmd(g),
		newCordonCmd(g, true), newCordonCmd(g, false), newDrainCmd(g), newMaintenanceCmd(g), newMigrateCmd(g), newReturnHomeCmd(g), newSeedCmd(g), newNodeCmd(g),
		newVersionCmd(), newLogsCmd(g), newVNCCmd(g), newReadOnlyKubeconfigCmd(g))
	root.AddCommand(newGenDocsCmd(root), newDoctorCmd(g), newBundleCmd(g))
	// --version prints what `sitecon version` prints (cobra reads the
	// template as text/template: the report holds no braces).
	root.Version = buildVersion
	var version strings.Builder
	currentVersion().write(&version)
	root.SetVersionTemplate(version.String())
	explainMistakes(root)
	return root
}

// explainMistakes makes every command of the tree answer a mistyped
// command line with what was wrong and how the command is used, and a
// misspelt command with what was probably meant; a command that only
// groups others (sitecon node, sitecon agent) refuses an unknown one
// instead of printing its help and succeeding, so a script's typo fails.
func explainMistakes(cmd *cobra.Command) {
	withUsage := func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w\nusage: %s", err, c.UseLine())
	}
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return withUsage(c, err) })
	switch {
	case cmd.HasSubCommands() && (cmd.Args == nil || !cmd.Runnable()):
		// cobra's own check suggests only at the root, and only without
		// an Args rule; a group that runs nothing itself had none.
		runs := cmd.Runnable()
		cmd.Args = func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			return unknownCommand(c, args[0])
		}
		if !runs {
			cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		}
	case cmd.HasSubCommands():
		// A command that also runs itself (the root opens the console):
		// an argument it takes none of is a mistyped command.
		own := cmd.Args
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := own(c, args); err != nil && len(args) > 0 {
				return unknownCommand(c, args[0])
			}
			return nil
		}
	case cmd.Args != nil:
		own := cmd.Args
		cmd.Args = func(c *cobra.Command, args []string) error {
			if err := own(c, args); err != nil {
				return withUsage(c, err)
			}
			return nil
		}
	}
	for _, sub := range cmd.Commands() {
		explainMistakes(sub)
	}
}

// unknownCommand is the error for a command name c does not have, with
// the names it probably meant.
func unknownCommand(c *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, c.CommandPath())
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2 // cobra's own default, set only on its own path
	}
	if near := c.SuggestionsFor(name); len(near) > 0 {
		msg += "; did you mean " + strings.Join(near, " or ") + "?"
	}
	return fmt.Errorf("%s\nrun '%s --help' for its commands", msg, c.CommandPath())
}

// logger returns the slog logger the flags ask for. Without --log-file it
// discards: a command's output is its result, not its logs.
func (g *globalFlags) logger() (*slog.Logger, func(), error) {
	if g.logFile == "" {
		return slog.New(slog.DiscardHandler), func() {}, nil
	}
	f, err := os.OpenFile(g.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("log file: %w", err)
	}
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: g.logLevel})), func() { f.Close() }, nil
}

func (g *globalFlags) restConfig() (*rest.Config, error) {
	cfg, err := kube.LoadRESTConfig(g.kubeconfig, g.context)
	if err != nil {
		return nil, err
	}
	cfg.WarningHandler = rest.NoWarnings{}
	return cfg, nil
}

func newStatusCmd(g *globalFlags) *cobra.Command {
	var output string
	var timeout time.Duration
	var watch bool
	var agentSocket string
	var reports nodeReports
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the cluster's status: nodes, VIP, pod health, volumes, apps",
		Long: `Print the cluster's status once: node readiness, the VIP owner, pod health
per namespace, Longhorn volumes with their robustness and since when, apps
with the node they run on, and the problems that need attention.

` + statusExitHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := views.ParseFormat(output)
			if err != nil {
				return err
			}
			log, closeLog, err := g.logger()
			if err != nil {
				return err
			}
			defer closeLog()
			cfg, err := g.restConfig()
			if err != nil {
				return err
			}
			// The status shows no cluster Events (its problems come from
			// the status and the agent): a busy site's Events are not read.
			snap, err := kube.NewSnapshot(cfg, log, kube.WithoutEvents())
			if err != nil {
				return err
			}
			if watch {
				snap.Start(cmd.Context())
				term, restore := watchTerminal(cmd)
				defer restore()
				return views.WatchStatus(cmd.Context(), term, snap, agentSource(agentSocket), format)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			snap.Start(ctx)
			if err := snap.WaitForSync(ctx); err != nil {
				if errors.Is(cmd.Context().Err(), context.Canceled) {
					return exitError{code: statusUnreadable, err: errors.New("interrupted before the cluster API answered")}
				}
				// What each node's agent says of itself, asked
				// directly: the cluster was never read, so the
				// config says where the nodes are.
				return withNodeReports(cmd, reports, nil, apiUnreadable(cfg.Host, timeout, "--timeout", err), format)
			}
			now := time.Now()
			report := views.NewStatusReport(snap.Status(), readAgentSummary(cmd.Context(), agentSocket), now)
			if report.Stale != nil {
				// Read once, then lost before it was printed: each node
				// is asked too, its report printed with the status.
				got := reports.gather(cmd.Context(), report.Nodes)
				report.NodeReports = &got
			}
			if err := views.WriteStatus(cmd.OutOrStdout(), report, now, format); err != nil {
				return err
			}
			switch {
			case report.Stale != nil:
				if format == views.FormatTable && report.NodeReports.Problem == "" {
					if err := views.WriteNodeReports(cmd.OutOrStdout(), *report.NodeReports, "", now, format); err != nil {
						return err
					}
				}
				// What was printed says it is stale.
				return apiUnreadable(cfg.Host, timeout, "--timeout", errors.New(report.Stale.Reason))
			case len(report.Problems) > 0:
				return exitError{code: statusUnhealthy, err: fmt.Errorf("%d problem(s) need attention (listed under Problems)", len(report.Problems))}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or yaml")
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Second, "give up reading the cluster after this long")
	cmd.Flags().StringVar(&agentSocket, "agent-socket", DefaultAgentSocket, "this node's agent socket")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "keep the status on screen, redrawn on every change; survives the API server going away")
	cmd.Flags().StringVar(&reports.configPath, "config", filepath.Join(DefaultConfigDir, "cluster.json"),
		"this node's cluster config: when the cluster API does not answer, every node's agent is asked for its own report with its key (not read if absent)")
	return cmd
}

// withNodeReports is sitecon status's answer when the cluster API does not
// answer (apiDown, exit status 2): what each node's agent reports, asked
// directly, printed in format; without a cluster config the error says
// what the reports need and nothing is printed.
func withNodeReports(cmd *cobra.Command, src nodeReports, known []kube.NodeStatus, apiDown error, format views.Format) error {
	got := src.gather(cmd.Context(), known)
	if got.Problem != "" {
		var e exitError
		if errors.As(apiDown, &e) {
			e.err = fmt.Errorf("%w\nnode reports: %s", e.err, got.Problem)
			return e
		}
		return apiDown
	}
	if err := views.WriteNodeReports(cmd.OutOrStdout(), got, apiDown.Error(), time.Now(), format); err != nil {
		return err
	}
	return apiDown
}

// identityReadsOnly: the API server says the credential may not cordon a
// node, the least of the console's actions. Asked once, briefly: with no
// answer the console offers its actions and the API server judges each.
func identityReadsOnly(ctx context.Context, cfg *rest.Config) bool {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	may, err := access.MayChangeNodes(ctx, cs)
	return err == nil && !may
}

// runConsole opens the console with what the flags say: the cluster (or
// why it cannot be read), the agent's socket, the audit log, and the join
// info of this node's cluster config for :add and :replace.
func runConsole(ctx context.Context, g *globalFlags, agentSocket, hint string, join joinSource) error {
	if g.logFile == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			dir = os.TempDir()
		}
		_ = os.MkdirAll(filepath.Join(dir, "sitecon"), 0o700)
		g.logFile = filepath.Join(dir, "sitecon", "console.log")
	}
	log, closeLog, err := g.logger()
	if err != nil {
		return err
	}
	defer closeLog()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := views.ConsoleOptions{Agent: agentSource(agentSocket), ReadOnly: g.readOnly, AuditPath: g.auditLog, Log: log, Hint: hint}
	if cfg, err := g.restConfig(); err != nil {
		opts.Problem = err.Error()
	} else if opts.Snap, err = kube.NewSnapshot(cfg, log.With("component", "snapshot"), kube.ReturnSyncPeak()); err != nil {
		opts.Problem = err.Error()
	} else {
		snap := opts.Snap
		snap.Start(ctx)
		opts.JoinInfo = join.fromSnapshot(snap)
		if !opts.ReadOnly && identityReadsOnly(ctx, cfg) {
			// The cluster's own word (a read-only account's kubeconfig,
			// sitecon readonly-kubeconfig): offer no action it would refuse.
			opts.ReadOnly = true
			opts.Hint = strings.TrimSpace("read-only: this identity may not change the cluster. " + opts.Hint)
		}
	}
	// While the cluster API does not answer, the overview shows what each
	// node's agent reports, asked with this node's cluster config.
	opts.NodeReports = nodeReports{configPath: join.configPath}.gather
	// :form forms a new cluster from the console, as the seed, into the
	// default config directory.
	// b on the overview takes what sitecon bundle takes, with its defaults.
	opts.Bundle = func(ctx context.Context) (string, error) {
		path, m, err := takeBundle(ctx, g, newBundleFlags(), log.With("component", "bundle"))
		if err != nil {
			return "", err
		}
		return bundleLine(path, m), nil
	}
	// The doctor screen runs what sitecon doctor runs, with its default
	// deadlines, this node's k3s data dir, agent and cluster config.
	opts.Doctor = func(ctx context.Context) doctor.Report {
		ctx, cancel := context.WithTimeout(ctx, defaultDoctorTimeout)
		defer cancel()
		return doctor.Diagnose(ctx, doctorOptions(g, log.With("component", "doctor"), k3s.DefaultPaths.DataDir, agentSocket, join.configPath, defaultDoctorTimeout/2))
	}
	opts.FormWizard = func(uiCtx *ui.Context) *views.FormWizard {
		var result *formation.Formed
		return newFormWizard(uiCtx, interfaceNames(), DefaultConfigDir, false, &result)
	}
	return views.RunConsole(ctx, opts)
}
