package cmd

import (
	"cmp"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/ui"
)

// joinSource is where every command that hands out join info (join-info,
// node add, node replace, the console's :add and :replace) finds what it
// is made from: this node's cluster config and its k3s data directory,
// whose cluster CA the bundle pins.
type joinSource struct{ configPath, stateDir, k3sDataDir string }

func (s *joinSource) register(f *pflag.FlagSet, configUsage string) {
	f.StringVar(&s.configPath, "config", filepath.Join(DefaultConfigDir, "cluster.json"), configUsage)
	f.StringVar(&s.stateDir, "state-dir", formation.DefaultStateDir, "the agent's state directory, where it keeps its records (the agent's --state-dir)")
	f.StringVar(&s.k3sDataDir, "k3s-data-dir", k3s.DefaultPaths.DataDir,
		"this node's k3s data directory, as the agent's --k3s-data-dir: the cluster's CA there is pinned in the bundle")
}

// joinInfo is the join info for req with the cluster as view shows it.
func (s joinSource) joinInfo(view formation.ClusterView, req formation.JoinRequest) (text, note string, err error) {
	return formation.MakeJoinInfo(formation.JoinSource{ConfigPath: s.configPath, Records: formation.Records{Dir: s.stateDir},
		K3sPaths: k3s.Paths{ConfigFile: k3s.DefaultPaths.ConfigFile, DataDir: s.k3sDataDir}}, view, req)
}

// fromSnapshot is the join info of a new node with the seed in effect and
// the free addresses as snap holds them, once synced: no request.
func (s joinSource) fromSnapshot(snap *kube.Snapshot) func(role, name, uuid, ip string) (string, error) {
	return func(role, name, uuid, ip string) (string, error) {
		text, _, err := s.joinInfo(formation.ViewOf(snap.Data(), snap.Synced()),
			formation.JoinRequest{Role: role, NodeName: name, NodeUUID: uuid, NodeIP: ip})
		return text, err
	}
}

func newJoinInfoCmd(g *globalFlags) *cobra.Command {
	var src joinSource
	var req formation.JoinRequest
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
				view := formation.ClusterView{}
				if cfg, err := g.restConfig(); err == nil {
					view = formation.ReadClusterView(cmd.Context(), cfg)
				}
				text, note, err := src.joinInfo(view, req)
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
	src.register(f, "this node's cluster config")
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
