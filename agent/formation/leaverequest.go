package formation

import (
	"encoding/json"
	"time"

	"github.com/sitecon/sitecon/agent/config"
)

// A node leaves its cluster on intent only: its config file gone for the
// whole grace period, or a leave request written in the agent's state
// directory (Records.LeaveRequestFile) by `sitecon agent leave` after its
// quorum and volume preflight. While the
// request is there the agent stays out (k3s stopped, the cluster address
// and firewall table removed), whatever the config says; removing it
// brings the node back.

// LeaveRequest is the tombstone `sitecon agent leave` writes.
type LeaveRequest struct {
	ClusterID string    `json:"cluster_id"`
	NodeName  string    `json:"node_name"`
	At        time.Time `json:"at"`
	By        string    `json:"by"`
}

// Same reports whether o is the same request (read again from the same file).
func (r LeaveRequest) Same(o LeaveRequest) bool {
	return r.ClusterID == o.ClusterID && r.NodeName == o.NodeName && r.By == o.By && r.At.Equal(o.At) && !r.At.IsZero()
}

// WriteLeaveRequest writes the request atomically, root-only.
func WriteLeaveRequest(path string, r LeaveRequest) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return config.WriteFileAtomic(path, append(data, '\n'), 0o600)
}

// ReadLeaveRequest reads the request at path: ok false when there is none.
// An unreadable or malformed request is an error: the caller holds.
func ReadLeaveRequest(path string) (LeaveRequest, bool, error) {
	return config.ReadOptional[LeaveRequest](path)
}
