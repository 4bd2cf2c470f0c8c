// Package audit records every on-site action (what, on what, by whom, the
// preflight and the outcome) as JSON lines in an append-only regular file,
// mode 0600. An action that changes something is recorded twice: an intent,
// on disk before the change, and its outcome after, linked by one id; an
// intent with no outcome is an action that was cut off (docs/DESIGN.md,
// "A human confirms").
package audit

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sitecon/sitecon/privdir"
)

// DefaultPath is where actions are recorded unless told otherwise. Its
// directory must be root's alone (see Open).
const DefaultPath = "/var/log/sitecon/audit.jsonl"

// Outcomes of an action.
const (
	// OutcomeIntent is written before the change: what is about to be done.
	OutcomeIntent    = "intent"
	OutcomeDone      = "done"
	OutcomeRefused   = "refused"
	OutcomeFailed    = "failed"
	OutcomeCancelled = "cancelled"
	OutcomeDryRun    = "dry-run"
	// OutcomeInterrupted is an action cut off by a signal (SIGINT, SIGHUP
	// from a dropped SSH session, SIGTERM) while it ran.
	OutcomeInterrupted = "interrupted"
)

// Record is one action, or one step of it (its intent, its outcome).
type Record struct {
	Time time.Time `json:"time"`
	// ID links an action's intent and its outcome.
	ID string `json:"id,omitempty"`
	// User is the login identity (the kernel's login uid, which su and
	// sudo do not change, else the real uid) as a name; UID the real uid.
	User     string  `json:"user"`
	UID      int     `json:"uid"`
	LoginUID *uint32 `json:"loginuid,omitempty"`
	Session  string  `json:"session,omitempty"`
	TTY      string  `json:"tty,omitempty"`
	// Claimed is what the environment says about who acts (SUDO_USER,
	// SSH_CONNECTION): anyone can set it, so it is never the user.
	Claimed string `json:"claimed,omitempty"`
	// Via is the face that acted: "console", or empty for a command.
	Via       string   `json:"via,omitempty"`
	Action    string   `json:"action"`
	Target    string   `json:"target"`
	Preflight []string `json:"preflight,omitempty"`
	Outcome   string   `json:"outcome"`
	Error     string   `json:"error,omitempty"`
	// Detail is what the action did (the override written, pods evicted).
	Detail string `json:"detail,omitempty"`
	// Prev chains the log: the SHA-256 of the line before this one, as
	// written (ChainHash; "" for the first). A line changed or removed
	// breaks the chain at the line after it (VerifyChain).
	Prev string `json:"prev,omitempty"`
}

// Log appends records to one regular file.
type Log struct {
	path string
	mu   sync.Mutex
}

// openFlags never follow a symlink and never block: opening a FIFO for
// writing would wait for a reader (with O_NONBLOCK it fails instead, or
// opens and is refused by the check that follows).
const openFlags = os.O_RDWR | os.O_APPEND | os.O_CREATE | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_CLOEXEC

// Open checks that the log can be written before any action runs: an
// action that cannot be recorded is not taken. The log must be a regular
// file (created 0600 if absent); a device such as /dev/null, a FIFO, a
// symlink or a directory is refused, and nothing but the log itself is
// ever chmodded. The default path's directory must be root's alone, or a
// user could have put anything there for root to write through.
func Open(path string) (*Log, error) {
	if path == "" {
		return nil, errors.New("audit log: no path (choose one with --audit-log)")
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit log %s: %w (choose another with --audit-log)", path, err)
	}
	if filepath.Clean(path) == DefaultPath {
		if err := rootsAlone(dir); err != nil {
			return nil, fmt.Errorf("audit log %s: %w", path, err)
		}
	}
	f, err := openRegular(path)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w (choose another with --audit-log)", path, err)
	}
	// A log made by hand with a wider mode still holds who did what on
	// site: it is the owner's only. This is the regular file just opened
	// (fchmod), never what a path might point to.
	err = f.Chmod(0o600)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	return &Log{path: path}, nil
}

// openRegular opens path for appending and makes sure what was opened is a
// regular file; the check is on the open file, so a swap between a check
// and the open cannot slip anything else in.
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, openFlags, 0o600)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, errors.New("is a symlink, not a regular file")
	case errors.Is(err, syscall.ENXIO):
		return nil, errors.New("is a FIFO or socket, not a regular file")
	case errors.Is(err, syscall.EISDIR):
		return nil, errors.New("is a directory, not a regular file")
	case err != nil:
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if m := st.Mode(); !m.IsRegular() {
		f.Close()
		return nil, fmt.Errorf("is a %s, not a regular file", kind(m))
	}
	return f, nil
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "directory"
	case m&fs.ModeNamedPipe != 0:
		return "FIFO"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	}
	return "special file"
}

// rootsAlone checks that dir is a directory owned by root that no one else
// may write to.
func rootsAlone(dir string) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	switch privdir.Check(st, 0) {
	case privdir.NotADirectory:
		return fmt.Errorf("%s is a %s, not a directory", dir, kind(st.Mode()))
	case privdir.OtherOwner:
		return fmt.Errorf("%s is not owned by root: the default audit log lives only in root's own directory", dir)
	case privdir.OthersMayWrite:
		return fmt.Errorf("%s may be written by others (mode %v): make it root's alone (chmod go-w)", dir, st.Mode().Perm())
	}
	return nil
}

// Path is the file the log appends to.
func (l *Log) Path() string { return l.path }

