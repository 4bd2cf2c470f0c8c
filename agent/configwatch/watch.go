// Package configwatch decides what the agent's config file and the leave
// request mean, poll by poll: a file absent for a moment is not a leave,
// a file that cannot be read holds what runs, and the node leaves on
// intent only (the config removed from a readable directory past its grace
// period, or a leave request written for this cluster and node). The agent
// (package agent) stats, loads and leaves as a step says.
package configwatch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
)

// Watch decides, poll by poll, what the config file's stat means.
// Only a file that is absent (ENOENT) for the whole grace period takes the
// node out: an editor's rename-save, a remount or a tool swapping the file
// leaves it absent for moments, and leaving stops k3s (on two servers at
// once, etcd's quorum). Any other stat error says nothing about intent: the
// node holds what it runs and says so. A config that failed to load is
// loaded again on every poll, since what made it fail (an interface not
// created yet, a key not readable yet) can change without the file changing.
type Watch struct {
	Grace        time.Duration
	lastStamp    string
	missingSince time.Time // zero: not missing
	left         bool
	retry        bool
	// requestedLeave: the node left on a leave request (Records.LeaveRequestFile)
	// that is still there.
	requestedLeave bool
	// ignored is the leave request last found written for another
	// cluster or node.
	ignored formation.LeaveRequest
}

// Step is what one poll asks of the agent: load the config, leave the
// cluster, and what to say meanwhile.
type Step struct {
	Load, Leave bool
	// note says what the agent holds and why ("config missing for 12s;
	// leaving in 18s"); empty when the file reads.
	Note string
}

// LeaveRead is what the leave request said at a poll.
type LeaveRead struct {
	req     formation.LeaveRequest
	present bool
	err     error
	path    string
	// otherCluster says why the request is not this config's (written
	// for another cluster or node); empty when it is, or when there is no
	// config to compare with.
	otherCluster string
	// checked: the config was read and compared with the request.
	checked bool
}

// ReadLeave reads the leave request at path, and compares it with the
// config at configPath: a request written for another cluster or node (the
// device formed or joined anew since) is not this one's intent.
func ReadLeave(configPath, path string) LeaveRead {
	req, ok, err := formation.ReadLeaveRequest(path)
	lr := LeaveRead{req: req, present: ok, err: err, path: path}
	if !ok || err != nil {
		return lr
	}
	// A config that cannot be read now is not compared: the watch decides
	// from what it found before (Next).
	if c, err := config.Load(configPath); err == nil {
		lr.checked = true
		switch {
		case !strings.EqualFold(req.ClusterID, c.ClusterID):
			lr.otherCluster = fmt.Sprintf("written for cluster %s, the config is cluster %s", req.ClusterID, c.ClusterID)
		case req.NodeName != c.NodeName:
			lr.otherCluster = fmt.Sprintf("written for node %s, the config is node %s's", req.NodeName, c.NodeName)
		}
	}
	return lr
}

// Next decides one poll from the config file's stat and the leave request.
// A leave request overrides the file: the node leaves once and stays out
// while it is there; withdrawn, the config counts as new and is loaded. A
// request that cannot be read says nothing of intent: hold.
func (w *Watch) Next(stamp string, statErr error, lr LeaveRead, now time.Time) Step {
	switch {
	case lr.err != nil:
		return Step{Note: fmt.Sprintf("leave request unreadable (%v); holding what runs", lr.err)}
	case lr.present && (lr.otherCluster != "" || (!lr.checked && w.ignored.Same(lr.req))):
		// Not this cluster's request, or the one found so before while the
		// config cannot be read now to check again (a read failure never
		// turns it into a leave): the config decides, as if it were not
		// there, and the note says so while it stays.
		why := lr.otherCluster
		if why != "" {
			w.ignored = lr.req
		} else {
			why = "another cluster's, as found before; the config cannot be read now to check again"
		}
		step := w.fromFile(stamp, statErr, now)
		step.Note = strings.TrimPrefix(step.Note+"; ", "; ") + fmt.Sprintf("a leave request is ignored (%s): remove %s", why, lr.path)
		return step
	case lr.present:
		w.ignored = formation.LeaveRequest{}
		step := Step{Leave: !w.requestedLeave, Note: fmt.Sprintf("left the cluster on request (by %s at %s); remove %s to join again",
			lr.req.By, lr.req.At.UTC().Format(time.RFC3339), lr.path)}
		w.requestedLeave, w.left, w.lastStamp, w.missingSince = true, true, "", time.Time{}
		return step
	}
	return w.fromFile(stamp, statErr, now)
}

// fromFile decides one poll from the config file's stat alone.
func (w *Watch) fromFile(stamp string, statErr error, now time.Time) Step {
	w.requestedLeave = false
	switch {
	case statErr == nil:
		w.missingSince = time.Time{}
		changed := stamp != w.lastStamp || w.left
		w.lastStamp, w.left = stamp, false
		load := changed || w.retry
		w.retry = false
		return Step{Load: load}
	case errors.Is(statErr, fs.ErrNotExist):
		if w.left {
			return Step{Note: "no cluster config: not in a cluster"}
		}
		if w.missingSince.IsZero() {
			w.missingSince = now
		}
		missing := now.Sub(w.missingSince)
		if missing >= w.Grace {
			w.left, w.lastStamp = true, ""
			return Step{Leave: true, Note: "no cluster config: not in a cluster"}
		}
		return Step{Note: fmt.Sprintf("config missing for %s; leaving in %s unless it returns",
			missing.Round(time.Second), (w.Grace - missing).Round(time.Second))}
	default:
		// Absence must be continuous to count.
		w.missingSince = time.Time{}
		return Step{Note: fmt.Sprintf("config cannot be read (%v); holding what runs", statErr)}
	}
}

// configDirError: the config file's directory is absent or unreadable. It
// does not wrap fs.ErrNotExist on purpose: only a file removed from a
// readable directory is absent.
type configDirError struct {
	dir string
	err error
}

func (e *configDirError) Error() string {
	if errors.Is(e.err, fs.ErrNotExist) {
		return fmt.Sprintf("config directory %s is absent (not mounted?)", e.dir)
	}
	return fmt.Sprintf("config directory %s cannot be read: %v", e.dir, e.err)
}

// LeaveFailed asks for the leave to be tried again at the next poll.
func (w *Watch) LeaveFailed() { w.left, w.requestedLeave = false, false }

// LoadFailed asks for the config to be loaded again at the next poll.
func (w *Watch) LoadFailed() { w.retry = true }

// Stat stats the config file for one poll: its stamp (mtime and
// size) and the stat's error, which Watch.Next judges. A file is
// absent (fs.ErrNotExist) only when its directory is there to say so: a
// directory that is itself absent or unreadable (/persist not mounted yet,
// or gone with its disk) says nothing of intent, and is returned as a
// configDirError, which Next holds on like any unreadable file.
func Stat(path string) (string, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		dir := filepath.Dir(path)
		switch dst, derr := os.Stat(dir); {
		case derr != nil:
			return "absent", &configDirError{dir: dir, err: derr}
		case !dst.IsDir():
			return "absent", &configDirError{dir: dir, err: errors.New("not a directory")}
		}
	}
	if err != nil {
		return "absent", err
	}
	return st.ModTime().String() + "/" + strconv.FormatInt(st.Size(), 10), nil
}
