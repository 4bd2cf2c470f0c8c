package bringup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/workloads"
	"github.com/sitecon/sitecon/kube"
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

// holdIfRemoved, once a bring-up ended (k3s stopped), stops the containers
// k3s left running and takes the cluster address off a node that saw its
// own removal, and says why it holds. Containers that cannot be stopped
// keep the address: a node that dropped it while they ran would look dead
// to the others' failover guard, which would start the same apps again.
func (r *Runner) holdIfRemoved(v *config.Validated, removedMarker string) {
	hold := formation.RemovalHold(v, removedMarker)
	if hold == nil {
		return
	}
	// The bring-up's context has ended; stopping must not.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if rep, err := workloads.StopAll(ctx, r.opts.Workloads); err != nil {
		r.host.SetPhase(PhaseError, errors.Join(hold, fmt.Errorf("this node's containers could not all be stopped (%s): %w; keeping the cluster address", rep, err)))
		return
	}
	if err := r.DropClusterAddress(v); err != nil {
		hold = errors.Join(hold, fmt.Errorf("dropping the cluster address: %w", err))
	}
	r.host.SetPhase(PhaseError, hold)
}
