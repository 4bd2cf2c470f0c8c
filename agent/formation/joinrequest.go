package formation

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/kube"
)

// JoinRequest is what a new node's join info is asked for with.
type JoinRequest struct {
	// Role is server, agent (EVE nodes) or edgeworker (a generic k3s host).
	Role, NodeName string
	// NodeUUID is an EVE node's device UUID.
	NodeUUID string
	// NodeIP is the new node's cluster address; empty: the first free one.
	NodeIP string
}

// ClusterView is what the cluster says that join info depends on: its
// Nodes and cluster record (the seed in effect), the addresses its nodes
// use, and its version. Data nil: the cluster could not be read; Used nil:
// the addresses in use are unknown, not free.
type ClusterView struct {
	Data          *kube.Data
	Used          []netip.Addr
	ServerVersion string
}

// ViewOf is the cluster as a synced snapshot holds it: no request. Not
// synced, nothing is known.
func ViewOf(d kube.Data, synced bool) ClusterView {
	if !synced {
		return ClusterView{}
	}
	v := ClusterView{Data: &d, Used: []netip.Addr{}}
	for _, n := range d.Nodes {
		if ip, err := netip.ParseAddr(kube.InternalIP(n)); err == nil {
			v.Used = append(v.Used, ip)
		}
	}
	return v
}

// ReadClusterView asks the cluster, briefly, which addresses its nodes use
// and its version, with its Nodes and cluster record for the seed in
// effect; the zero view when it cannot be asked.
func ReadClusterView(ctx context.Context, cfg *rest.Config) ClusterView {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 3 * time.Second // one-shot requests only
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return ClusterView{}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ClusterView{}
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
	v := ClusterView{Data: data, Used: []netip.Addr{}}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				v.Used = append(v.Used, ip)
			}
		}
	}
	if info, err := cs.Discovery().ServerVersion(); err == nil {
		v.ServerVersion = info.GitVersion
	}
	return v
}

// LoadClusterConfig reads and checks this node's cluster config (the
// interface need not exist here: only the addressing and token are used).
func LoadClusterConfig(path string) (*config.Validated, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	env := config.HostEnvironment()
	env.InterfaceExists = nil
	return config.Validate(cfg, env)
}

// ConfigInEffect is this node's config with the seed in effect as its join
// address, decided as the agent decides it: the config, the seed record in
// the agent's records, and the cluster's record checked against its Nodes
// when the cluster could be read (d nil: it could not). A bundle made from
// it sends the new node to the seed every member follows, not to the one
// this node's file was formed with.
func ConfigInEffect(path string, records Records, d *kube.Data) (*config.Validated, SeedDecision, error) {
	v, err := LoadClusterConfig(path)
	if err != nil {
		return nil, SeedDecision{}, err
	}
	in, err := LocalSeedInputs(records, v)
	if err != nil {
		// Unknown is not empty: the record may name the only live seed.
		return nil, SeedDecision{}, fmt.Errorf("this node's seed record cannot be read, so the seed in effect is unknown: %w", err)
	}
	if d != nil {
		in.Nodes = d.Nodes
		for _, cm := range d.ConfigMaps {
			if cm.Name == kube.ClusterConfigMapName && cm.Namespace == kube.AppNamespace {
				in.Cluster = cm.Data
			}
		}
	}
	seed := SeedInEffect(in)
	return seed.Config, seed, nil
}

// JoinSource is what this node makes join info from: its cluster config,
// the agent's records (the seed record), and the k3s data directory its
// k3s keeps the cluster's CA in.
type JoinSource struct {
	ConfigPath string
	Records    Records
	K3sPaths   k3s.Paths
}

// MakeJoinInfo is the join info for req from this node's config, records
// and k3s data (src) and the seed in effect in view; note is what the seed
// decision says about the cluster's record, for the person asking.
func MakeJoinInfo(src JoinSource, view ClusterView, req JoinRequest) (text, note string, err error) {
	v, seed, err := ConfigInEffect(src.ConfigPath, src.Records, view.Data)
	if err != nil {
		return "", "", err
	}
	text, err = JoinInfo(v, src.K3sPaths, req, view.Used, view.ServerVersion)
	return text, seed.ClusterNote, err
}

// JoinInfo is what a new node needs to join v's cluster: a join bundle for
// an EVE node (server or agent), the k3s agent setup for an edgeworker. The
// address is req.NodeIP, or the first one of the prefix not in used, the
// addresses the cluster's nodes have. used nil means they could not be
// read: then an address must be given, since a guess could be a live
// node's.
func JoinInfo(v *config.Validated, paths k3s.Paths, req JoinRequest, used []netip.Addr, serverVersion string) (string, error) {
	role, nodeName := req.Role, req.NodeName
	switch {
	case role != "server" && role != "agent" && role != "edgeworker":
		return "", fmt.Errorf("the role must be server, agent or edgeworker, not %q", role)
	case nodeName == "":
		return "", fmt.Errorf("the new node's name is required")
	case role != "edgeworker" && req.NodeUUID == "":
		return "", fmt.Errorf("an EVE node's device UUID is required")
	}
	var addr netip.Addr
	var err error
	switch {
	case req.NodeIP != "":
		if addr, err = netip.ParseAddr(req.NodeIP); err != nil || !v.Network.Contains(addr) {
			return "", fmt.Errorf("the node address %q is not in the cluster prefix %s", req.NodeIP, v.Network)
		}
	case used == nil:
		return "", fmt.Errorf("the cluster's node addresses cannot be read, so a free address is not known: give the new node's address (--node-ip)")
	default:
		if addr, err = NextFreeAddress(v.Network, append(slices.Clone(used), v.JoinIP, v.NodeIP)); err != nil {
			return "", err
		}
	}
	if addr == v.JoinIP {
		// The new device would be the join address of a cluster it was
		// never part of: it could only initialise a second one.
		return "", fmt.Errorf("%s is the address of the seed in effect: a new node given it would have no seed to join; "+
			"move the seed first (sitecon seed NODE, a Ready etcd member), then make the bundle again", addr)
	}
	// On a node that holds the cluster's CA the bundle pins it (k3s's
	// secure token): the new node then joins only a server serving it. The
	// CA is where this node's k3s keeps its data, which need not be k3s's
	// default.
	token, _, err := BundleToken(v.Token, paths)
	if err != nil {
		return "", err
	}
	if role == "edgeworker" {
		pin, _ := config.ParseToken(token.Reveal())
		return k3s.EdgeworkerInstructions(v, nodeName, addr, serverVersion, pin), nil
	}
	bundle := JoinBundle{
		Version: 1, ClusterName: v.ClusterName, ClusterID: v.ClusterID, ClusterInterface: v.ClusterInterface,
		ClusterIPPrefix: netip.PrefixFrom(addr, v.Prefix.Bits()).String(), IsWorkerNode: role == "agent",
		JoinServerIP: v.JoinIP.String(), Token: token, NodeName: nodeName, NodeUUID: req.NodeUUID,
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
