package formation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/privdir"
)

// The agent's own records of this node's place in its cluster: the seed
// record (seed.json), the formed marker (formed.json), the leave request
// (leave.json) and the removed marker (removed.json). Each decides what the
// node does (join through another seed, never initialise, stay out, hold),
// so they live in the agent's state directory, root's alone (0700, files
// 0600), and never beside the cluster config: the config's directory is
// written by whoever delivers the config, and a config may have any name
// (one called seed.json was read as the seed record). Agents before this
// one kept them beside the config; the first agent that runs with a state
// directory copies them there once (Records.Upgrade), and from then on
// files beside the config are not records (the originals stay, for a
// rollback to the release that reads them there).

// DefaultStateDir is where `sitecon agent` keeps its records and status
// files unless told otherwise (--state-dir): beside k3s's own data
// (/var/lib/rancher/k3s), on the same persistent storage, outside the
// config's directory.
const DefaultStateDir = "/var/lib/sitecon"

const (
	seedRecordName     = "seed.json"
	formedMarkerName   = "formed.json"
	leaveRequestName   = "leave.json"
	removedMarkerName  = "removed.json"
	recordsUpgradeName = "records-upgrade.json"
)

// Records are the agent's records in its state directory Dir.
type Records struct{ Dir string }

// SeedRecordFile is where the seed record lives.
func (r Records) SeedRecordFile() string { return filepath.Join(r.Dir, seedRecordName) }

// FormedMarkerFile is where the formed marker lives.
func (r Records) FormedMarkerFile() string { return filepath.Join(r.Dir, formedMarkerName) }

// LeaveRequestFile is where `sitecon agent leave` writes its request.
func (r Records) LeaveRequestFile() string { return filepath.Join(r.Dir, leaveRequestName) }

// RemovedMarkerFile is where the removed marker lives.
func (r Records) RemovedMarkerFile() string { return filepath.Join(r.Dir, removedMarkerName) }

// Prepare makes the state directory ready for the records of the node
// whose config is at configPath: created root-only (0700) when absent,
// and refused when others could plant records in it (not the agent's
// user's, writable by group or others), when it is the config's own
// directory, or when it is in memory (onPersistentStorage).
func (r Records) Prepare(configPath string) error {
	if r.Dir == "" {
		return errors.New("no state directory: the agent keeps its records there (seed record, formed and removed markers, leave request); give --state-dir")
	}
	if err := onPersistentStorage(r.Dir); err != nil {
		return err
	}
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	st, err := os.Stat(r.Dir)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	switch privdir.Check(st, os.Geteuid()) {
	case privdir.NotADirectory:
		return fmt.Errorf("state directory %s is not a directory", r.Dir)
	case privdir.OtherOwner:
		return fmt.Errorf("state directory %s is not this agent's user's (uid %d): another user could plant the agent's records there (chown it, mode 0700)", r.Dir, os.Geteuid())
	case privdir.OthersMayWrite:
		return fmt.Errorf("state directory %s may be written by others (mode %v): they could plant the agent's records there; make it the agent's alone (chmod 0700)", r.Dir, st.Mode().Perm())
	}
	if cst, err := os.Stat(filepath.Dir(configPath)); err == nil && os.SameFile(st, cst) {
		return fmt.Errorf("state directory %s is the cluster config's own directory: whoever writes the config there could plant the agent's records; give the agent a directory of its own (--state-dir, default %s)", r.Dir, DefaultStateDir)
	}
	return nil
}

// recordsUpgrade is what the one read of the old place found and did.
type recordsUpgrade struct {
	From   string    `json:"from"`
	Copied []string  `json:"copied,omitempty"`
	At     time.Time `json:"at"`
}

// recordKinds are the records an older agent kept beside the config, each
// with the check that a file there is one.
var recordKinds = []struct {
	name, what string
	check      func([]byte) error
}{
	{seedRecordName, "seed record", decodesAs[SeedRecord]},
	{formedMarkerName, "formed marker", decodesAs[FormedMarker]},
	{leaveRequestName, "leave request", decodesAs[LeaveRequest]},
	{removedMarkerName, "removed marker", decodesAs[RemovedMarker]},
}

func decodesAs[T any](data []byte) error {
	var v T
	return config.DecodeStrict(data, &v)
}

// Upgrade reads the place where agents before this one kept their records
// (beside the config at configPath), once: a record there and none in the
// state directory is copied (written in the state directory and synced);
// one the state directory already holds as it is (a copy made before) is
// left; one the state directory holds another version of is left where it
// is, not read. The originals stay beside the config: a rollback to the
// previous release still finds its removed and formed markers there (this
// agent never reads them again). The read is recorded in the state
// directory (records-upgrade.json), and from then on the old place is
// never read again: files put there later are not records. notes say what
// was done, for the log.
//
// done is false, with no error, while the config file itself is absent:
// its directory alone may be a mount point with nothing mounted yet (a
// /persist not mounted says nothing of what it holds), and the records
// arriving with the config must still be read: the caller asks again. A
// file at the old place that cannot be read, or is not the record its name
// says, is an error and nothing is copied: unknown is not "no record" (a
// removed marker lost would let k3s start a second cluster), and a file
// someone else keeps there is not the agent's to take. The config itself,
// whatever its name, is never a record.
func (r Records) Upgrade(configPath string) (notes []string, done bool, err error) {
	return r.upgrade(configPath, false)
}

