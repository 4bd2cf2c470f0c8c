package formation

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
	corev1 "k8s.io/api/core/v1"
)

// RemovedMarker records that this node was removed from its cluster.
type RemovedMarker struct {
	ClusterID string `json:"cluster_id"`
	NodeName  string `json:"node_name"`
	// Evidence is what the agent saw, in words.
	Evidence string    `json:"evidence"`
	At       time.Time `json:"at"`
}

// MarkRemoved writes the marker.
func MarkRemoved(path string, m RemovedMarker) error {
	if m.At.IsZero() {
		m.At = time.Now().UTC()
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return config.WriteFileAtomic(path, append(data, '\n'), 0o600)
}

// ErrRemoved means this node was removed from the cluster its config names.
var ErrRemoved = errors.New("this node was removed from its cluster")

// RemovalHold is the error a bring-up of v holds with when this node was
// removed from v's cluster (nil when it was not). An unreadable marker is
// unknown, and unknown holds: the cost of a wrong hold is a technician's
// visit, the cost of a wrong start a second cluster.
func RemovalHold(v *config.Validated, markerPath string) error {
	m, ok, err := config.ReadOptional[RemovedMarker](markerPath)
	switch {
	case err != nil:
		return fmt.Errorf("%w? cannot tell: %v (repair or remove %s)", ErrRemoved, err, markerPath)
	case !ok || !strings.EqualFold(m.ClusterID, v.ClusterID) || m.NodeName != v.NodeName:
		return nil
	}
	return fmt.Errorf("%w: %s was removed from cluster %s at %s (%s), so it starts neither k3s nor its cluster address "+
		"(k3s would restart it as a cluster of its own); to bring this device back, make a bundle on a live member "+
		"(sitecon join-info --role server --node-name %s) and apply it here with sitecon form --join, which clears %s",
		ErrRemoved, v.NodeName, v.ClusterID, m.At.Format(time.RFC3339), m.Evidence, v.NodeName, markerPath)
}

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
