package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/config"
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

// RemovalView is what a connected member sees of itself in its cluster.
type RemovalView struct {
	// SeenOwnNode: this link saw this node's Node object since it
	// connected (before k3s registers it, an absent Node is no news).
	SeenOwnNode bool
	NodePresent bool
	// Record is the cluster's sitecon-cluster ConfigMap, nil when absent.
	Record *corev1.ConfigMap
}

// RemovedFromCluster decides whether node was removed from cluster
// clusterID: its Node, seen before, is gone, and the cluster record of the
// same cluster no longer lists it. Both are what `node remove` does; either
// alone is not enough (a Node deleted by hand comes back when k3s
// re-registers it; a record being rewritten is no removal).
func RemovedFromCluster(clusterID, node string, in RemovalView) (removed bool, evidence string) {
	if !in.SeenOwnNode || in.NodePresent || in.Record == nil {
		return false, ""
	}
	if !strings.EqualFold(in.Record.Data[kube.ClusterKeyID], clusterID) {
		return false, ""
	}
	for _, n := range strings.Split(in.Record.Data[kube.ClusterKeyNodes], ",") {
		if strings.TrimSpace(n) == node {
			return false, ""
		}
	}
	return true, fmt.Sprintf("its Node %s was deleted and the cluster record %s/%s no longer lists it", node, kube.AppNamespace, kube.ClusterConfigMapName)
}

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
				view := RemovalView{SeenOwnNode: seen}
				cms := snap.Data().ConfigMaps
				if i := slices.IndexFunc(cms, func(cm *corev1.ConfigMap) bool {
					return cm.Namespace == kube.AppNamespace && cm.Name == kube.ClusterConfigMapName
				}); i >= 0 {
					view.Record = cms[i]
				}
				if ok, evidence := RemovedFromCluster(clusterID, m.node, view); ok {
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
