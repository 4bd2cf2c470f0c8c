package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/netcfg"
)

// DefaultConfigDir is where a node keeps its cluster config and token.
const DefaultConfigDir = "/persist/sitecon"

func newFormCmd() *cobra.Command {
	var (
		clusterName, iface, prefix, seed, thisNode, dir, join string
		servers, workers                                      []string
		force, dryRun, noHostChecks                           bool
	)
	cmd := &cobra.Command{
		Use:   "form",
		Short: "Form a cluster without a controller, or join one with a bundle",
		Long: `Form a cluster on a site without a controller. On the seed node:

  sitecon form --cluster-name site1 --interface eth1 \
      --node node-a --node node-b=0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d --node node-c

generates the cluster UUID and token, gives each node an address in the
cluster prefix (default ` + agent.DefaultClusterPrefix + `; the seed gets the first),
writes this node's config under --dir, and prints one join bundle per other
node. On each of them:

  sitecon form --join sitecon-join.v1....

The bundles carry the cluster token: treat them like the token itself.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			configPath := filepath.Join(dir, "cluster.json")
			if join != "" {
				bundle, err := agent.DecodeBundle(join)
				if err != nil {
					return err
				}
				files, err := bundle.Files(dir, iface)
				if err != nil {
					return err
				}
				if err := checkOverwrite(configPath, bundle.ClusterID, force); err != nil {
					return err
				}
				if dryRun {
					fmt.Fprintf(out, "would write %s and %s for %s in cluster %s (%s)\n", files.ConfigPath, files.TokenPath, bundle.NodeName, bundle.ClusterName, bundle.ClusterIPPrefix)
					return nil
				}
				if err := files.Write(); err != nil {
					return err
				}
				fmt.Fprintf(out, "wrote %s for %s: cluster %s, address %s, seed %s\n", files.ConfigPath, bundle.NodeName, bundle.ClusterName, bundle.ClusterIPPrefix, bundle.JoinServerIP)
				return nil
			}
			req := agent.FormRequest{ClusterName: clusterName, Interface: iface, Prefix: prefix, Seed: seed}
			for _, spec := range servers {
				name, uuid, _ := strings.Cut(spec, "=")
				req.Nodes = append(req.Nodes, agent.FormNode{Name: name, UUID: uuid})
			}
			for _, spec := range workers {
				name, uuid, _ := strings.Cut(spec, "=")
				req.Nodes = append(req.Nodes, agent.FormNode{Name: name, UUID: uuid, Worker: true})
			}
			if !noHostChecks && iface != "" {
				existing, err := netcfg.InterfacePrefixes(iface)
				if err != nil {
					return err
				}
				req.ExistingPrefixes = existing
			}
			plan, err := agent.Plan(req)
			if err != nil {
				return err
			}
			if thisNode == "" {
				thisNode = plan.Nodes[0].NodeName // the seed
			}
			var mine *agent.JoinBundle
			for i := range plan.Nodes {
				if plan.Nodes[i].NodeName == thisNode {
					mine = &plan.Nodes[i]
				}
			}
			if mine == nil {
				return fmt.Errorf("--this-node %s is not one of the nodes", thisNode)
			}
			files, err := mine.Files(dir, "")
			if err != nil {
				return err
			}
			if err := checkOverwrite(configPath, plan.ClusterID, force); err != nil {
				return err
			}
			fmt.Fprintf(out, "cluster %s (%s), seed %s at %s\n\n", clusterName, plan.ClusterID, plan.Nodes[0].NodeName, plan.Nodes[0].JoinServerIP)
			for _, n := range plan.Nodes {
				role := "server"
				if n.IsWorkerNode {
					role = "worker"
				}
				if n.NodeName == plan.Nodes[0].NodeName {
					role = "seed server"
				}
				fmt.Fprintf(out, "%-12s %-12s %-18s %s\n", n.NodeName, role, n.ClusterIPPrefix, n.NodeUUID)
			}
			fmt.Fprintln(out)
			if dryRun {
				fmt.Fprintf(out, "would write %s and %s for %s (dry run: nothing written, no bundles)\n", files.ConfigPath, files.TokenPath, thisNode)
				return nil
			}
			if err := files.Write(); err != nil {
				return err
			}
			fmt.Fprintf(out, "wrote %s for %s\n\n", files.ConfigPath, thisNode)
			fmt.Fprintln(out, "On each other node run its line (the bundles carry the cluster token; keep them private):")
			for _, n := range plan.Nodes {
				if n.NodeName == thisNode {
					continue
				}
				line, err := n.Encode()
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "\n# %s\nsitecon form --join %s\n", n.NodeName, line)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&clusterName, "cluster-name", "", "cluster name")
	f.StringVar(&iface, "interface", "", "cluster interface (on --join: this node's, when it differs from the seed's)")
	f.StringVar(&prefix, "prefix", agent.DefaultClusterPrefix, "cluster prefix; must not overlap the interface's subnets")
	f.StringVar(&seed, "seed", "", "seed server (default: the first --node)")
	f.StringArrayVar(&servers, "node", nil, "a server node, NAME or NAME=UUID (repeat)")
	f.StringArrayVar(&workers, "worker", nil, "a worker node, NAME or NAME=UUID (repeat)")
	f.StringVar(&thisNode, "this-node", "", "which node this one is (default: the seed)")
	f.StringVar(&dir, "dir", DefaultConfigDir, "where this node's cluster.json and token are written")
	f.StringVar(&join, "join", "", "join with a bundle printed by 'sitecon form' on the seed")
	f.BoolVar(&force, "force", false, "replace this node's config for another cluster")
	f.BoolVar(&dryRun, "dry-run", false, "print the plan and write nothing")
	f.BoolVar(&noHostChecks, "no-host-checks", false, "skip the overlap check against the interface's addresses")
	return cmd
}

// checkOverwrite refuses to replace a node's config for another cluster
// unless forced: that would silently move the node to another cluster.
func checkOverwrite(path, clusterID string, force bool) error {
	existing, err := agent.LoadConfig(path)
	if errors.Is(err, os.ErrNotExist) || force {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s exists and cannot be read (%v): use --force to replace it", path, err)
	}
	if existing.ClusterID != clusterID {
		return fmt.Errorf("%s already makes this node a member of cluster %s (%s): use --force to replace it", path, existing.ClusterName, existing.ClusterID)
	}
	return nil
}
