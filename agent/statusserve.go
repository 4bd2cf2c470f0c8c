package agent

import (
	"fmt"
	"net"
	"net/http"

	"github.com/sitecon/sitecon/agent/bringup"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/agent/statusserver"
	"github.com/sitecon/sitecon/kube"
)

// lifeKey is the proof-of-life key of v's cluster; none (every proof
// refused, no node shown dead) when the config has no token, which
// validation does not let through.
func (a *Agent) lifeKey(clusterID string, token config.Secret) config.LifeKey {
	return bringup.LifeKey(clusterID, token, a.nodeWord, a.log)
}

// externalLifeKey is the key of --no-bootstrap's --cluster-id and token;
// none without them, and then the failover guard holds every pod on a lost
// node (it cannot show the node dead), which the log says once.
func (a *Agent) externalLifeKey() config.LifeKey {
	if a.opts.ClusterID == "" && a.opts.ClusterToken == "" {
		a.log.Warn("no cluster id and token (--cluster-id, --cluster-token-file): no proof of life can be checked, so the failover guard holds the pods of every lost node")
		return config.LifeKey{}
	}
	return a.lifeKey(a.opts.ClusterID, a.opts.ClusterToken)
}

// serveExternalStatus serves /status, the proof of life and the node report on
// Options.StatusAddr for an agent run against a cluster it did not form
// (--no-bootstrap): as on a device, the other nodes' failover guard probes
// this node's agent there. /status answers cluster:<id> while this node's
// Node is a server and etcd member.
// The caller closes the returned server: once closed, nothing answers there.
func (a *Agent) serveExternalStatus(snap *kube.Snapshot, key config.LifeKey) (*http.Server, error) {
	var l net.Listener
	err := a.opts.InNetNS(func() (err error) {
		l, err = net.Listen("tcp", a.opts.StatusAddr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("/status server on %s: %w", a.opts.StatusAddr, err)
	}
	// Without a cluster id it names no cluster: it never says "cluster:".
	member := func() bool {
		n, ok := snap.Node(a.opts.NodeName)
		return a.opts.ClusterID != "" && ok && snap.Health().Connected && kube.IsEtcdMember(n) && kube.IsServer(n)
	}
	// Beside them, this node's own report for the console and sitecon
	// status when the cluster API does not answer.
	report := statusserver.NodeReportHandler(key, a.opts.NodeName, a.nodeReport)
	srv := localapi.NewServer(statusserver.WithNodeReport(statusserver.WithLifeProof(statusserver.Handler(a.opts.ClusterID, member), key, a.opts.NodeName, a.life), report))
	go func() { _ = srv.Serve(l) }()
	a.log.Info("serving /status and the proof of life", "addr", l.Addr().String())
	return srv, nil
}
