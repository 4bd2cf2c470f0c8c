package agent

import (
	"context"
	"errors"
	"fmt"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/vncbridge"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/access"
)

// serveConsoles serves this node's VM consoles (agent/vncbridge) once it
// holds its node's own identity to open them with: a console is the VM's
// screen and keyboard, and a server's admin credential would open any
// VM's. The identity is looked for until found (k3s writes the node's
// kubeconfig as it starts); until then no console is served and a
// request for one says why.
func (a *Agent) serveConsoles(ctx context.Context, snap *kube.Snapshot, node string, agentIsNode bool) {
	var identity *rest.Config
	var last string
	if !a.retry(ctx, func() bool {
		cfg, err := a.consoleIdentity(ctx, snap, node, agentIsNode)
		if err != nil {
			if err.Error() != last {
				a.log.Warn("vnc: the VM consoles are not served", "err", err)
				last = err.Error()
			}
			a.mu.Lock()
			a.vncWhyNot = err
			a.mu.Unlock()
			return false
		}
		identity = cfg
		return true
	}) {
		return
	}
	vnc := vncbridge.New(vncbridge.Options{Node: node, BindAddress: a.opts.VNCBindAddress, Config: identity,
		Log: a.log.With("component", "vnc")}, snap)
	a.mu.Lock()
	a.vnc, a.vncWhyNot = vnc, nil
	a.mu.Unlock()
	_ = vnc.Run(ctx)
}

// consoleIdentity is the credential this node's consoles are opened with,
// checked with the API server to be node's own.
func (a *Agent) consoleIdentity(ctx context.Context, snap *kube.Snapshot, node string, agentIsNode bool) (*rest.Config, error) {
	path := a.opts.NodeKubeconfig
	if path == "" && agentIsNode {
		// The agent's own credential is its node's (a worker).
		return snap.Clients().Config, nil
	}
	if path == "" {
		path = k3s.NodeKubeconfig(a.opts.K3sPaths)
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no node identity to open them with (%w); they are never opened with an admin credential", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("node identity %s: %w", path, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	user, err := access.WhoAmI(ctx, cs)
	if err != nil {
		return nil, fmt.Errorf("node identity %s: %w", path, err)
	}
	if name, ok := access.NodeOfIdentity(user); !ok || name != node {
		return nil, fmt.Errorf("%s is %s, not node %s's own identity; the consoles are opened with that alone", path, user.Username, node)
	}
	return cfg, nil
}

// errNoConsolesYet: the node is not in its cluster yet.
var errNoConsolesYet = errors.New("this node is not in its cluster yet: it serves no console")
