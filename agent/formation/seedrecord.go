package formation

import (
	"encoding/json"
	"net/netip"
	"time"

	"github.com/sitecon/sitecon/agent/config"
)

// SeedRecord is a seed change this node learnt from its cluster (sitecon seed
// NODE), kept on the device. A restart must join through the new seed even
// when the cluster cannot be asked, and that is the very case a seed change
// is for: the old seed device is dead. It lives in the agent's state
// directory (Records.SeedRecordFile).
type SeedRecord struct {
	ClusterID string `json:"cluster_id"`
	// ConfigJoinIP is the join_server_ip of the node's config when the record
	// was made. A config naming another one means the controller has spoken:
	// the record no longer applies.
	ConfigJoinIP string    `json:"config_join_server_ip"`
	JoinServerIP string    `json:"join_server_ip"`
	At           time.Time `json:"at"`
}

// ReadSeedRecord reads the record; a missing file is no record (false, nil).
func ReadSeedRecord(path string) (SeedRecord, bool, error) {
	return config.ReadOptional[SeedRecord](path)
}

// WriteSeedRecord replaces the record atomically (0600: it names the cluster).
func WriteSeedRecord(path string, r SeedRecord) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return config.WriteFileAtomic(path, append(data, '\n'), 0o600)
}

// ApplySeedRecord decides whether a recorded seed change holds for config v:
// it must be this cluster's, made against the join address v still names,
// and inside the cluster prefix. stale means the record no longer applies
// (the controller set a new seed, or the record moved back to the config's).
func ApplySeedRecord(v *config.Validated, r SeedRecord) (out *config.Validated, applied, stale bool) {
	ip, err := netip.ParseAddr(r.JoinServerIP)
	switch {
	case r.ClusterID != v.ClusterID:
		return v, false, true
	case r.ConfigJoinIP != v.JoinIP.String():
		return v, false, true
	case err != nil || !v.Network.Contains(ip):
		return v, false, true
	case ip == v.JoinIP:
		return v, false, true
	}
	return v.WithJoinIP(ip), true, false
}
