package privdir

import (
	"os"
	"path/filepath"
	"testing"
)

// A directory is its user's alone only when it is a directory, that user
// owns it and neither group nor others may write it; reading is no fault.
func TestCheck(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	root := t.TempDir()
	mk := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		// Mkdir's mode passes through the umask; the case's is what counts.
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, -1); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(mk("target", 0o700, 0), link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		path string
		stat func(string) (os.FileInfo, error)
		uid  int
		want Fault
	}{
		{"root's 0700", mk("private", 0o700, 0), os.Stat, 0, None},
		{"others may read", mk("readable", 0o755, 0), os.Stat, 0, None},
		{"asked for another user", mk("roots", 0o700, 0), os.Stat, 1000, OtherOwner},
		{"owned by another user", mk("users", 0o700, 1000), os.Stat, 0, OtherOwner},
		{"group may write", mk("group", 0o770, 0), os.Stat, 0, OthersMayWrite},
		{"anyone may write", mk("world", 0o777, 0), os.Stat, 0, OthersMayWrite},
		{"sticky, anyone may write", mk("tmp", 0o777|os.ModeSticky, 0), os.Stat, 0, OthersMayWrite},
		{"a file", file, os.Stat, 0, NotADirectory},
		{"a symlink, not followed", link, os.Lstat, 0, NotADirectory},
		{"a symlink, followed", link, os.Stat, 0, None},
	} {
		st, err := c.stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := Check(st, c.uid); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
