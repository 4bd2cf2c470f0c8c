package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
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

// action is one run of a mutating command: its audit record, the cluster
// as read once synced, and the confirmation rules.
type action struct {
	cmd    *cobra.Command
	flags  *actionFlags
	log    *audit.Log
	rec    audit.Record
	snap   *kube.Snapshot
	cancel context.CancelFunc
	// entry is the intent on disk once the change is about to be made
	// (intend); the outcome is written through it.
	entry *audit.Entry
}

// beginAction refuses in read-only mode, opens the audit log (an action
// that cannot be recorded is not taken) and reads the cluster.
func beginAction(cmd *cobra.Command, g *globalFlags, f *actionFlags, name, target string) (*action, error) {
	if g.readOnly {
		return nil, fmt.Errorf("read-only mode (--readonly or SITECON_READONLY): %s %s not run", name, target)
	}
	log, err := audit.Open(g.auditLog)
	if err != nil {
		return nil, err
	}
	a := &action{cmd: cmd, flags: f, log: log, rec: audit.Record{Action: name, Target: target}}
	cfg, err := g.restConfig()
	if err != nil {
		return nil, a.finish(audit.OutcomeFailed, err)
	}
	ctx, cancel := context.WithCancel(cmd.Context())
	snap, err := kube.NewSnapshot(cfg, nil)
	if err != nil {
		cancel()
		return nil, a.finish(audit.OutcomeFailed, err)
	}
	snap.Start(ctx)
	syncCtx, syncCancel := context.WithTimeout(ctx, 15*time.Second)
	defer syncCancel()
	if err := snap.WaitForSync(syncCtx); err != nil {
		cancel()
		return nil, a.finish(audit.OutcomeFailed, err)
	}
	a.snap, a.cancel = snap, cancel
	return a, nil
}

func (a *action) out() io.Writer { return a.cmd.OutOrStdout() }

// finish records the outcome and returns err (nil for done and dry-run).
// An action cut off by a signal (Ctrl-C, the SSH session's SIGHUP) is
// recorded as interrupted, whatever step it was in.
func (a *action) finish(outcome string, err error) error {
	if a.cancel != nil {
		defer a.cancel()
	}
	if sig := (interruptedError{}); outcome != audit.OutcomeDone && errors.As(context.Cause(a.cmd.Context()), &sig) {
		outcome = audit.OutcomeInterrupted
		if err == nil {
			err = sig
		} else {
			err = fmt.Errorf("%w (%v)", err, sig)
		}
	}
	a.rec.Outcome = outcome
	if err != nil {
		a.rec.Error = err.Error()
	}
	var werr error
	if a.entry != nil {
		// The outcome of the intent on disk: same id, what was learnt since.
		a.entry.Rec = a.rec
		werr = a.entry.End(outcome, err)
	} else {
		werr = a.log.Write(a.rec)
	}
	if werr != nil {
		err = errors.Join(err, fmt.Errorf("audit log: %w", werr))
	}
	return err
}

// intend writes the action's intent, synced, right before the change it
// names: cut off after this (a dropped SSH session, a crash, a kill), the
// log still says what was under way. If the intent cannot be written the
// change is not made (the error says so, and the attempt is recorded if the
// log takes it after all). Calling it again is a no-op.
func (a *action) intend() error {
	if a.entry != nil {
		return nil
	}
	e, err := a.log.Begin(a.rec)
	if err != nil {
		return a.finish(audit.OutcomeFailed, fmt.Errorf("%s %s not done: its intent cannot be recorded: %w", a.rec.Action, a.rec.Target, err))
	}
	a.entry, a.rec.ID = e, e.Rec.ID
	return nil
}

// refuse records a preflight refusal.
func (a *action) refuse(reasons []string) error {
	return a.finish(audit.OutcomeRefused, fmt.Errorf("%s %s refused:\n  - %s", a.rec.Action, a.rec.Target, strings.Join(reasons, "\n  - ")))
}

// confirmed asks the question; typed, when set, must be typed back exactly.
// --yes answers for scripts (with --confirm for typed answers).
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

func (a *action) notConfirmed(err error) error { return a.finish(audit.OutcomeCancelled, err) }

