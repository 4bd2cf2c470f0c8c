package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/kube/safety"
	"github.com/sitecon/sitecon/ui"
)

// actionFlags are shared by every command that changes the cluster.
type actionFlags struct {
	dryRun  bool
	yes     bool
	confirm string
}

func (f *actionFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "print the plan and the preflight result; change nothing")
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "do not ask for confirmation (scripts)")
	cmd.Flags().StringVar(&f.confirm, "confirm", "", "with --yes: the node name, for actions that need it typed")
}

// action is one run of a mutating command: the cluster as read once
// synced, the confirmation rules, and where its flow records itself.
type action struct {
	cmd      *cobra.Command
	flags    *actionFlags
	recorder flow.Recorder
	snap     *kube.Snapshot
	cancel   context.CancelFunc
}

// beginAction refuses in read-only mode, opens the audit log (an action
// that cannot be recorded is not taken) and reads the cluster; a cluster
// that cannot be read is recorded as the action failed.
func beginAction(cmd *cobra.Command, g *globalFlags, f *actionFlags, name, target string) (*action, error) {
	if g.readOnly {
		return nil, fmt.Errorf("read-only mode (--readonly or SITECON_READONLY): %s %s not run", name, target)
	}
	log, err := audit.Open(g.auditLog)
	if err != nil {
		return nil, err
	}
	a := &action{cmd: cmd, flags: f, recorder: flow.Recorder{Log: log, DryRun: f.dryRun}}
	failed := func(err error) error {
		return a.ended(a.recorder.Open(name, target), audit.OutcomeFailed, err)
	}
	cfg, err := g.restConfig()
	if err != nil {
		return nil, failed(err)
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	snap, err := kube.NewSnapshot(cfg, nil)
	if err != nil {
		cancel()
		return nil, failed(err)
	}
	snap.Start(ctx)
	syncCtx, syncCancel := context.WithTimeout(ctx, 15*time.Second)
	defer syncCancel()
	if err := snap.WaitForSync(syncCtx); err != nil {
		cancel()
		return nil, failed(err)
	}
	a.snap, a.cancel = snap, cancel
	return a, nil
}

// out is where the action prints. What it prints quotes the cluster (pod,
// node and app names, eviction messages, the preflight's reasons): every
// write is cleaned of terminal sequences on its way (docs/DESIGN.md,
// "Nothing raw reaches the terminal"), so no line printed here can be missed.
func (a *action) out() io.Writer { return cleanWriter{a.cmd.OutOrStdout()} }

// cleanWriter writes what it is given with each line cleaned (ui.CleanLines).
// Each fmt.Fprint* is one Write, so a sequence is never split between two.
type cleanWriter struct{ w io.Writer }

func (c cleanWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(c.w, ui.CleanLines(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// done releases the cluster watch; err is what the command returns.
func (a *action) done(err error) error {
	if a.cancel != nil {
		a.cancel()
	}
	return err
}

// ended records rec's outcome, when the flow has not: a step of the
// command's own (a cluster that cannot be read, a refusal it alone makes).
// A command cut off by a signal (Ctrl-C, the SSH session's SIGHUP) is
// recorded as interrupted, whatever step it was in.
func (a *action) ended(rec *flow.Record, outcome string, err error) error {
	if sig := (interruptedError{}); outcome != audit.OutcomeDone && errors.As(context.Cause(a.cmd.Context()), &sig) {
		outcome = audit.OutcomeInterrupted
		if err == nil {
			err = sig
		} else {
			err = fmt.Errorf("%w (%v)", err, sig)
		}
	}
	if werr := rec.End(outcome, err); werr != nil {
		err = errors.Join(err, fmt.Errorf("audit log: %w", werr))
	}
	return a.done(err)
}

// confirm asks the question; typed, when set, must be typed back exactly.
// --yes answers for scripts (with --confirm for typed answers). Not
// confirmed, the flow's record says so.
func (a *action) confirm(rec *flow.Record, question, typed string) error {
	if err := a.confirmed(question, typed); err != nil {
		return a.done(rec.Cancel(err))
	}
	return nil
}

func (a *action) confirmed(question, typed string) error {
	if a.flags.yes {
		if typed != "" && a.flags.confirm != typed {
			return fmt.Errorf("this needs the node name typed: add --confirm %s", typed)
		}
		return nil
	}
	in := a.cmd.InOrStdin()
	if f, ok := in.(*os.File); !ok || !term.IsTerminal(int(f.Fd())) {
		return errors.New("no terminal to confirm on: add --yes (and --confirm NODE where asked) to run unattended")
	}
	if typed != "" {
		fmt.Fprintf(a.out(), "%s\nType %q to go on: ", question, typed)
	} else {
		fmt.Fprintf(a.out(), "%s [y/N] ", question)
	}
	line, _ := bufio.NewReader(in).ReadString('\n')
	line = strings.TrimSpace(line)
	if (typed != "" && line == typed) || (typed == "" && (line == "y" || line == "yes")) {
		return nil
	}
	return errors.New("not confirmed; nothing changed")
}

// run carries out a confirmed flow, its progress printed line by line.
func (a *action) run(f *flow.Action) error {
	return a.done(f.Run(a.cmd.Context(), func(line string) { fmt.Fprintln(a.out(), line) }))
}

func printPreflight(w io.Writer, p safety.Preflight) {
	// The verdict quotes the cluster (names, the published etcd member
	// list's errors): cleaned before it is printed (safety rule 7).
	node := ui.Clean(p.Node)
	switch p.Purpose {
	case safety.PurposeRemove:
		fmt.Fprintf(w, "preflight for removing %s:\n", node)
	case safety.PurposeReplace:
		fmt.Fprintf(w, "preflight for replacing %s:\n", node)
	case safety.PurposeLeave:
		// Judged as a removal the node does to itself, and said so.
		fmt.Fprintf(w, "preflight for %s leaving its cluster:\n", node)
	default:
		fmt.Fprintf(w, "preflight for draining %s:\n", node)
	}
	for _, r := range p.Refusals {
		fmt.Fprintf(w, "  REFUSED  %s\n", ui.Clean(r))
	}
	for _, r := range p.Warnings {
		fmt.Fprintf(w, "  WARNING  %s (needs --force)\n", ui.Clean(r))
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "  note     %s\n", ui.Clean(n))
	}
	if len(p.Refusals)+len(p.Warnings) == 0 {
		fmt.Fprintln(w, "  ok       nothing stands in the way")
	}
	fmt.Fprintf(w, "pods to evict (%d):\n", len(p.Evict))
	for _, pod := range p.Evict {
		fmt.Fprintf(w, "  %s\n", pod)
	}
}

func newCordonCmd(g *globalFlags, unschedulable bool) *cobra.Command {
	f := &actionFlags{}
	name, doing := flow.CordonName(unschedulable), "Mark NODE unschedulable: running pods stay, new ones go elsewhere"
	if !unschedulable {
		doing = "Mark NODE schedulable again"
	}
	cmd := &cobra.Command{
		Use: name + " NODE", Short: doing, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			node := args[0]
			a, err := beginAction(cmd, g, f, name, node)
			if err != nil {
				return err
			}
			cordon := flow.Cordon(a.recorder, a.snap, node, unschedulable)
			n, ok := a.snap.Node(node)
			if !ok {
				return a.done(cordon.Refuse(fmt.Sprintf("%s: %v", node, safety.ErrUnknownNode)))
			}
			if n.Spec.Unschedulable == unschedulable {
				fmt.Fprintf(a.out(), "%s is already %sed; nothing to do\n", node, name)
				return a.ended(cordon.Record, audit.OutcomeDone, nil)
			}
			if f.dryRun {
				fmt.Fprintf(a.out(), "would %s %s\n", name, node)
				return a.done(cordon.DryRun())
			}
			if err := a.confirm(cordon.Record, fmt.Sprintf("%s %s?", strings.ToUpper(name[:1])+name[1:], node), ""); err != nil {
				return err
			}
			if err := a.run(cordon); err != nil {
				return err
			}
			fmt.Fprintf(a.out(), "%s %sed\n", node, name)
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

type drainFlags struct {
	flow.DrainOptions
	force bool
}

func (d *drainFlags) register(cmd *cobra.Command) {
	def := flow.DefaultDrainOptions()
	cmd.Flags().BoolVar(&d.force, "force", false, "go on past the preflight's warnings: pinned apps that stop, a volume that cannot attach while the node is out, a live node removed, a cluster left unable to take a failure (the node name must be typed)")
	cmd.Flags().DurationVar(&d.GracePeriod, "grace-period", def.GracePeriod, "time each pod gets to stop (negative: the pod's own)")
	cmd.Flags().DurationVar(&d.Timeout, "timeout", def.Timeout, "give up the evictions after this long (the node stays cordoned)")
	cmd.Flags().BoolVar(&d.DeleteEmptyDirData, "delete-emptydir-data", def.DeleteEmptyDirData, "evict pods with emptyDir data too (that data is lost)")
}

// localNode is the node this command runs on, from its cluster config, or
// "" when there is none to read (not on a node: then nothing is assumed).
func localNode(configPath string) string {
	if c, err := config.Load(configPath); err == nil {
		return c.NodeName
	}
	return ""
}

// runDrain is the preflight, the confirmation and the drain of node,
// shared by drain, node remove and node replace (rec's action says which);
// local is the node this runs on, when known; newDrain makes the flow
// from the preflight.
func runDrain(a *action, rec *flow.Record, node string, d *drainFlags, question, local string,
	newDrain func(p safety.Preflight, err error) (*flow.Drain, error)) error {
	p, err := flow.CheckDrain(a.cmd.Context(), a.snap, rec.Audit().Action, node, local, d.DrainOptions)
	if err == nil {
		printPreflight(a.out(), p)
	}
	drain, err := newDrain(p, err)
	if err != nil {
		return a.done(err)
	}
	if p.NeedsForce() && !d.force {
		return a.done(rec.Refuse(append(p.Warnings, "run again with --force to accept this")...))
	}
	if a.flags.dryRun {
		return a.done(rec.DryRun())
	}
	typed := drain.TypedName()
	if d.force {
		typed = node
	}
	if err := a.confirm(rec, fmt.Sprintf(question, node, len(p.Evict)), typed); err != nil {
		return err
	}
	// The drain cordons first: its intent is on disk before that.
	err = a.run(&drain.Action)
	if changed := (*change.PlanChangedError)(nil); errors.As(err, &changed) {
		fmt.Fprintf(a.out(), "the cluster changed since the preflight:\n")
		return &flow.Refused{Action: rec.Audit().Action, Target: rec.Audit().Target, Reasons: changed.Reasons}
	}
	if stopped := (*change.DrainStoppedError)(nil); errors.As(err, &stopped) {
		fmt.Fprintf(a.out(), "the drain stopped after %s:\n", rec.Audit().Detail)
		for _, r := range stopped.Reasons {
			fmt.Fprintf(a.out(), "  STOPPED  %s\n", r)
		}
		fmt.Fprintf(a.out(), "%s stays cordoned (sitecon uncordon %s takes it back)\n", node, node)
	}
	if stopped := (*change.RemovalStoppedError)(nil); errors.As(err, &stopped) {
		fmt.Fprintf(a.out(), "%s was drained but not removed: the cluster changed during the drain:\n", node)
		for _, r := range stopped.Reasons {
			fmt.Fprintf(a.out(), "  STOPPED  %s\n", r)
		}
		fmt.Fprintf(a.out(), "%s stays in the cluster, cordoned (sitecon uncordon %s takes it back)\n", node, node)
	}
	return err
}

func newDrainCmd(g *globalFlags) *cobra.Command {
	f, d := &actionFlags{}, &drainFlags{}
	cmd := &cobra.Command{
		Use:   "drain NODE",
		Short: "Take NODE out for service: preflight, cordon, evict its pods (PodDisruptionBudgets respected)",
		Long: `Drain a node for service. The preflight refuses when etcd would lose
quorum (with M etcd members, floor(M/2)+1 must stay healthy; M is etcd's own
member list as the servers' agents publish it, else the Nodes' etcd label,
and the verdict says which; it says the numbers), when the node holds the only healthy replica of a volume
in use, or when a pod cannot be evicted safely. It asks for --force (and the
node name typed) when pinned apps would stop, when the node holds the only
up-to-date copy of a detached volume (every replica that holds data counts,
stopped ones too), or under Longhorn's always-allow drain policy.
Then the node is cordoned and its pods evicted with kubectl's drain library:
DaemonSet pods stay, disruption budgets are waited on. Meanwhile the volumes
whose data is on the node are watched: if one loses a copy elsewhere or turns
faulted, the drain stops. Ctrl-C cancels; the node then stays cordoned.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := beginAction(cmd, g, f, flow.ActionDrain, args[0])
			if err != nil {
				return err
			}
			rec := a.recorder.Open(flow.ActionDrain, args[0])
			return runDrain(a, rec, args[0], d, "Drain %s: cordon it and evict %d pod(s)?", "", func(p safety.Preflight, err error) (*flow.Drain, error) {
				return flow.NewDrain(rec, a.snap, p, err, d.DrainOptions)
			})
		},
	}
	f.register(cmd)
	d.register(cmd)
	return cmd
}

func newNodeCmd(g *globalFlags) *cobra.Command {
	node := &cobra.Command{Use: "node", Short: "Add or remove cluster nodes"}
	f, d := &actionFlags{}, &drainFlags{}
	var removeConfig string
	remove := &cobra.Command{
		Use:   "remove NODE",
		Short: "Drain NODE (with its preflight), then delete it from the cluster",
		Long: `Remove a node: the drain preflight and drain, then the Node object is
deleted (k3s drops its etcd member) and the node leaves the cluster's node
list. The node name must be typed. Refused: the last server, the node this
runs on, the seed in effect (move it first: sitecon seed), a removal that
leaves etcd without quorum, and a node holding the only up-to-date copy of
a volume (copy it off first). A node still Ready needs --force, and so does
leaving the cluster unable to take a failure (fewer than three servers), and
a node not Ready that still has pods of apps that move: deleting the node
deletes them at once and their apps start elsewhere, while the device may be
cut off or paused, still running them (power it off and let the failover
move them first). To replace the device, see 'sitecon node replace'.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := beginAction(cmd, g, f, flow.ActionRemove, args[0])
			if err != nil {
				return err
			}
			rec := a.recorder.Open(flow.ActionRemove, args[0])
			return runDrain(a, rec, args[0], d, "Remove %s: evict %d pod(s), then delete the node from the cluster?", localNode(removeConfig),
				func(p safety.Preflight, err error) (*flow.Drain, error) {
					return flow.NewDrain(rec, a.snap, p, err, d.DrainOptions)
				})
		},
	}
	f.register(remove)
	d.register(remove)
	remove.Flags().StringVar(&removeConfig, "config", filepath.Join(DefaultConfigDir, "cluster.json"), "this node's cluster config: a node does not remove itself (not read if absent)")

	add := newJoinInfoCmd(g)
	add.Use = "add --role server|agent|edgeworker --node-name NAME"
	add.Short = "Show what a new node needs to join (the join bundle, or an edgeworker's k3s config)"

	rf, rd := &actionFlags{}, &drainFlags{}
	var src joinSource
	var role, newUUID string
	replace := &cobra.Command{
		Use:   "replace OLD NEW --node-uuid UUID",
		Short: "Remove OLD (drain with its preflight, then delete), then show NEW's join bundle at OLD's cluster address",
		Long: `Replace a device: OLD is removed as by 'sitecon node remove' (its name
must be typed), and the join bundle for NEW is printed with OLD's cluster
address, so the site's addressing stays as it was. Run 'sitecon form --join'
with it on the new device. Needs this node's cluster config (--config) for
the bundle.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			old, name := args[0], args[1]
			if role != "server" && role != "agent" {
				return fmt.Errorf("--role must be server or agent, not %q", role)
			}
			if newUUID == "" {
				return errors.New("--node-uuid is required: the new device's UUID")
			}
			// The bundle needs this node's config: check it before anything changes.
			local, err := config.Load(src.configPath)
			if err != nil {
				return fmt.Errorf("the join bundle needs this node's cluster config: %w", err)
			}
			a, err := beginAction(cmd, g, rf, flow.ActionReplace, old+" → "+name)
			if err != nil {
				return err
			}
			data := a.snap.Data()
			bundle := src.fromSnapshot(a.snap)
			rp, err := flow.PlanReplace(a.recorder, data, kube.Derive(data, time.Now()).Nodes, flow.ReplaceRequest{Old: old, New: name,
				Bundle: func(ip string) (string, error) { return bundle(role, name, newUUID, ip) }})
			if err != nil {
				return a.done(err)
			}
			err = runDrain(a, rp.Record, old, rd, "Replace %s: evict %d pod(s), delete it, then print the new node's bundle?", local.NodeName,
				func(p safety.Preflight, err error) (*flow.Drain, error) {
					return rp.Drain(a.snap, p, err, rd.DrainOptions)
				})
			if err != nil || rp.Record.Audit().Outcome != audit.OutcomeDone {
				return err
			}
			fmt.Fprintf(a.out(), "%s takes %s's address %s\n\n", name, old, rp.IP)
			_, err = io.WriteString(a.out(), rp.Bundle)
			return err
		},
	}
	rf.register(replace)
	rd.register(replace)
	src.register(replace.Flags(), "this node's cluster config (for the bundle)")
	replace.Flags().StringVar(&role, "role", "server", "the new node's role: server or agent")
	replace.Flags().StringVar(&newUUID, "node-uuid", "", "the new device's UUID")
	node.AddCommand(remove, add, replace)
	return node
}

func newSeedCmd(g *globalFlags) *cobra.Command {
	f := &actionFlags{}
	cmd := &cobra.Command{
		Use:   "seed NODE",
		Short: "Make NODE (Ready, an etcd member) the seed server every node joins through",
		Long: `Change the seed server, as a site does when the original seed device is
dead. The cluster's join_server_ip (ConfigMap sitecon-cluster) becomes NODE's
address; every node's agent re-renders its k3s config from it, so later
restarts join through NODE. A running k3s is not restarted.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := beginAction(cmd, g, f, "seed", args[0])
			if err != nil {
				return err
			}
			seed, err := flow.PlanSeed(a.recorder, a.snap, args[0])
			if err != nil {
				return a.done(err)
			}
			if seed.Already {
				fmt.Fprintln(a.out(), flow.SeedAlready(args[0], seed.From))
				if f.dryRun {
					return a.done(seed.DryRun())
				}
				return a.done(seed.End(audit.OutcomeDone, nil))
			}
			if f.dryRun {
				fmt.Fprintf(a.out(), "would make %s the seed (join_server_ip %s → its address)\n", args[0], seed.From)
				return a.done(seed.DryRun())
			}
			if err := a.confirm(seed.Record, fmt.Sprintf("Make %s the seed server? Every node's k3s config will join through it.", args[0]), ""); err != nil {
				return err
			}
			return a.run(&seed.Action)
		},
	}
	f.register(cmd)
	return cmd
}

func newMigrateCmd(g *globalFlags) *cobra.Command {
	f := &actionFlags{}
	req := flow.MigrateRequest{}
	cmd := &cobra.Command{
		Use:   "migrate APP NODE",
		Short: "Move an app to NODE on site (no controller needed) and follow it until it runs there",
		Long: `Move an app (by name or UUID) to another node. The target must be Ready,
schedulable, meet the app's node-select labels and not be where the app runs.
sitecon writes an on-site placement override (ConfigMap sitecon-placement);
every node's agent reads it and the target's agent lays the app out there. A
later designated node from the controller replaces the override. A move to the
node the app's layout names already (an app away from home after a failover)
writes no override: the app is started again and the scheduler places it there
(sitecon return-home does this with its own preflight).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := beginAction(cmd, g, f, "migrate", args[0]+" → "+args[1])
			if err != nil {
				return err
			}
			req.App, req.Target = args[0], args[1]
			m, err := flow.PlanMigrate(cmd.Context(), a.recorder, a.snap, req)
			if err != nil {
				return a.done(err)
			}
			if f.dryRun {
				fmt.Fprintf(a.out(), "would move %s from %s to %s: override %s\n", m.App.Name, m.From(), m.Target, m.Audit().Detail)
				return a.done(m.DryRun())
			}
			if err := a.confirm(m.Record, fmt.Sprintf("Move %s from %s to %s?", m.App.Name, m.From(), m.Target), ""); err != nil {
				return err
			}
			return a.run(&m.Action)
		},
	}
	f.register(cmd)
	cmd.Flags().DurationVar(&req.Timeout, "timeout", flow.DefaultMigrateTimeout, "how long to wait for the app to run on the target")
	cmd.Flags().StringVar(&req.Reason, "reason", "", "why, for the record")
	return cmd
}
