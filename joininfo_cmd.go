package main

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/agent"
)

func newJoinInfoCmd(g *globalFlags) *cobra.Command {
	var configPath, role, nodeName, nodeIP, nodeUUID string
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
			v, err := loadClusterConfig(configPath)
			if err != nil {
				return err
			}
			used, serverVersion := clusterAddresses(cmd.Context(), g)
			text, err := joinInfo(v, role, nodeName, nodeUUID, nodeIP, used, serverVersion)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), text)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", filepath.Join(DefaultConfigDir, "cluster.json"), "this node's cluster config")
	f.StringVar(&role, "role", "", "server, agent or edgeworker")
	f.StringVar(&nodeName, "node-name", "", "the new node's name")
	f.StringVar(&nodeIP, "node-ip", "", "the new node's cluster address (default: the first free one)")
	f.StringVar(&nodeUUID, "node-uuid", "", "the new EVE node's device UUID (server and agent)")
	return cmd
}

// loadClusterConfig reads and checks this node's cluster config (the
// interface need not exist here: only the addressing and token are used).
func loadClusterConfig(path string) (*agent.Validated, error) {
	cfg, err := agent.LoadConfig(path)
	if err != nil {
		return nil, err
	}
	env := agent.HostEnvironment()
	env.InterfaceExists = nil
	return agent.Validate(cfg, env)
}

// joinInfo is what a new node needs to join v's cluster: a join bundle for
// an EVE node (server or agent), the k3s agent setup for an edgeworker. The
// address is nodeIP, or the first one of the prefix not in used, the
// addresses the cluster's nodes have. used nil means they could not be read:
// then an address must be given, since a guess could be a live node's.
func joinInfo(v *agent.Validated, role, nodeName, nodeUUID, nodeIP string, used []netip.Addr, serverVersion string) (string, error) {
	switch {
	case role != "server" && role != "agent" && role != "edgeworker":
		return "", fmt.Errorf("the role must be server, agent or edgeworker, not %q", role)
	case nodeName == "":
		return "", fmt.Errorf("the new node's name is required")
	case role != "edgeworker" && nodeUUID == "":
		return "", fmt.Errorf("an EVE node's device UUID is required")
	}
	var addr netip.Addr
	var err error
	switch {
	case nodeIP != "":
		if addr, err = netip.ParseAddr(nodeIP); err != nil || !v.Network.Contains(addr) {
			return "", fmt.Errorf("the node address %q is not in the cluster prefix %s", nodeIP, v.Network)
		}
	case used == nil:
		return "", fmt.Errorf("the cluster's node addresses cannot be read, so a free address is not known: give the new node's address (--node-ip)")
	default:
		if addr, err = agent.NextFreeAddress(v.Network, append(slices.Clone(used), v.JoinIP, v.NodeIP)); err != nil {
			return "", err
		}
	}
	if role == "edgeworker" {
		return agent.EdgeworkerInstructions(v, nodeName, addr, serverVersion), nil
	}
	bundle := agent.JoinBundle{
		Version: 1, ClusterName: v.ClusterName, ClusterID: v.ClusterID, ClusterInterface: v.ClusterInterface,
		ClusterIPPrefix: netip.PrefixFrom(addr, v.Prefix.Bits()).String(), IsWorkerNode: role == "agent",
		JoinServerIP: v.JoinIP.String(), Token: v.Token, NodeName: nodeName, NodeUUID: nodeUUID,
	}
	line, err := bundle.Encode()
	if err != nil {
		return "", err
	}
	article := "a"
	if role == "agent" {
		article = "an"
	}
	return fmt.Sprintf("# %s joins %s as %s %s at %s (the bundle carries the cluster token: keep it private)\nsitecon form --join %s\n", nodeName, v.ClusterName, article, role, bundle.ClusterIPPrefix, line), nil
}

// clusterAddresses asks the cluster, briefly, which addresses its nodes use
// and its version; nil addresses when it cannot be asked.
func clusterAddresses(ctx context.Context, g *globalFlags) ([]netip.Addr, string) {
	cfg, err := g.restConfig()
	if err != nil {
		return nil, ""
	}
	cfg.Timeout = 3 * time.Second // one-shot requests only
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, ""
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, ""
	}
	used := []netip.Addr{}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				used = append(used, ip)
			}
		}
	}
	version := ""
	if info, err := cs.Discovery().ServerVersion(); err == nil {
		version = info.GitVersion
	}
	return used, version
}