func printPreflight(w io.Writer, p kube.Preflight) {
	what := "draining"
	switch p.Purpose {
	case kube.PurposeRemove:
		what = "removing"
	case kube.PurposeReplace:
		what = "replacing"
	}
	// The verdict quotes the cluster (names, the published etcd member
	// list's errors): cleaned before it is printed (safety rule 7).
	fmt.Fprintf(w, "preflight for %s %s:\n", what, ui.Clean(p.Node))
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

func preflightSummary(p kube.Preflight) []string {
	var out []string
	for _, r := range p.Refusals {
		out = append(out, "refused: "+r)
	}
	for _, w := range p.Warnings {
		out = append(out, "warning: "+w)
	}
	return append(out, fmt.Sprintf("evict %d pod(s)", len(p.Evict)))
}

func newCordonCmd(g *globalFlags, unschedulable bool) *cobra.Command {
	f := &actionFlags{}
	name, doing := "cordon", "Mark NODE unschedulable: running pods stay, new ones go elsewhere"
	if !unschedulable {
		name, doing = "uncordon", "Mark NODE schedulable again"
	}
	cmd := &cobra.Command{
		Use: name + " NODE", Short: doing, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := beginAction(cmd, g, f, name, args[0])
			if err != nil {
				return err
			}
			n, ok := a.snap.Node(args[0])
			if !ok {
				return a.finish(audit.OutcomeRefused, fmt.Errorf("%s: %w", args[0], kube.ErrUnknownNode))
			}
			if n.Spec.Unschedulable == unschedulable {
				fmt.Fprintf(a.out(), "%s is already %sed; nothing to do\n", args[0], name)
				return a.finish(audit.OutcomeDone, nil)
			}
			if f.dryRun {
				fmt.Fprintf(a.out(), "would %s %s\n", name, args[0])
				return a.finish(audit.OutcomeDryRun, nil)
			}
			if err := a.confirmed(fmt.Sprintf("%s %s?", strings.ToUpper(name[:1])+name[1:], args[0]), ""); err != nil {
				return a.notConfirmed(err)
			}
			if err := a.intend(); err != nil {
				return err
			}
			if _, err := kube.Cordon(cmd.Context(), a.snap.Clients().Core, args[0], unschedulable); err != nil {
				return a.finish(audit.OutcomeFailed, err)
			}
			fmt.Fprintf(a.out(), "%s %sed\n", args[0], name)
			return a.finish(audit.OutcomeDone, nil)
		},
	}
	f.register(cmd)
	return cmd
}

type drainFlags struct {
	force              bool
	gracePeriod        time.Duration
	timeout            time.Duration
	deleteEmptyDirData bool
}

func (d *drainFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&d.force, "force", false, "go on past the preflight's warnings: pinned apps that stop, a volume that cannot attach while the node is out, a live node removed, a cluster left unable to take a failure (the node name must be typed)")
	cmd.Flags().DurationVar(&d.gracePeriod, "grace-period", -time.Second, "time each pod gets to stop (negative: the pod's own)")
	cmd.Flags().DurationVar(&d.timeout, "timeout", 5*time.Minute, "give up the evictions after this long (the node stays cordoned)")
	cmd.Flags().BoolVar(&d.deleteEmptyDirData, "delete-emptydir-data", false, "evict pods with emptyDir data too (that data is lost)")
}

// localNode is the node this command runs on, from its cluster config, or
// "" when there is none to read (not on a node: then nothing is assumed).
func localNode(configPath string) string {
	if c, err := agent.LoadConfig(configPath); err == nil {
		return c.NodeName
	}
	return ""
}

