package agent

import (
	"context"
	"errors"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/netcfg"
)

// A node taken out of its cluster (`sitecon node remove` or `node replace`
// on a live member: its Node deleted, its name off the cluster record) must
// not come back as it was. k3s restarts an init node that was removed from
// etcd as a new single-node cluster (k3s-io/k3s#13623): a second cluster
// with the same id, token and address. So the agent that sees its own
// removal records it (the removed marker, in the agent's state directory:
// Records.RemovedMarkerFile), stops k3s and drops the cluster address;
// every later bring-up of the same cluster and node holds.

// watchRemoval follows this node's Node and the cluster record until ctx
// ends, and calls removed once when they say this node was removed.
func (m *clusterLink) watchRemoval(ctx context.Context, snap *kube.Snapshot, clusterID string, removed func(evidence string)) {
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	seen := false
	for {
		if snap.Synced() && snap.Health().Connected {
			_, present := snap.Node(m.node)
			seen = seen || present
			// The record is read only when the Node is gone: the caches'
			// copy is not taken on every change.
			if seen && !present {
				view := formation.RemovalView{SeenOwnNode: seen}
				cms := snap.Data().ConfigMaps
				if i := slices.IndexFunc(cms, func(cm *corev1.ConfigMap) bool {
					return cm.Namespace == kube.AppNamespace && cm.Name == kube.ClusterConfigMapName
				}); i >= 0 {
					view.Record = cms[i]
				}
				if ok, evidence := formation.RemovedFromCluster(clusterID, m.node, view); ok {
					removed(evidence)
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
	}
}

// dropClusterAddress takes the cluster address and the firewall table off
// this node (a removed node keeps neither).
func (a *Agent) dropClusterAddress(v *config.Validated) error {
	a.mu.Lock()
	prefix := a.prefix
	a.prefix, a.state.ClusterIPReady = netip.Prefix{}, false
	a.mu.Unlock()
	if !prefix.IsValid() {
		prefix = v.Prefix
	}
	return a.opts.InNetNS(func() error {
		_, err := netcfg.RemoveClusterAddress(v.ClusterInterface, prefix)
		return errors.Join(err, netcfg.RemoveFirewall())
	})
}
