package cmd

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/ui"
)

func newMaintenanceCmd(g *globalFlags) *cobra.Command {
	f, d := &actionFlags{}, &drainFlags{}
	var all bool
	var stepTimeout time.Duration
	cmd := &cobra.Command{
		Use:   "maintenance NODE | --all",
		Short: "Walk a node through its service: drain, power it off or reboot it, wait for its return and its volumes, uncordon",
		Long: `Walk NODE through a service, one step at a time:

  1. the preflight of sitecon drain (quorum, counted from etcd's own
     member list: a server's walk is refused while that list is unknown;
     the last copy of a volume, pods that cannot move), then the drain,
     with its progress;
  2. "power it off or reboot it now": the node's state is shown until it
     goes down (or boots);
  3. until it is back: Ready with a new boot ID (Ready again with the
     same boot ID is a blip, said, not the reboot; only when the node
     reported no boot ID before does NotReady then Ready count);
  4. until every volume it held a replica of is healthy again (Longhorn's
     rebuilds shown);
  5. uncordon (a node that was cordoned before the walk stays cordoned).

Each wait gives up after --step-timeout. Ctrl-C or a timeout at any step
leaves the node as it was: uncordoned unless it was cordoned before.
--all walks every node, one at a time, in name order, and never starts
the next node while a volume is degraded or rebuilding. Each node's walk
is recorded in the audit log, before and after.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if all != (len(args) == 0) || len(args) > 1 {
				return fmt.Errorf("give one NODE, or --all")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			target := "all nodes"
			if !all {
				target = args[0]
			}
			a, err := beginAction(cmd, g, f, flow.ActionMaintenance, target)
			if err != nil {
				return err
			}
			opts := flow.MaintenanceOptions{Drain: d.DrainOptions, StepTimeout: stepTimeout}
			nodes := []string{target}
			if all {
				nodes = nil
				for _, n := range a.snap.Data().Nodes {
					nodes = append(nodes, n.Name)
				}
				slices.Sort(nodes)
			}
			for i, node := range nodes {
				if all {
					fmt.Fprintf(a.out(), "== %s (%d of %d)\n", node, i+1, len(nodes))
					if err := waitVolumesSettled(a, stepTimeout); err != nil {
						return a.done(err)
					}
				}
				if err := maintainNode(a, node, all, d, opts); err != nil {
					return a.done(err)
				}
			}
			// A drained node's apps may run elsewhere now: say so and
			// offer the command; the technician decides.
			if line := flow.AwayLine(flow.AwayApps(a.snap)); line != "" {
				fmt.Fprintln(a.out(), ui.Clean(line))
			}
			return a.done(nil)
		},
	}
	f.register(cmd)
	d.register(cmd)
	cmd.Flags().BoolVar(&all, "all", false, "walk every node, one at a time")
	cmd.Flags().DurationVar(&stepTimeout, "step-timeout", flow.DefaultStepTimeout, "give up a step's wait (the node going down, coming back, its volumes rebuilding) after this long; the node is left as it was")
	return cmd
}

// maintainNode is one node's walk: its preflight, the confirmation, the walk.
func maintainNode(a *action, node string, all bool, d *drainFlags, opts flow.MaintenanceOptions) error {
	rec := a.recorder.Open(flow.ActionMaintenance, node)
	p, err := flow.CheckDrain(a.cmd.Context(), a.snap, flow.ActionMaintenance, node, "", d.DrainOptions)
	if err == nil {
		printPreflight(a.out(), p)
	}
	m, err := flow.NewMaintenance(rec, a.snap, p, err, opts)
	if err != nil {
		return err
	}
	if p.NeedsForce() && !d.force {
		return rec.Refuse(append(p.Warnings, "run again with --force to accept this")...)
	}
	if a.flags.dryRun {
		return rec.DryRun()
	}
	typed := m.TypedName()
	if d.force {
		typed = node
	}
	// --confirm names one node: an unattended --all cannot type each
	// node's name, so a node that needs it is walked on its own.
	if all && typed != "" && a.flags.yes && a.flags.confirm != typed {
		return rec.Refuse(fmt.Sprintf("%s needs its name typed; walk it on its own: sitecon maintenance %s --yes --confirm %s", node, node, node))
	}
	if err := a.confirmed(fmt.Sprintf("Maintenance of %s: drain it (%d pod(s)), then you power it off or reboot it; uncordoned once it and its volumes are back?", node, len(p.Evict)), typed); err != nil {
		return rec.Cancel(err)
	}
	if err := m.Run(a.cmd.Context(), func(line string) { fmt.Fprintln(a.out(), line) }); err != nil {
		return err
	}
	fmt.Fprintf(a.out(), "maintenance of %s done\n", node)
	return nil
}

// waitVolumesSettled holds the next node of --all while a volume is
// degraded or rebuilding.
func waitVolumesSettled(a *action, within time.Duration) error {
	ctx, cancel := context.WithTimeout(a.cmd.Context(), within)
	defer cancel()
	last := ""
	for {
		state, ok := flow.VolumesSettled(a.snap.Data(), nil)
		if state != last {
			fmt.Fprintln(a.out(), "  "+state)
			last = state
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the next node waits for the volumes: %s: %w", state, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}