// runDrain is the preflight, the confirmation and the drain, shared by
// drain, node remove and node replace (a.rec.Action says which); local is
// the node this runs on, when known.
func runDrain(a *action, node string, d *drainFlags, question, local string) error {
	ctx := a.cmd.Context()
	p, err := kube.CheckDrain(ctx, a.snap.Clients(), a.snap.Data(), node, kube.DrainOptions{
		DeleteEmptyDirData: d.deleteEmptyDirData, Purpose: kube.PurposeOf(a.rec.Action), LocalNode: local})
	if err != nil {
		return a.finish(audit.OutcomeRefused, err)
	}
	a.rec.Preflight = preflightSummary(p)
	printPreflight(a.out(), p)
	if p.Refused() {
		return a.refuse(p.Refusals)
	}
	if p.NeedsForce() && !d.force {
		return a.refuse(append(p.Warnings, "run again with --force to accept this"))
	}
	if a.flags.dryRun {
		return a.finish(audit.OutcomeDryRun, nil)
	}
	typed := ""
	if d.force || a.rec.Action == "remove-node" || a.rec.Action == "replace-node" {
		typed = node
	}
	if err := a.confirmed(fmt.Sprintf(question, node, len(p.Evict)), typed); err != nil {
		return a.notConfirmed(err)
	}
	// The drain cordons first: the intent is on disk before that.
	if err := a.intend(); err != nil {
		return err
	}
	evicted := 0
	err = kube.DrainAsConfirmed(ctx, a.snap.Clients(), a.snap.Data(), p, kube.DrainOptions{
		GracePeriod: d.gracePeriod, Timeout: d.timeout, DeleteEmptyDirData: d.deleteEmptyDirData,
		Progress: func(s kube.DrainStep) {
			if s.Phase == "evicted" {
				evicted++
			}
			fmt.Fprintf(a.out(), "%-9s %s %s\n", s.Phase, s.Pod, s.Message)
		},
	})
	if changed := (*kube.PlanChangedError)(nil); errors.As(err, &changed) {
		fmt.Fprintf(a.out(), "the cluster changed since the preflight:\n")
		return a.refuse(changed.Reasons)
	}
	a.rec.Detail = fmt.Sprintf("evicted %d of %d pod(s)", evicted, len(p.Evict))
	if stopped := (*kube.DrainStoppedError)(nil); errors.As(err, &stopped) {
		fmt.Fprintf(a.out(), "the drain stopped after %s:\n", a.rec.Detail)
		for _, r := range stopped.Reasons {
			fmt.Fprintf(a.out(), "  STOPPED  %s\n", r)
		}
		fmt.Fprintf(a.out(), "%s stays cordoned (sitecon uncordon %s takes it back)\n", node, node)
		return a.finish(audit.OutcomeFailed, stopped)
	}
	switch {
	case ctx.Err() != nil:
		return a.finish(audit.OutcomeCancelled, fmt.Errorf("drain of %s cancelled after %s; the node stays cordoned (sitecon uncordon %s)", node, a.rec.Detail, node))
	case err != nil:
		return a.finish(audit.OutcomeFailed, fmt.Errorf("drain of %s: %w; the node stays cordoned", node, err))
	}
	fmt.Fprintf(a.out(), "%s drained: %s\n", node, a.rec.Detail)
	return nil
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
			a, err := beginAction(cmd, g, f, "drain", args[0])
			if err != nil {
				return err
			}
			if err := runDrain(a, args[0], d, "Drain %s: cordon it and evict %d pod(s)?", ""); err != nil || a.rec.Outcome != "" {
				return err
			}
			return a.finish(audit.OutcomeDone, nil)
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
runs on, a removal that leaves etcd without quorum, and a node holding the
only up-to-date copy of a volume (copy it off first). A node still Ready
needs --force, and so does leaving the cluster unable to take a failure
(fewer than three servers). To replace the device, remove it, then give the
new one a join bundle with the old one's cluster IP
(sitecon join-info --node-ip IP).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := beginAction(cmd, g, f, "remove-node", args[0])
			if err != nil {
				return err
			}
			// Joiners need the seed: it moves first (sitecon seed).
			if why := kube.SeedRemovalRefusal(a.snap.Data(), args[0]); why != "" {
				return a.refuse([]string{why})
			}
			if err := runDrain(a, args[0], d, "Remove %s: evict %d pod(s), then delete the node from the cluster?", localNode(removeConfig)); err != nil || a.rec.Outcome != "" {
				return err
			}
			if err := kube.RemoveNode(cmd.Context(), a.snap.Clients().Core, args[0]); err != nil {
				return a.finish(audit.OutcomeFailed, err)
			}
			fmt.Fprintf(a.out(), "%s removed from the cluster\n", args[0])
			return a.finish(audit.OutcomeDone, nil)
		},
	}
	f.register(remove)
	d.register(remove)
	remove.Flags().StringVar(&removeConfig, "config", filepath.Join(DefaultConfigDir, "cluster.json"), "this node's cluster config: a node does not remove itself (not read if absent)")

	add := newJoinInfoCmd(g)
	add.Use = "add --role server|agent|edgeworker --node-name NAME"
	add.Short = "Show what a new node needs to join (the join bundle, or an edgeworker's k3s config)"

	rf, rd := &actionFlags{}, &drainFlags{}
	var configPath, role, newUUID string
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
			local, err := agent.LoadConfig(configPath)
			if err != nil {
				return fmt.Errorf("the join bundle needs this node's cluster config: %w", err)
			}
			a, err := beginAction(cmd, g, rf, "replace-node", old+" → "+name)
			if err != nil {
				return err
			}
			n, ok := a.snap.Node(old)
			if !ok {
				return a.finish(audit.OutcomeRefused, fmt.Errorf("%s: %w", old, kube.ErrUnknownNode))
			}
			ip := kube.InternalIP(n)
			if ip == "" {
				return a.finish(audit.OutcomeRefused, fmt.Errorf("%s has no internal address to hand on", old))
			}
			// The seed's address handed to a new device would make it the
			// seed of a cluster it never was part of: the seed moves first.
			if why := kube.SeedRemovalRefusal(a.snap.Data(), old); why != "" {
				return a.refuse([]string{why})
			}
			// The bundle is made before anything changes: a bundle that
			// cannot be made must not leave the site one device short.
			var bundle strings.Builder
			info := newJoinInfoCmd(g)
			info.SetOut(&bundle)
			info.SetErr(cmd.ErrOrStderr())
			info.SetContext(cmd.Context())
			for flag, value := range map[string]string{"config": configPath, "role": role, "node-name": name, "node-ip": ip, "node-uuid": newUUID} {
				if err := info.Flags().Set(flag, value); err != nil {
					return a.finish(audit.OutcomeFailed, err)
				}
			}
			if err := info.RunE(info, nil); err != nil {
				return a.refuse([]string{"the new node's bundle: " + err.Error()})
			}
			if err := runDrain(a, old, rd, "Replace %s: evict %d pod(s), delete it, then print the new node's bundle?", local.NodeName); err != nil || a.rec.Outcome != "" {
				return err
			}
			if err := kube.RemoveNode(cmd.Context(), a.snap.Clients().Core, old); err != nil {
				return a.finish(audit.OutcomeFailed, err)
			}
			fmt.Fprintf(a.out(), "%s removed from the cluster; %s takes its address %s\n\n", old, name, ip)
			a.rec.Detail = fmt.Sprintf("%s removed; %s joins at %s", old, name, ip)
			if err := a.finish(audit.OutcomeDone, nil); err != nil {
				return err
			}
			_, err = io.WriteString(a.out(), bundle.String())
			return err
		},
	}
	rf.register(replace)
	rd.register(replace)
	replace.Flags().StringVar(&configPath, "config", filepath.Join(DefaultConfigDir, "cluster.json"), "this node's cluster config (for the bundle)")
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
			d := a.snap.Data()
			if err := kube.SeedCheck(d, args[0]); err != nil {
				return a.refuse([]string{err.Error()})
			}
			current := kube.Derive(d, time.Now()).Cluster
			if f.dryRun {
				fmt.Fprintf(a.out(), "would make %s the seed (join_server_ip %s → its address)\n", args[0], current.SeedAddress)
				return a.finish(audit.OutcomeDryRun, nil)
			}
			if err := a.confirmed(fmt.Sprintf("Make %s the seed server? Every node's k3s config will join through it.", args[0]), ""); err != nil {
				return a.notConfirmed(err)
			}
			if err := a.intend(); err != nil {
				return err
			}
			ip, err := kube.SetSeed(cmd.Context(), a.snap.Clients().Core, d, args[0])
			if err != nil {
				return a.finish(audit.OutcomeFailed, err)
			}
			a.rec.Detail = fmt.Sprintf("join_server_ip %s → %s", current.SeedAddress, ip)
			fmt.Fprintf(a.out(), "%s is the seed: join_server_ip %s\n", args[0], ip)
			return a.finish(audit.OutcomeDone, nil)
		},
	}
	f.register(cmd)
	return cmd
}

