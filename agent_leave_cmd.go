package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
)

func newAgentLeaveCmd(g *globalFlags) *cobra.Command {
	f := &actionFlags{}
	var configPath string
	var force bool
	cmd := &cobra.Command{
		Use:   "leave --config FILE",
		Short: "Take this node out of its cluster on purpose, after the preflight a removal gets",
		Long: `Take this node out of its cluster: the agent stops k3s and removes the
cluster address and firewall table at its next config poll, and stays out
until the leave request is removed (then it joins again from its config).

First the preflight a removal of this node gets: refused when etcd would
lose quorum (it says the arithmetic), when the node holds the only
up-to-date copy of a volume, or when it is the seed in effect (move it
first: sitecon seed NODE). A cluster that cannot be read leaves quorum and
volumes unknown: refused too. --force leaves anyway, with the node name
typed (--confirm NODE with --yes). Recorded in the audit log.

A config file that is merely missing, or unreadable, never takes a node
out: it must be gone for --config-absent-grace, or this request written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(configPath)
			if err != nil {
				return err
			}
			node := cfg.NodeName
			request := agent.LeaveRequestFile(configPath)
			a, err := beginAction(cmd, g, f, "leave", node)
			if err != nil && (!force || g.readOnly) {
				return fmt.Errorf("%w\nthe cluster cannot be read, so quorum and volume copies are unknown: nothing written (--force leaves anyway)", err)
			}
			if err != nil {
				// Forced past a cluster that cannot be read: recorded as such.
				log, lerr := audit.Open(g.auditLog)
				if lerr != nil {
					return lerr
				}
				a = &action{cmd: cmd, flags: f, recorder: flow.Recorder{Log: log}}
				fmt.Fprintf(a.out(), "the cluster cannot be read (%v): leaving without a preflight (--force)\n", err)
			}
			rec := a.recorder.Open("leave", node)
			if a.snap != nil {
				// A drain's preflight (quorum arithmetic, the volumes' last
				// copies, pods that cannot move), not a removal's: a removal
				// refuses a Ready node and the node it runs on, which a
				// leaving node is by definition. The seed rule is a removal's.
				p, err := flow.CheckDrain(cmd.Context(), a.snap, "drain", node, "", flow.DefaultDrainOptions())
				if err != nil {
					return a.ended(rec, audit.OutcomeFailed, err)
				}
				if why := kube.SeedRemovalRefusal(a.snap.Data(), node); why != "" {
					p.Refusals = append(p.Refusals, why)
				}
				printPreflight(a.out(), p)
				rec.SetPreflight(flow.PreflightSummary(p))
				if (len(p.Refusals) > 0 || p.NeedsForce()) && !force {
					return a.done(rec.Refuse(append(append([]string{}, p.Refusals...), p.Warnings...)...))
				}
			}
			if f.dryRun {
				fmt.Fprintf(a.out(), "would write %s: %s leaves its cluster at the agent's next poll\n", request, node)
				return a.done(rec.DryRun())
			}
			typed := ""
			if force {
				typed = node
			}
			if err := a.confirm(rec, fmt.Sprintf("%s leaves cluster %s: k3s stops, its cluster address goes.", node, cfg.ClusterName), typed); err != nil {
				return err
			}
			leave := &flow.Action{Record: rec, Done: node + " leaves at the agent's next poll; remove " + request + " to join again",
				Change: func(context.Context, func(string)) error {
					return agent.WriteLeaveRequest(request, agent.LeaveRequest{ClusterID: cfg.ClusterID, NodeName: node, At: time.Now().UTC(), By: audit.CurrentUser()})
				}}
			if err := a.run(leave); err != nil {
				return err
			}
			fmt.Fprintln(a.out(), leave.Done)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&configPath, "config", filepath.Join(DefaultConfigDir, "cluster.json"), "this node's cluster config")
	cmd.Flags().BoolVar(&force, "force", false, "leave although the preflight refuses (the node name typed)")
	return cmd
}
