package statusserver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/k3s"
)

// ServerCAKeyFile is where k3s keeps the cluster's server CA private key:
// on every server (the first makes it, the others get it with k3s's
// bootstrap data), on no agent.
func ServerCAKeyFile(p k3s.Paths) string {
	return filepath.Join(p.DataDir, "server", "tls", "server-ca.key")
}

// errNoServerCAKey: this node holds no server CA key (a worker, or a
// server whose k3s never ran here), so it can neither sign nor check a
// membership answer.
var errNoServerCAKey = errors.New("no server CA key here (only servers hold it)")

// LoadMembershipKey is the membership key of clusterID, derived from the
// server CA key k3s keeps under paths; errNoServerCAKey where there is
// none. Read each time: k3s writes the key when it first starts as a
// server, after the agent began answering on its cluster address.
func LoadMembershipKey(clusterID string, paths k3s.Paths) (config.MembershipKey, error) {
	file := ServerCAKeyFile(paths)
	data, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return config.MembershipKey{}, fmt.Errorf("%w: %s is absent", errNoServerCAKey, file)
	case err != nil:
		return config.MembershipKey{}, fmt.Errorf("%w: %w", errNoServerCAKey, err)
	}
	return config.NewMembershipKey(clusterID, data)
}