// upgrade is Upgrade; configComing says the caller is about to write the
// config at configPath (a join), so its directory is the real one even
// while the config is absent.
func (r Records) upgrade(configPath string, configComing bool) (notes []string, done bool, err error) {
	mark := filepath.Join(r.Dir, recordsUpgradeName)
	switch _, err := os.Stat(mark); {
	case err == nil:
		return nil, true, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, fmt.Errorf("records upgrade: %w", err)
	}
	oldDir := filepath.Dir(configPath)
	configSt, configErr := os.Stat(configPath)
	switch {
	case errors.Is(configErr, fs.ErrNotExist) && !configComing:
		return nil, false, nil
	case configErr != nil && !errors.Is(configErr, fs.ErrNotExist):
		return nil, false, fmt.Errorf("records upgrade: the config: %w", configErr)
	}
	var copied []string
	for _, k := range recordKinds {
		old, dst := filepath.Join(oldDir, k.name), filepath.Join(r.Dir, k.name)
		st, err := os.Stat(old)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return notes, false, fmt.Errorf("records upgrade: %w (holding: it may be this node's %s)", err, k.what)
		case configErr == nil && os.SameFile(st, configSt):
			notes = append(notes, fmt.Sprintf("%s is the cluster config, not a %s: left as it is", old, k.what))
			continue
		}
		data, err := os.ReadFile(old)
		if err != nil {
			return notes, false, fmt.Errorf("records upgrade: %w (holding: it may be this node's %s)", err, k.what)
		}
		if err := k.check(data); err != nil {
			return notes, false, fmt.Errorf("records upgrade: %s is not a %s as an earlier agent wrote it (%v), so whether this node has one is unknown; nothing copied: "+
				"repair it, or move it out of the config's directory if it is not the agent's", old, k.what, err)
		}
		cur, err := os.ReadFile(dst)
		switch {
		case err == nil && bytes.Equal(cur, data):
			// Copied by an upgrade cut short before its mark.
			continue
		case err == nil:
			notes = append(notes, fmt.Sprintf("%s left where it is, not read: the state directory holds its own %s (%s)", old, k.what, dst))
			continue
		case errors.Is(err, fs.ErrNotExist):
			if err := config.WriteFileAtomic(dst, data, 0o600); err != nil {
				return notes, false, fmt.Errorf("records upgrade: %w", err)
			}
		default:
			return notes, false, fmt.Errorf("records upgrade: %w", err)
		}
		copied = append(copied, k.name)
		notes = append(notes, fmt.Sprintf("%s copied from %s to %s (the agent's records now live in its state directory; the original stays for the previous release, and is not read again)", k.what, old, dst))
	}
	data, err := json.MarshalIndent(recordsUpgrade{From: oldDir, Copied: copied, At: time.Now().UTC()}, "", "  ")
	if err != nil {
		return notes, false, err
	}
	if err := config.WriteFileAtomic(mark, append(data, '\n'), 0o600); err != nil {
		return notes, false, fmt.Errorf("records upgrade: %w", err)
	}
	return notes, true, nil
}

// onPersistentStorage refuses a state directory in memory (tmpfs, ramfs),
// judged by the file system of dir or, when dir is not there yet, of its
// nearest ancestor that is (nothing is made on a refused one). The records
// must outlive a reboot: a removed marker gone would start a removed node
// again, a leave request gone would bring a node back. Before the records
// moved there, --state-dir held only status files and had no default, so
// an agent may still be started with one under /run.
func onPersistentStorage(dir string) error {
	for p := filepath.Clean(dir); ; p = filepath.Dir(p) {
		var fs unix.Statfs_t
		err := unix.Statfs(p, &fs)
		if errors.Is(err, unix.ENOENT) && p != filepath.Dir(p) {
			continue
		}
		if err != nil {
			return fmt.Errorf("state directory %s: file system: %w", dir, err)
		}
		var what string
		switch int64(fs.Type) {
		case unix.TMPFS_MAGIC:
			what = "tmpfs"
		case unix.RAMFS_MAGIC:
			what = "ramfs"
		default:
			return nil
		}
		return fmt.Errorf("state directory %s is in memory (%s at %s): the agent's records (removed and formed markers, leave request) would be gone at the next reboot, "+
			"and a removed node would start again; give the agent a directory on persistent storage (--state-dir, default %s)", dir, what, p, DefaultStateDir)
	}
}
