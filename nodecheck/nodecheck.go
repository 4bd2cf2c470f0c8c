// Package nodecheck is the checks that need the node itself, made by each
// node's agent for its own node report (kube.NodeReport's Storage, Time
// and Certs sections): Longhorn's prerequisites, whether the kernel's
// clock is synchronised, k3s's certificates. sitecon doctor gathers them
// from every node's report (doctor/nodechecks.go). Each check only reads;
// a file that cannot be read is reported as unknown, never as met.
package nodecheck

import (
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/sitecon/sitecon/kube/nodestate"
)

// Host is where the node's state is read: the host's /proc, /sys, /etc
// and the directories mount helpers live in. Tests point them elsewhere.
type Host struct {
	Proc, Sys, Etc string
	// BinDirs are searched for mount.nfs and mount.nfs4.
	BinDirs []string
}

// DefaultHost is the running system's.
var DefaultHost = HostAt("/")

// HostAt is the host whose root file system is mounted at root: an agent
// in a container of its own reads the host's through a bind mount.
func HostAt(root string) Host {
	at := func(p string) string { return filepath.Join(root, p) }
	return Host{Proc: at("/proc"), Sys: at("/sys"), Etc: at("/etc"),
		BinDirs: []string{at("/sbin"), at("/usr/sbin"), at("/bin"), at("/usr/bin"), at("/usr/local/sbin")}}
}

// Checker makes this node's checks.
type Checker struct {
	// Host is where to read (zero: DefaultHost).
	Host Host
	// K3sDataDir is k3s's data dir, whose certificates are read.
	K3sDataDir string
	// Adjtimex asks the kernel for its clock's state (nil: unix.Adjtimex).
	Adjtimex func(*unix.Timex) (int, error)
}

func (c Checker) host() Host {
	if c.Host.Proc == "" && c.Host.Sys == "" && c.Host.Etc == "" {
		return DefaultHost
	}
	return c.Host
}

// Fill sets r's node-side sections.
func (c Checker) Fill(r *nodestate.NodeReport) {
	storage := Longhorn(c.host())
	certs := Certs(c.K3sDataDir)
	adj := c.Adjtimex
	if adj == nil {
		adj = unix.Adjtimex
	}
	t := TimeSync(adj)
	r.Storage, r.Certs, r.Time = &storage, &certs, &t
}
