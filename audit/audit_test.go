package audit_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sitecon/sitecon/audit"
)

// openWithin runs audit.Open and fails the test if it does not return
// within a deadline: opening a FIFO for writing blocks until a reader
// comes, and a log that hangs the action is no better than none.
func openWithin(t *testing.T, path string) (*audit.Log, error) {
	t.Helper()
	type result struct {
		l   *audit.Log
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := audit.Open(path)
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		return r.l, r.err
	case <-time.After(5 * time.Second):
		t.Fatalf("audit.Open(%s) blocked", path)
		return nil, nil
	}
}

// The audit log is a regular file only: a device, a FIFO, a symlink or a
// directory is refused with a clear error, and nothing else is chmodded.
func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	t.Run("/dev/null", func(t *testing.T) {
		before, err := os.Stat("/dev/null")
		if err != nil {
			t.Skip("no /dev/null")
		}
		_, err = openWithin(t, "/dev/null")
		after, serr := os.Stat("/dev/null")
		if serr == nil && after.Mode() != before.Mode() {
			// Put the machine's /dev/null back before anything else.
			_ = os.Chmod("/dev/null", before.Mode().Perm())
			t.Errorf("/dev/null's mode changed: %v → %v", before.Mode(), after.Mode())
		}
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("/dev/null accepted as the audit log: %v", err)
		}
	})
	t.Run("fifo", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "audit.jsonl")
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := openWithin(t, path)
		if err == nil || !strings.Contains(err.Error(), "FIFO") {
			t.Fatalf("a FIFO accepted as the audit log: %v", err)
		}
		if st, _ := os.Lstat(path); st.Mode().Perm() != 0o644 {
			t.Errorf("the FIFO's mode changed to %v", st.Mode())
		}
	})
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(dir, "elsewhere")
		if err := os.WriteFile(target, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "audit.jsonl")
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
		_, err := openWithin(t, path)
		if err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Fatalf("a symlink accepted as the audit log: %v", err)
		}
		if st, _ := os.Stat(target); st.Mode().Perm() != 0o644 || st.Size() != 0 {
			t.Errorf("the symlink's target was touched: %v, %d bytes", st.Mode(), st.Size())
		}
	})
	t.Run("directory", func(t *testing.T) {
		_, err := openWithin(t, t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "directory") {
			t.Fatalf("a directory accepted as the audit log: %v", err)
		}
	})
	t.Run("regular file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "audit.jsonl")
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := openWithin(t, path)
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
			t.Errorf("a log made by hand keeps mode %v", st.Mode())
		}
		if err := l.Write(audit.Record{Action: "cordon", Target: "node-a", Outcome: audit.OutcomeDone}); err != nil {
			t.Fatal(err)
		}
	})
}

// A log that is swapped for a symlink after it was opened is not followed
// by the next write: the write fails, so the action is not taken.
func TestWriteRefusesASwappedLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := l.Write(audit.Record{Action: "cordon", Target: "node-a", Outcome: audit.OutcomeDone}); err == nil {
		t.Fatal("a write followed the symlink")
	}
	if st, _ := os.Stat(target); st.Size() != 0 {
		t.Fatal("the symlink's target was written")
	}
}

// loginName is who the kernel says logged in (the audit login uid, set
// once per session and not changed by su or sudo), else the real uid.
func loginName(t *testing.T) string {
	t.Helper()
	uid := os.Getuid()
	if raw, err := os.ReadFile("/proc/self/loginuid"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 32); err == nil && n != 4294967295 {
			uid = int(n)
		}
	}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return "uid " + strconv.Itoa(uid)
}

// Who acted is the login identity: SUDO_USER and SSH_CONNECTION can be
// set by anyone, so they are kept only as what the session claims.
func TestUserIsTheLoginIdentityNotTheEnvironment(t *testing.T) {
	t.Setenv("SUDO_USER", "root")
	t.Setenv("SSH_CONNECTION", "203.0.113.9 50000 192.0.2.1 22")
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Write(audit.Record{Action: "cordon", Target: "node-a", Outcome: audit.OutcomeDone}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	var raw map[string]any
	if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if raw["user"] != loginName(t) {
		t.Errorf("user %q, want the login identity %q", raw["user"], loginName(t))
	}
	if uid, ok := raw["uid"].(float64); !ok || int(uid) != os.Getuid() {
		t.Errorf("uid %v, want the real uid %d", raw["uid"], os.Getuid())
	}
	claimed, _ := raw["claimed"].(string)
	if !strings.Contains(claimed, "SUDO_USER=root") || !strings.Contains(claimed, "203.0.113.9") {
		t.Errorf("claimed %q: want what the environment says, marked as claimed", claimed)
	}
}
