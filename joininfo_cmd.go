package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
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
			// A bundle carries the cluster token: handing it out is an
			// action, gated by read-only mode and recorded (never the
			// token itself, only who asked for which node).
			action := "join-info"
			if cmd.Name() == "add" {
				action = "add-node"
			}
			rec := audit.Record{Action: action, Target: nodeName, Detail: "role " + role + ", address " + orDefault(nodeIP, "the first free one")}
			if g.readOnly {
				return refuseReadOnly(g, rec, fmt.Errorf("read-only mode (--readonly or SITECON_READONLY): %s not shown (it carries the cluster token)", action))
			}
			log, err := audit.Open(g.auditLog)
			if err != nil {
				return fmt.Errorf("%s not shown (it carries the cluster token, and who asked cannot be recorded): %w", action, err)
			}
			used, serverVersion, data := clusterAddresses(cmd.Context(), g)
			v, seed, err := configInEffect(configPath, data)
			var text string
			if err == nil {
				if seed.ClusterNote != "" {
					// The note may quote the cluster's record.
					fmt.Fprintf(cmd.ErrOrStderr(), "note: %s\n", ui.Clean(seed.ClusterNote))
				}
				text, err = joinInfo(v, role, nodeName, nodeUUID, nodeIP, used, serverVersion)
			}
			if err != nil {
				// Nothing shown: one record says it was asked for.
				rec.Outcome, rec.Error = audit.OutcomeFailed, err.Error()
				if werr := log.Write(rec); werr != nil {
					err = errors.Join(err, fmt.Errorf("audit log: %w", werr))
				}
				return err
			}
			e, err := log.Begin(rec)
			if err != nil {
				return fmt.Errorf("%s not shown: its intent cannot be recorded: %w", action, err)
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), text)
			outcome := audit.OutcomeDone
			if err != nil {
				outcome = audit.OutcomeFailed
			}
			if werr := e.End(outcome, err); werr != nil {
				err = errors.Join(err, fmt.Errorf("audit log: %w", werr))
			}
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

// configInEffect is this node's config with the seed in effect as its join
// address, decided as the agent decides it: the config, the seed record
// beside it, and the cluster's record checked against its Nodes when the
// cluster could be read (d nil: it could not). A bundle made from it sends
// the new node to the seed every member follows, not to the one this
// node's file was formed with.
func configInEffect(path string, d *kube.Data) (*agent.Validated, agent.SeedDecision, error) {
	v, err := loadClusterConfig(path)
	if err != nil {
		return nil, agent.SeedDecision{}, err
	}
	in, err := agent.LocalSeedInputs(path, v)
	if err != nil {
		// Unknown is not empty: the record may name the only live seed.
		return nil, agent.SeedDecision{}, fmt.Errorf("the seed record beside %s cannot be read, so the seed in effect is unknown: %w", path, err)
	}
	if d != nil {
		in.Nodes = d.Nodes
		for _, cm := range d.ConfigMaps {
			if cm.Name == kube.ClusterConfigMapName && cm.Namespace == kube.AppNamespace {
				in.Cluster = cm.Data
			}
		}
	}
	seed := agent.SeedInEffect(in)
	return seed.Config, seed, nil
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
	if addr == v.JoinIP {
		// The new device would be the join address of a cluster it was
		// never part of: it could only initialise a second one.
		return "", fmt.Errorf("%s is the address of the seed in effect: a new node given it would have no seed to join; "+
			"move the seed first (sitecon seed NODE, a Ready etcd member), then make the bundle again", addr)
	}
	if role == "edgeworker" {
		return agent.EdgeworkerInstructions(v, nodeName, addr, serverVersion), nil
	}
	// On a node that holds the cluster's CA the bundle pins it (k3s's
	// secure token): the new node then joins only a server serving it.
	token, _, err := agent.BundleToken(v.Token, agent.DefaultK3sPaths)
	if err != nil {
		return "", err
	}
	bundle := agent.JoinBundle{
		Version: 1, ClusterName: v.ClusterName, ClusterID: v.ClusterID, ClusterInterface: v.ClusterInterface,
		ClusterIPPrefix: netip.PrefixFrom(addr, v.Prefix.Bits()).String(), IsWorkerNode: role == "agent",
		JoinServerIP: v.JoinIP.String(), Token: token, NodeName: nodeName, NodeUUID: nodeUUID,
		// Made on a member: the cluster runs, the new node only ever joins.
		ExistingCluster: true,
	}
	line, err := bundle.Encode()
	if err != nil {
		return "", err
	}
	article := "a"
	if role == "agent" {
		article = "an"
	}
	return fmt.Sprintf("# %s joins %s as %s %s at %s through the seed at %s (the bundle carries the cluster token: keep it private)\n"+
		"# on %s: run 'sitecon form --join -', paste the bundle below, then Ctrl-D (or save it to a file: sitecon form --join FILE)\n%s\n",
		nodeName, v.ClusterName, article, role, bundle.ClusterIPPrefix, bundle.JoinServerIP, nodeName, line), nil
}

// clusterAddresses asks the cluster, briefly, which addresses its nodes use
// and its version, and returns its Nodes and cluster record for the seed in
// effect; nil addresses and data when it cannot be asked.
func clusterAddresses(ctx context.Context, g *globalFlags) ([]netip.Addr, string, *kube.Data) {
	cfg, err := g.restConfig()
	if err != nil {
		return nil, "", nil
	}
	cfg.Timeout = 3 * time.Second // one-shot requests only
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, "", nil
	}
	data := &kube.Data{}
	for i := range nodes.Items {
		data.Nodes = append(data.Nodes, &nodes.Items[i])
	}
	// The record is read too; without it (not found, forbidden) the seed
	// in effect is the one this node's files say.
	if cm, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.ClusterConfigMapName, metav1.GetOptions{}); err == nil {
		data.ConfigMaps = []*corev1.ConfigMap{cm}
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
	return used, version, data
}
