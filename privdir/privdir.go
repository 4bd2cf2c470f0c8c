// Package privdir checks that a directory is one user's alone: owned by
// that user, and writable by no group and no other user, so that nobody
// else can put a file there for its owner to trust (the agent's records,
// root's audit log).
package privdir

import (
	"io/fs"
	"syscall"
)

// Fault is what keeps a directory from being its user's alone.
type Fault int

// The faults, in the order Check looks for them.
const (
	None           Fault = iota
	NotADirectory        // a file, a symlink (from os.Lstat), a device...
	OtherOwner           // owned by another user than the one asked for
	OthersMayWrite       // group or others may write (mode & 0o022)
)

// Check is the first fault of the directory st describes (from os.Stat,
// or os.Lstat to refuse a symlink) for the user uid; None when it is
// uid's alone. Each caller says in its own words what a fault risks.
func Check(st fs.FileInfo, uid int) Fault {
	sys, ok := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.IsDir():
		return NotADirectory
	case !ok || int(sys.Uid) != uid:
		return OtherOwner
	case st.Mode().Perm()&0o022 != 0:
		return OthersMayWrite
	}
	return None
}