func newMigrateCmd(g *globalFlags) *cobra.Command {
	f := &actionFlags{}
	var timeout time.Duration
	var reason string
	cmd := &cobra.Command{
		Use:   "migrate APP NODE",
		Short: "Move an app to NODE on site (no controller needed) and follow it until it runs there",
		Long: `Move an app (by name or UUID) to another node. The target must be Ready,
schedulable, meet the app's node-select labels and not be where the app runs.
sitecon writes an on-site placement override (ConfigMap sitecon-placement);
every node's agent reads it and the target's agent lays the app out there. A
later designated node from the controller replaces the override.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := beginAction(cmd, g, f, "migrate", args[0]+" → "+args[1])
			if err != nil {
				return err
			}
			return runMigrate(a, args[0], args[1], timeout, reason)
		},
	}
	f.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for the app to run on the target")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the record")
	return cmd
}

func runMigrate(a *action, appRef, target string, timeout time.Duration, reason string) error {
	ctx := a.cmd.Context()
	d := a.snap.Data()
	st := kube.Derive(d, time.Now())
	app, ok := kube.FindApp(st.Apps, appRef)
	if !ok {
		return a.finish(audit.OutcomeRefused, fmt.Errorf("no app %q (apps: %s)", appRef, kube.AppNames(st.Apps)))
	}
	var chosen *kube.MigrateTarget
	var eligible []string
	for _, t := range kube.MigrateTargets(app, d.Nodes) {
		if t.Node == target {
			chosen = &t
		}
		if t.Eligible {
			eligible = append(eligible, t.Node)
		}
	}
	switch {
	case chosen == nil:
		return a.finish(audit.OutcomeRefused, fmt.Errorf("%s: %w (nodes: %s)", target, kube.ErrUnknownNode, kube.NodeNames(d.Nodes)))
	case !chosen.Eligible:
		return a.refuse([]string{fmt.Sprintf("%s cannot take %s: %s (eligible: %s)", target, app.Name, chosen.Why, orNone(eligible))})
	}
	config, err := kube.ReadAppConfigRef(ctx, a.snap.Clients(), app.UUID)
	if err != nil {
		return a.finish(audit.OutcomeRefused, err)
	}
	n, _ := a.snap.Node(target)
	o := kube.PlacementOverride{Node: target, NodeUUID: n.Labels[kube.LabelNodeUUID], By: audit.CurrentUser(), At: time.Now().UTC(), Reason: reason, ConfigDNId: config.DNId, ConfigVersion: config.Version}
	if o.NodeUUID == "" {
		return a.refuse([]string{fmt.Sprintf("%s has no %s label: its agent could not know it is the app's node", target, kube.LabelNodeUUID)})
	}
	raw, _ := json.Marshal(o)
	a.rec.Detail = string(raw)
	if a.flags.dryRun {
		fmt.Fprintf(a.out(), "would move %s from %s to %s: override %s\n", app.Name, orNone([]string{app.Node}), target, raw)
		return a.finish(audit.OutcomeDryRun, nil)
	}
	if err := a.confirmed(fmt.Sprintf("Move %s from %s to %s?", app.Name, orNone([]string{app.Node}), target), ""); err != nil {
		return a.notConfirmed(err)
	}
	if err := a.intend(); err != nil {
		return err
	}
	if err := kube.WriteOverride(ctx, a.snap.Clients().Core, app.UUID, o); err != nil {
		return a.finish(audit.OutcomeFailed, err)
	}
	fmt.Fprintf(a.out(), "override written; waiting for %s to run on %s\n", app.Name, target)
	last, err := kube.WaitAppOn(ctx, a.snap, app.UUID, target, timeout, func(where string) {
		fmt.Fprintf(a.out(), "  %s: %s\n", app.Name, where)
	})
	switch {
	case err == nil:
		fmt.Fprintf(a.out(), "%s runs on %s\n", app.Name, target)
		return a.finish(audit.OutcomeDone, nil)
	case errors.Is(err, kube.ErrNotMovedYet):
		return a.finish(audit.OutcomeFailed, fmt.Errorf("%s did not run on %s within %s (last seen: %s); the override stays in place", app.Name, target, timeout, last))
	default:
		return a.finish(audit.OutcomeCancelled, fmt.Errorf("stopped waiting; the override stays in place and %s keeps moving to %s", app.Name, target))
	}
}

func orNone(s []string) string {
	if len(s) == 0 || (len(s) == 1 && s[0] == "") {
		return "none"
	}
	return strings.Join(s, ", ")
}
