package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/test/sitebox"
	"github.com/sitecon/sitecon/test/sitebox/clockstep"
)

// faultCommands are the faults a person stages by hand on a bootstrap-mode
// site, as the fault explorer does (test/sitebox/chaos.go).
func faultCommands(dir *string) []*cobra.Command {
	withSite := func(do func(*sitebox.Site, []string) error) func(*cobra.Command, []string) error {
		return func(_ *cobra.Command, args []string) error {
			site, err := loadSite(*dir)
			if err != nil {
				return err
			}
			return do(site, args)
		}
	}
	cut := &cobra.Command{
		Use:   "cut NODE...",
		Short: "Cut the nodes off from the others and from the API server; they still reach each other (run again for another group)",
		Args:  cobra.MinimumNArgs(1),
		RunE: withSite(func(site *sitebox.Site, args []string) error {
			return site.Cut(nodesOf(site, args))
		}),
	}
	drop := &cobra.Command{
		Use:   "drop FROM TO",
		Short: "Lose every packet from node FROM to node TO (one way: TO's packets to FROM still arrive)",
		Args:  cobra.ExactArgs(2),
		RunE:  withSite(func(site *sitebox.Site, args []string) error { return site.Drop(args[0], args[1]) }),
	}
	var part string
	pause := &cobra.Command{
		Use:   "pause NODE",
		Short: "Freeze a node's agent, kubelet or whole host (SIGSTOP); its addresses still accept connections",
		Args:  cobra.ExactArgs(1),
		RunE: withSite(func(site *sitebox.Site, args []string) error {
			p, err := sitebox.ParsePausePart(part)
			if err != nil {
				return err
			}
			return site.Pause(args[0], p)
		}),
	}
	pause.Flags().StringVar(&part, "part", "host", "what to freeze: agent, kubelet or host")
	resume := &cobra.Command{
		Use:   "resume NODE",
		Short: "Let a paused part of a node go on",
		Args:  cobra.ExactArgs(1),
		RunE: withSite(func(site *sitebox.Site, args []string) error {
			p, err := sitebox.ParsePausePart(part)
			if err != nil {
				return err
			}
			return site.Resume(args[0], p)
		}),
	}
	resume.Flags().StringVar(&part, "part", "host", "what to let go on: agent, kubelet or host")
	fillDisk := &cobra.Command{
		Use:   "fill-disk NODE",
		Short: "Fill a node's agent state disk, as a full /persist: every write there fails until heal (up --state-disks)",
		Args:  cobra.ExactArgs(1),
		RunE:  withSite(func(site *sitebox.Site, args []string) error { return site.FillDisk(args[0]) }),
	}
	clockStep := &cobra.Command{
		Use:   "clock-step NODE DURATION",
		Short: "Step a node's clock ahead (90s) or back (-2m) from the true time; 0 sets it right (the site's sitecon and k3s stand-in built with clock-overlay)",
		Example: `  go build -overlay "$(sitebox clock-overlay /tmp/clock)" -o /tmp/sitecon-clock .
  sitebox clock-step node-b -- -2m`,
		Args: cobra.ExactArgs(2),
		RunE: withSite(func(site *sitebox.Site, args []string) error {
			d, err := time.ParseDuration(args[1])
			if err != nil {
				return fmt.Errorf("clock step %q: %w", args[1], err)
			}
			return site.StepClock(args[0], d)
		}),
	}
	clockOverlay := &cobra.Command{
		Use:   "clock-overlay DIR",
		Short: "Write the overlay of Go's time package that gives a node a clock of its own, and print the path for go build -overlay",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			path, err := clockstep.Overlay("go", args[0])
			if err == nil {
				fmt.Println(path)
			}
			return err
		},
	}
	heal := &cobra.Command{
		Use:   "heal",
		Short: "Undo every cut, drop, pause and full disk, and set every clock right",
		Args:  cobra.NoArgs,
		RunE:  withSite(func(site *sitebox.Site, _ []string) error { return site.Heal() }),
	}
	faults := &cobra.Command{
		Use:   "faults",
		Short: "Show the cuts, drops, pauses, full disks and clock steps staged",
		Args:  cobra.NoArgs,
		RunE: withSite(func(site *sitebox.Site, _ []string) error {
			f, err := site.StagedFaults()
			if err != nil {
				return err
			}
			for _, g := range f.Cut {
				fmt.Printf("cut off: %v\n", g)
			}
			for _, d := range f.Drops {
				fmt.Printf("dropped: %s → %s\n", d.From, d.To)
			}
			for n, parts := range f.Paused {
				fmt.Printf("paused: %s %v\n", n, parts)
			}
			for _, n := range f.FullDisks {
				fmt.Printf("disk full: %s\n", n)
			}
			for n, d := range f.Clocks {
				fmt.Printf("clock stepped: %s %s\n", n, d)
			}
			return nil
		}),
	}
	killAgent := &cobra.Command{
		Use:   "kill-agent NODE",
		Short: "Kill a node's agent (SIGKILL), as a crash does; restart-agent starts it again",
		Args:  cobra.ExactArgs(1),
		RunE:  withSite(func(site *sitebox.Site, args []string) error { return site.KillAgent(args[0]) }),
	}
	restartAgent := &cobra.Command{
		Use:   "restart-agent NODE [-- AGENT-FLAGS...]",
		Short: "Start a killed agent again, as its service manager does (in its namespace, with any cut still in place)",
		Long: `Start a killed agent again, as its service manager does (in its namespace, with any cut still in place).
Flags after -- are added to its command for this start and every later one
(a technician's changed service file), e.g. -- --failover-timeout 1m0s, or -- --no-fence.`,
		Example: "  sitebox kill-agent node-b && sitebox restart-agent node-b -- --failover-timeout 1m0s",
		Args:    cobra.MinimumNArgs(1),
		RunE: withSite(func(site *sitebox.Site, args []string) error {
			return site.RestartAgentWith(args[0], args[1:]...)
		}),
	}
	var runtimeNode string
	runtime := &cobra.Command{
		Use:    "runtime",
		Short:  "Run a node's container runtime simulator: a real process per pod its kubelet runs (started by up --runtime)",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return sitebox.ServeRuntime(ctx, *dir, runtimeNode, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		},
	}
	runtime.Flags().StringVar(&runtimeNode, "node", "", "the node whose pods to run")
	return []*cobra.Command{cut, drop, pause, resume, fillDisk, clockStep, clockOverlay, heal, faults, killAgent, restartAgent, runtime}
}
