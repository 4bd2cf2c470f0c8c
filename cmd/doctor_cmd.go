package cmd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/ui"
)

func newDoctorCmd(g *globalFlags) *cobra.Command {
	var output, k3sDataDir, agentSocket, clusterConfig string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the site and say what is wrong and what to do next (read only)",
		Long: `Run every check once, read only, each within its own deadline: etcd quorum,
nodes, volumes and replicas, apps away from home or pending, placement
overrides, and on a node its k3s certificates, its agent's config errors and
the cluster network (another cluster on the prefix, the nodes' MTUs, a
duplicate of a node's cluster address, the peers' cluster ports); with the
cluster config (--config), every node's own report: its clock, its time
sync, Longhorn's prerequisites and its k3s certificates.
Each finding has an id (see the Findings table in docs/DOCTOR.md), its
evidence and the next step.

Exit status, as sitecon status's: 0 nothing worse than info, 1 a warning or
an error (something needs attention), 2 the cluster API could not be read (its
checks did not run; this node's did), 3 usage (a bad flag or argument).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("unknown output format %q: text or json", output)
			}
			log, closeLog, err := g.logger()
			if err != nil {
				return err
			}
			defer closeLog()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			report := ui.CleanStrings(doctor.Diagnose(ctx, doctorOptions(g, log, k3sDataDir, agentSocket, clusterConfig, timeout/2)))
			write := doctor.WriteText
			if output == "json" {
				write = doctor.WriteJSON
			}
			if err := write(cmd.OutOrStdout(), report); err != nil {
				return err
			}
			if code := report.ExitStatus(); code != 0 {
				return exitError{code: code}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().DurationVar(&timeout, "timeout", defaultDoctorTimeout, "give up after this long; half of it for reading the cluster")
	cmd.Flags().StringVar(&k3sDataDir, "k3s-data-dir", k3s.DefaultPaths.DataDir, "k3s data directory (its certificates are checked)")
	cmd.Flags().StringVar(&agentSocket, "agent-socket", DefaultAgentSocket, "this node's agent socket (its config errors are checked)")
	cmd.Flags().StringVar(&clusterConfig, "config", filepath.Join(DefaultConfigDir, "cluster.json"), "this node's cluster config: its key asks every node's agent for its own report (the nodes' clocks, cluster interfaces, time sync, Longhorn's prerequisites and k3s certificates are checked), its prefix is scanned for another cluster and its peers' ports are dialled")
	return cmd
}

// defaultDoctorTimeout bounds a doctor run, sitecon doctor's and the
// console's doctor screen's alike; half of it for reading the cluster.
const defaultDoctorTimeout = 20 * time.Second

// doctorOptions are the doctor's: the cluster the flags name, this
// machine's k3s data dir, and its agent when its socket is there.
func doctorOptions(g *globalFlags, log *slog.Logger, k3sDataDir, agentSocket, clusterConfig string, apiWait time.Duration) doctor.Options {
	opts := doctor.Options{APIWait: apiWait, K3sDataDir: k3sDataDir, Log: log, ClusterPorts: doctorClusterPorts(), AuditLog: g.auditLog}
	if cfg, err := g.restConfig(); err != nil {
		opts.ConfigProblem = err.Error()
	} else {
		opts.Config = cfg
	}
	if _, err := os.Stat(agentSocket); err == nil {
		opts.AgentConfigErrors = func(ctx context.Context) (map[string]string, error) {
			n, err := localapi.Get[apps.PublishedNode](ctx, agentSocket, localapi.PathNode)
			return n.ConfigErrors, err
		}
	}
	if _, err := os.Stat(clusterConfig); err == nil {
		opts.NodeReports = func(ctx context.Context) nodestate.NodeReports {
			return nodeReports{configPath: clusterConfig, k3sDataDir: k3sDataDir}.gather(ctx, nil)
		}
		opts.StatusScan = clusterNetwork{configPath: clusterConfig}.statusScan
		opts.LocalNode = clusterNetwork{configPath: clusterConfig}.localNode
	}
	return opts
}
