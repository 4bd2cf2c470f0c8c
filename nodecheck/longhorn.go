package nodecheck

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sitecon/sitecon/kube/nodestate"
)

// Longhorn reads Longhorn's prerequisites on h: iscsid running, iscsi_tcp
// loaded, multipathd not claiming Longhorn's devices, an NFS client.
func Longhorn(h Host) nodestate.StorageReport {
	procs, procErr := processNames(h.Proc)
	var r nodestate.StorageReport
	// iscsid: Longhorn's engine logs in to its iSCSI target through it.
	switch {
	case procErr != nil:
		r.Iscsid.Problem = procErr.Error()
	case procs["iscsid"] > 0:
		r.Iscsid = nodestate.Prereq{OK: true, Evidence: "iscsid runs (" + h.Proc + ")"}
	default:
		r.Iscsid.Evidence = "no process named iscsid in " + h.Proc
	}
	r.IscsiTCP = moduleLoaded(h.Sys, "iscsi_tcp")
	r.Multipathd = multipathd(h, procs, procErr)
	r.NFSClient = nfsClient(h.BinDirs)
	return r
}

// processNames counts the processes by name (their comm) under proc. A
// process that ends while it is read is skipped.
func processNames(proc string) (map[string]int, error) {
	entries, err := os.ReadDir(proc)
	if err != nil {
		return nil, fmt.Errorf("processes not readable: %w", err)
	}
	names := map[string]int{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(proc, e.Name(), "comm"))
		if err != nil {
			continue
		}
		names[strings.TrimSpace(string(comm))]++
	}
	return names, nil
}

// moduleLoaded: a module loaded or built in has its directory under
// /sys/module.
func moduleLoaded(sys, name string) nodestate.Prereq {
	dir := filepath.Join(sys, "module", name)
	_, err := os.Stat(dir)
	switch {
	case err == nil:
		return nodestate.Prereq{OK: true, Evidence: dir + " is there"}
	case errors.Is(err, fs.ErrNotExist):
		return nodestate.Prereq{Evidence: "the " + name + " module is not loaded (no " + dir + ")"}
	}
	return nodestate.Prereq{Problem: err.Error()}
}

// nfsClient: Longhorn mounts an RWX volume's share with the node's
// mount.nfs (or mount.nfs4).
func nfsClient(dirs []string) nodestate.Prereq {
	var looked []string
	for _, d := range dirs {
		for _, name := range []string{"mount.nfs", "mount.nfs4"} {
			p := filepath.Join(d, name)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode().Perm()&0o111 != 0 {
				return nodestate.Prereq{OK: true, Evidence: p + " is there"}
			}
		}
		looked = append(looked, d)
	}
	return nodestate.Prereq{Evidence: "no mount.nfs or mount.nfs4 in " + strings.Join(looked, ", ")}
}
