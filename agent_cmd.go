package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/agent"
)

func newAgentCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "The node agent: cluster formation and app placement on this node",
	}
	cmd.AddCommand(newAgentRenderCmd())
	return cmd
}

func newAgentRenderCmd() *cobra.Command {
	var configPath, out, k3sBin, k3sConfig, k3sDataDir string
	var noHostChecks bool
	cmd := &cobra.Command{
		Use:   "render --config FILE [--out DIR]",
		Short: "Show the k3s configuration and command the agent would use for this node",
		Long: `Validate the cluster config and print the k3s config files the agent would
write for this node (token redacted) and the k3s command line. Nothing on the
node changes. With --out DIR the files are written under DIR instead (token
included, mode 0600), for a closer look.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := agent.LoadConfig(configPath)
			if err != nil {
				return err
			}
			env := agent.HostEnvironment()
			if noHostChecks {
				env.InterfaceExists = nil
			}
			v, err := agent.Validate(cfg, env)
			if err != nil {
				return err
			}
			paths := agent.K3sPaths{ConfigFile: k3sConfig, DataDir: k3sDataDir}
			k := agent.RenderK3s(v, paths, paths.EtcdMemberDataPresent())
			if out == "" {
				return k.PrintPlan(cmd.OutOrStdout(), v, k3sBin)
			}
			rooted := k.Rooted(out)
			if err := rooted.Write(); err != nil {
				return err
			}
			for _, f := range rooted.Files {
				fmt.Fprintln(cmd.OutOrStdout(), "wrote", f.Path)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "command:", k.CommandLine(k3sBin))
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "cluster config file (JSON, EVE API field names)")
	_ = cmd.MarkFlagRequired("config")
	cmd.Flags().StringVar(&out, "out", "", "write the files under this directory instead of printing them")
	cmd.Flags().StringVar(&k3sBin, "k3s-bin", "k3s", "k3s binary")
	cmd.Flags().StringVar(&k3sConfig, "k3s-config", agent.DefaultK3sPaths.ConfigFile, "k3s config file")
	cmd.Flags().StringVar(&k3sDataDir, "k3s-data-dir", agent.DefaultK3sPaths.DataDir, "k3s data directory (its etcd data tells a first boot from a restart)")
	cmd.Flags().BoolVar(&noHostChecks, "no-host-checks", false, "skip checks against this machine (the cluster interface exists), to check a config for another node")
	return cmd
}
