// Package audit records every on-site action (what, on what, by whom, the
// preflight and the outcome) as JSON lines in an append-only file, mode 0600.
package audit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// DefaultPath is where actions are recorded unless told otherwise.
const DefaultPath = "/var/log/sitecon/audit.jsonl"

// Outcomes of an action.
const (
	OutcomeDone      = "done"
	OutcomeRefused   = "refused"
	OutcomeFailed    = "failed"
	OutcomeCancelled = "cancelled"
	OutcomeDryRun    = "dry-run"
)

// Record is one action.
type Record struct {
	Time      time.Time `json:"time"`
	User      string    `json:"user"`
	Action    string    `json:"action"`
	Target    string    `json:"target"`
	Preflight []string  `json:"preflight,omitempty"`
	Outcome   string    `json:"outcome"`
	Error     string    `json:"error,omitempty"`
	// Detail is what the action did (the override written, pods evicted).
	Detail string `json:"detail,omitempty"`
}

// Log appends records to one file.
type Log struct {
	path string
	mu   sync.Mutex
}

// Open checks that the log can be written (creating it 0600) before any
// action runs: an action that cannot be recorded is not taken.
func Open(path string) (*Log, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log %s: %w (choose another with --audit-log)", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w (choose another with --audit-log)", path, err)
	}
	// A log made by hand with a wider mode still holds who did what on
	// site: it is the owner's only.
	return &Log{path: path}, errors.Join(f.Chmod(0o600), f.Close())
}

// Path is the file the log appends to.
func (l *Log) Path() string { return l.path }

// Write appends one record, synced to disk, in a single write so
// concurrent writers never interleave within a line.
func (l *Log) Write(r Record) error {
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	if r.User == "" {
		r.User = CurrentUser()
	}
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(append(data, '\n'))
	return errors.Join(werr, f.Sync(), f.Close())
}

// Read returns the log's records, oldest first; lines that do not parse are
// skipped (a record is never half-written, but the file is the user's).
func Read(path string) ([]Record, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r Record
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}

// CurrentUser names who acts: the login user, who they sudo'd from, and the
// SSH client address when the session is remote.
func CurrentUser() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if sudo := os.Getenv("SUDO_USER"); sudo != "" && sudo != name {
		name += " (sudo from " + sudo + ")"
	}
	if ssh := strings.Fields(os.Getenv("SSH_CONNECTION")); len(ssh) > 0 {
		name += " via ssh from " + ssh[0]
	} else if tty, err := os.Readlink("/proc/self/fd/0"); err == nil && strings.HasPrefix(tty, "/dev/tty") {
		name += " on console " + strings.TrimPrefix(tty, "/dev/")
	}
	return name
}
