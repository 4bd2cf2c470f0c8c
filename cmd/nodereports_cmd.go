package cmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/nodecred"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/nodereport"
)

// nodeReports is where the console and `sitecon status` find what they
// ask every node's agent with when the cluster API does not answer: this
// node's cluster config (its cluster id and token make the key; its own
// address, the seed's and the cluster prefix's are where to ask), with
// the nodes last seen in the cluster (their addresses and names).
type nodeReports struct {
	configPath string
	// k3sDataDir holds this machine's client CA (agent/client-ca.crt): a
	// report is taken only when signed with its node's own credential as
	// that CA shows, where the CA is there (on a device; "": k3s's
	// default). Without it the token's MAC alone is checked.
	k3sDataDir string
	// dial opens the connections (nil: a plain dialer; tests dial from a
	// network namespace).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// errNodeReportsNeedConfig says what node reports need on a machine
// without a cluster config (a laptop with only a kubeconfig).
var errNodeReportsNeedConfig = errors.New("what each node reports needs this node's cluster config: run on a device with --config FILE")

// gather asks every node it knows of for its report, each within
// nodereport.DefaultDeadline; known are the nodes last seen in the
// cluster (none when it was never read).
func (s nodeReports) gather(ctx context.Context, known []kube.NodeStatus) nodestate.NodeReports {
	v, err := s.config()
	if err != nil {
		return nodestate.NodeReports{Problem: err.Error()}
	}
	key, err := config.NewLifeKey(v.ClusterID, v.Token)
	if err != nil {
		return nodestate.NodeReports{Problem: err.Error()}
	}
	dataDir := s.k3sDataDir
	if dataDir == "" {
		dataDir = k3s.DefaultPaths.DataDir
	}
	if ca := k3s.ClientCA(k3s.Paths{DataDir: dataDir}); fileExists(ca) {
		// Every node holds the token: a worker could answer in another
		// node's name with its MAC alone.
		key = key.WithNodeWord(nodecred.New("", ca))
	}
	return nodereport.Reader{Key: key, Dial: s.dial}.Ask(ctx, reportTargets(v, known))
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// config is this node's validated cluster config; its interface is not
// checked (reading reports needs none of it).
func (s nodeReports) config() (*config.Validated, error) {
	c, err := config.Load(s.configPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (%s is absent)", errNodeReportsNeedConfig, s.configPath)
	}
	if err != nil {
		return nil, err
	}
	env := config.HostEnvironment()
	env.InterfaceExists = nil
	return config.Validate(c, env)
}

// reportTargets are where to ask: this node, the seed, every node last
// seen in the cluster (by its InternalIP, its cluster address), and the
// other hosts of the cluster prefix in case a node is there (listed only
// when something answers).
func reportTargets(v *config.Validated, known []kube.NodeStatus) []nodereport.Target {
	at := func(a netip.Addr) netip.AddrPort { return netip.AddrPortFrom(a, config.StatusPort) }
	targets := []nodereport.Target{{Address: at(v.NodeIP), Node: v.NodeName}}
	for _, n := range known {
		if a, err := netip.ParseAddr(n.InternalIP); err == nil {
			targets = append(targets, nodereport.Target{Address: at(a), Node: n.Name})
		}
	}
	if v.JoinIP.IsValid() {
		targets = append(targets, nodereport.Target{Address: at(v.JoinIP)})
	}
	for _, a := range formation.ProbeAddresses(v) {
		targets = append(targets, nodereport.Target{Address: at(a), Scan: true})
	}
	return targets
}
