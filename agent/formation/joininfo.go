package formation

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/k3s"
)

// NextFreeAddress is the first host address of the cluster prefix not in use.
func NextFreeAddress(network netip.Prefix, used []netip.Addr) (netip.Addr, error) {
	taken := map[netip.Addr]bool{}
	for _, a := range used {
		taken[a] = true
	}
	last := config.Broadcast(network)
	for a := network.Masked().Addr().Next(); a.IsValid() && a != last; a = a.Next() {
		if !taken[a] {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("no free address left in %s", network)
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
