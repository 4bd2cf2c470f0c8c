package cmd

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/kube/safety"
	"github.com/sitecon/sitecon/ui"
)

func newReturnHomeCmd(g *globalFlags) *cobra.Command {
	f := &actionFlags{}
	var all, force bool
	req := flow.ReturnHomeRequest{}
	cmd := &cobra.Command{
		Use:   "return-home APP | --all",
		Short: "Move an app (or every app away from home) back to its designated node and follow it until it runs there",
		Long: `Return an app (by name or UUID) to its designated node, the node its layout
names, after a failover left it elsewhere: the migrate to that node. The app
is stopped where it runs and started again; the scheduler places it on its
designated node (no placement override is needed: its layout names that
node already). Refused, with nothing changed, when the designated node is
not Ready, is cordoned or lacks the app's node-select labels. When that node
holds no healthy replica of one of the app's Longhorn volumes (its copy is
being rebuilt after the node came back), the app would run there on the
copies of the other nodes, across the network, until the rebuild is done:
that needs --force and the node name typed. An app already home: nothing to
do. --all walks every app away from home, longest away first, one at a time,
each asked for and recorded on its own.`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return errors.New("give APP or --all, not both")
			case !all && len(args) != 1:
				return fmt.Errorf("accepts 1 arg (APP) or --all, received %d", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			target := "--all"
			if !all {
				target = args[0]
			}
			a, err := beginAction(cmd, g, f, flow.ActionReturnHome, target)
			if err != nil {
				return err
			}
			if !all {
				req.App = args[0]
				return a.done(returnHome(a, req, force))
			}
			away := flow.AwayApps(a.snap)
			if len(away) == 0 {
				fmt.Fprintln(a.out(), "no app runs away from its designated node; nothing to do")
				return a.done(nil)
			}
			var names []string
			for _, app := range away {
				names = append(names, app.Name+" (on "+app.Node+", home "+app.DesignatedNode+")")
			}
			fmt.Fprintf(a.out(), "%d app(s) away from home: %s\n", len(away), strings.Join(names, ", "))
			var notHome []string
			for i, app := range away {
				fmt.Fprintf(a.out(), "\n[%d/%d] %s\n", i+1, len(away), app.Name)
				r := req
				r.App = app.Name
				if app.UUID != "" {
					r.App = app.UUID
				}
				err := returnHome(a, r, force)
				if err == nil {
					continue
				}
				fmt.Fprintf(a.out(), "%s: %v\n", app.Name, err)
				notHome = append(notHome, app.Name)
				if cmd.Context().Err() != nil {
					// Cut off (Ctrl-C, a dropped session): the rest are not asked.
					break
				}
			}
			if len(notHome) > 0 {
				return a.done(fmt.Errorf("%d of %d app(s) not returned home: %s", len(notHome), len(away), strings.Join(notHome, ", ")))
			}
			return a.done(nil)
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "every app away from its designated node, one at a time")
	cmd.Flags().BoolVar(&force, "force", false, "go on when the designated node holds no healthy replica of the app's volumes (the node name must be typed)")
	cmd.Flags().DurationVar(&req.Timeout, "timeout", flow.DefaultMigrateTimeout, "how long to wait for each app to run on its designated node")
	cmd.Flags().StringVar(&req.Reason, "reason", "", "why, for the record")
	return cmd
}

// returnHome plans, asks for and runs one app's move home, under a record
// of its own; an app home already is said and recorded as nothing done.
func returnHome(a *action, req flow.ReturnHomeRequest, force bool) error {
	rh, err := flow.PlanReturnHome(a.cmd.Context(), a.recorder, a.snap, req)
	if err != nil {
		return err
	}
	if rh.AlreadyHome() {
		msg, err := rh.NothingToDo()
		fmt.Fprintln(a.out(), msg)
		return err
	}
	printReturnHome(a.out(), rh.Verdict)
	if rh.NeedsForce() && !force {
		return rh.RefuseUnforced()
	}
	m := rh.Move
	if a.flags.dryRun {
		fmt.Fprintf(a.out(), "would move %s from %s to %s: %s\n", m.App.Name, m.From(), m.Target, m.Plan())
		return m.DryRun()
	}
	question := fmt.Sprintf("Return %s home: stop it on %s and start it again on %s?", m.App.Name, m.From(), m.Target)
	if err := a.confirmed(question, rh.TypedName()); err != nil {
		return rh.Record.Cancel(err)
	}
	return m.Run(a.cmd.Context(), func(line string) { fmt.Fprintln(a.out(), line) })
}

// printReturnHome prints the return-home preflight's verdict.
func printReturnHome(w io.Writer, v safety.ReturnHomeVerdict) {
	// The verdict quotes the cluster (names): cleaned (safety rule 7).
	fmt.Fprintf(w, "preflight for returning %s home (%s → %s):\n", ui.Clean(v.App), ui.Clean(flow.OrNone(v.From)), ui.Clean(v.Home))
	for _, r := range v.Refusals {
		fmt.Fprintf(w, "  REFUSED  %s\n", ui.Clean(r))
	}
	for _, r := range v.Warnings {
		fmt.Fprintf(w, "  WARNING  %s (needs --force)\n", ui.Clean(r))
	}
	if len(v.Refusals)+len(v.Warnings) == 0 {
		fmt.Fprintf(w, "  ok       %s is Ready and schedulable\n", ui.Clean(v.Home))
	}
	for _, n := range v.Notes {
		fmt.Fprintf(w, "  note     %s\n", ui.Clean(n))
	}
}