// Write appends one record, synced to disk, in a single write so
// concurrent writers never interleave within a line, chained to the line
// before it under an exclusive lock on the file (every sitecon process
// that writes the log takes it: the console, the commands, the agent).
// The file is opened again for every record with the same checks as
// Open: a log replaced by a symlink or a device since is refused, not
// followed.
func (l *Log) Write(r Record) error {
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	if r.ID == "" {
		r.ID = newID()
	}
	if r.User == "" {
		CurrentIdentity().stamp(&r)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := openRegular(l.path)
	if err != nil {
		return fmt.Errorf("audit log %s: %w", l.path, err)
	}
	if err := lockWithin(f, lockWait); err != nil {
		f.Close()
		return fmt.Errorf("audit log %s: %w", l.path, err)
	}
	last, cut, err := lastLine(f)
	if err != nil {
		f.Close()
		return fmt.Errorf("audit log %s: %w", l.path, err)
	}
	r.Prev = ""
	if last != nil {
		r.Prev = ChainHash(last)
	}
	data, err := json.Marshal(r)
	if err != nil {
		f.Close()
		return err
	}
	line := append(data, '\n')
	if cut {
		// The last write was cut off (a full disk, a crash): this record
		// starts a line of its own, chained to the fragment.
		line = append([]byte{'\n'}, line...)
	}
	if _, err := f.Write(line); err != nil {
		f.Close()
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// lockWait bounds the wait for another writer's lock: a writer stopped
// (ctrl-z) or stuck on a hung disk must not hold every action back for
// good; the action then is not taken, with the reason.
const lockWait = 5 * time.Second

// lockWithin takes f's exclusive lock, trying for at most wait.
func lockWithin(f *os.File, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("lock: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("another writer has held its lock for over %s (a sitecon process stopped or stuck?)", wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Entry is an action whose intent is on disk: its outcome is still to be
// written, with the same id. Rec may be added to (preflight, detail)
// before End.
type Entry struct {
	Rec   Record
	log   *Log
	ended bool
}

// Begin writes r as an intent, synced, and returns the entry its outcome
// is written through. An error means nothing is on disk: the action must
// not be taken.
func (l *Log) Begin(r Record) (*Entry, error) {
	r.ID = newID()
	r.Outcome, r.Error = OutcomeIntent, ""
	if r.User == "" {
		CurrentIdentity().stamp(&r)
	}
	if err := l.Write(r); err != nil {
		return nil, err
	}
	r.Time = time.Time{}
	return &Entry{Rec: r, log: l}, nil
}

// End writes the outcome (err's text with it), once.
func (e *Entry) End(outcome string, err error) error {
	if e.ended {
		return fmt.Errorf("audit: %s %s already has its outcome", e.Rec.Action, e.Rec.Target)
	}
	e.ended = true
	r := e.Rec
	r.Time, r.Outcome, r.Error = time.Time{}, outcome, ""
	if err != nil {
		r.Error = err.Error()
	}
	return e.log.Write(r)
}

// Ended reports whether the outcome was written.
func (e *Entry) Ended() bool { return e.ended }

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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
	sc.Buffer(make([]byte, 64<<10), MaxLineBytes)
	for sc.Scan() {
		var r Record
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}

// Identity is who acts, as the kernel knows it, and what the environment
// claims besides.
type Identity struct {
	User     string
	UID      int
	LoginUID *uint32
	Session  string
	TTY      string
	Claimed  string
}

// unsetLoginUID is the kernel's login uid of a process no login session
// started (a daemon, a container without PAM's loginuid module).
const unsetLoginUID = 4294967295

// CurrentIdentity reads who acts: the audit login uid of the session
// (/proc/self/loginuid, set at login and kept through su and sudo) mapped
// to a name, else the real uid's name; the session id and the terminal;
// and, marked as claimed, what SUDO_USER and SSH_CONNECTION say.
func CurrentIdentity() Identity {
	return identity("/proc/self", os.Getenv, os.Getuid())
}

func identity(proc string, getenv func(string) string, uid int) Identity {
	id := Identity{UID: uid}
	who := uid
	if raw, err := os.ReadFile(filepath.Join(proc, "loginuid")); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 32); err == nil && n != unsetLoginUID {
			v := uint32(n)
			id.LoginUID, who = &v, int(n)
		}
	}
	id.User = "uid " + strconv.Itoa(who)
	if u, err := user.LookupId(strconv.Itoa(who)); err == nil {
		id.User = u.Username
	}
	if raw, err := os.ReadFile(filepath.Join(proc, "sessionid")); err == nil {
		if s := strings.TrimSpace(string(raw)); s != "" && s != strconv.Itoa(unsetLoginUID) {
			id.Session = s
		}
	}
	if tty, err := os.Readlink(filepath.Join(proc, "fd/0")); err == nil && strings.HasPrefix(tty, "/dev/") && tty != "/dev/null" {
		id.TTY = strings.TrimPrefix(tty, "/dev/")
	}
	var claims []string
	if sudo := getenv("SUDO_USER"); sudo != "" {
		claims = append(claims, "SUDO_USER="+sudo)
	}
	if ssh := strings.Fields(getenv("SSH_CONNECTION")); len(ssh) > 0 {
		claims = append(claims, "SSH_CONNECTION from "+ssh[0])
	}
	id.Claimed = strings.Join(claims, ", ")
	return id
}

func (id Identity) stamp(r *Record) {
	r.User, r.UID, r.LoginUID, r.Session, r.TTY, r.Claimed = id.User, id.UID, id.LoginUID, id.Session, id.TTY, id.Claimed
}

// CurrentUser is the login identity's name, for records kept outside this
// log (an on-site override's "by").
func CurrentUser() string { return CurrentIdentity().User }
