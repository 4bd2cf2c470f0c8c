package main

import (
	"cmp"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/ui"
)

func newJoinInfoCmd(g *globalFlags) *cobra.Command {
	var configPath, stateDir string
	var req agent.JoinRequest
	cmd := &cobra.Command{
		Use:   "join-info --role server|agent|edgeworker --node-name NAME",
		Short: "What a new node needs to join this cluster",
		Long: `Print what a new node needs to join the cluster this node belongs to.
server and agent (EVE nodes): a join bundle for 'sitecon form --join' (it
carries the cluster token: keep it private). edgeworker (a generic Linux host
running k3s, not EVE): the k3s agent config and command; the token is copied
from this node's token file, never printed. The address is the first free one
in the cluster prefix unless --node-ip says otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// A bundle carries the cluster token: handing it out is an
			// action, gated by read-only mode and recorded (never the
			// token itself, only who asked for which node).
			action := "join-info"
			if cmd.Name() == "add" {
				action = "add-node"
			}
			detail := "role " + req.Role + ", address " + cmp.Or(req.NodeIP, "the first free one")
			if g.readOnly {
				rec := audit.Record{Action: action, Target: req.NodeName, Detail: detail}
				return refuseReadOnly(g, rec, fmt.Errorf("read-only mode (--readonly or SITECON_READONLY): %s not shown (it carries the cluster token)", action))
			}
			log, err := audit.Open(g.auditLog)
			if err != nil {
				return fmt.Errorf("%s not shown (it carries the cluster token, and who asked cannot be recorded): %w", action, err)
			}
			add, err := flow.PlanAdd(flow.Recorder{Log: log}, action, req.NodeName, detail, func() (string, error) {
				view := agent.ClusterView{}
				if cfg, err := g.restConfig(); err == nil {
					view = agent.ReadClusterView(cmd.Context(), cfg)
				}
				text, note, err := agent.MakeJoinInfo(configPath, agent.Records{Dir: stateDir}, view, req)
				if note != "" {
					// The note may quote the cluster's record.
					fmt.Fprintf(cmd.ErrOrStderr(), "note: %s\n", ui.Clean(note))
				}
				return text, err
			})
			if err != nil {
				return err
			}
			return add.Show(func(text string) error {
				_, err := fmt.Fprint(cmd.OutOrStdout(), text)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", filepath.Join(DefaultConfigDir, "cluster.json"), "this node's cluster config")
	stateDirFlag(cmd, &stateDir)
	f.StringVar(&req.Role, "role", "", "server, agent or edgeworker")
	f.StringVar(&req.NodeName, "node-name", "", "the new node's name")
	f.StringVar(&req.NodeIP, "node-ip", "", "the new node's cluster address (default: the first free one)")
	f.StringVar(&req.NodeUUID, "node-uuid", "", "the new EVE node's device UUID (server and agent)")
	return cmd
}

// refuseReadOnly refuses an action in read-only mode and records the
// refusal when the log takes it (a read-only account may not be able to
// write it: the refusal stands either way, and says so).
func refuseReadOnly(g *globalFlags, rec audit.Record, why error) error {
	rec.Outcome, rec.Error = audit.OutcomeRefused, why.Error()
	log, err := audit.Open(g.auditLog)
	if err == nil {
		err = log.Write(rec)
	}
	if err != nil {
		return fmt.Errorf("%w (not recorded: %v)", why, err)
	}
	return why
}
