package sitebox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A bootstrap-mode node's agent state directory can be a disk of its own
// (Options.StateDisks): a small ext4 image on a loop device, mounted there
// before its agent first starts (the agent refuses a tmpfs: its records
// must outlive a reboot), kept across power cycles as the device's flash
// is, and unmounted by Down. FillDisk fills it, as a full /persist does on
// a device: every write the agent makes there fails with ENOSPC until Heal
// removes the filler.

// stateDiskSize is each node's state disk: room for the agent's records,
// which are a few kilobytes each.
const stateDiskSize = 16 << 20

// diskFiller is the file FillDisk writes in the state directory.
const diskFiller = "sitebox-disk-filler"

// StateDir is the node's agent state directory in bootstrap mode.
func (s *Site) StateDir(node string) string { return filepath.Join(s.Dir, "state", node) }

func (s *Site) stateDiskImage(node string) string {
	return filepath.Join(s.Dir, "boot", node+"-state.ext4")
}

// mountStateDisk mounts node's state disk once, if the site has them,
// made on first use.
func (s *Site) mountStateDisk(node string) error {
	if !s.StateDisks {
		return nil
	}
	dir := s.StateDir(node)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if mounted, err := mountPoint(dir); err != nil || mounted {
		return err
	}
	img := s.stateDiskImage(node)
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(img), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(img+".partial", nil, 0o600); err != nil {
			return err
		}
		if err := os.Truncate(img+".partial", stateDiskSize); err != nil {
			return err
		}
		// No reserve for root (the agent is root), no journal: a small disk.
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", img+".partial").CombinedOutput(); err != nil {
			return fmt.Errorf("%s's state disk: mkfs.ext4: %v: %s", node, err, strings.TrimSpace(string(out)))
		}
		if err := os.Rename(img+".partial", img); err != nil {
			return err
		}
	}
	if out, err := exec.Command("mount", "-o", "loop,nosuid,nodev", img, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("%s's state disk: mount %s on %s: %v: %s", node, img, dir, err, strings.TrimSpace(string(out)))
	}
	return os.Chmod(dir, 0o700)
}

// unmountStateDisks unmounts every node's state disk (Down); its loop
// device goes with it (mount sets it to clear itself).
func (s *Site) unmountStateDisks() error {
	if !s.StateDisks {
		return nil
	}
	var errs []error
	for _, n := range s.Nodes {
		dir := s.StateDir(n.Name)
		if mounted, err := mountPoint(dir); err == nil && mounted {
			errs = append(errs, unix.Unmount(dir, unix.MNT_DETACH))
		}
	}
	return errors.Join(errs...)
}

// mountPoint: dir is on another device than its parent.
func mountPoint(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false, err
	}
	if err := unix.Stat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// fillDisk fills node's state disk to the last byte (the filler is left
// in place, not rewritten, when it is there); emptyDisk removes it.
func (s *Site) fillDisk(node string) error {
	path := filepath.Join(s.StateDir(node), diskFiller)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				break
			}
			return err
		}
	}
	// The last few bytes too, a short write at a time.
	for _, n := range []int{4096, 512, 1} {
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
	return nil
}

func (s *Site) emptyDisk(node string) error {
	err := os.Remove(filepath.Join(s.StateDir(node), diskFiller))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
