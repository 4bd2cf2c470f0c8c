package formation

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sitecon/sitecon/agent/config"
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
