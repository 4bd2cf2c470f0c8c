package agent

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/sitecon/sitecon/agent/workloads"
)

// The agent's config file: watched poll by poll (a file absent for a
// moment is not a leave), loaded, validated, and left on intent only.

// configWatch decides, poll by poll, what the config file's stat means.
// Only a file that is absent (ENOENT) for the whole grace period takes the
// node out: an editor's rename-save, a remount or a tool swapping the file
// leaves it absent for moments, and leaving stops k3s (on two servers at
// once, etcd's quorum). Any other stat error says nothing about intent: the
// node holds what it runs and says so. A config that failed to load is
// loaded again on every poll, since what made it fail (an interface not
// created yet, a key not readable yet) can change without the file changing.
type configWatch struct {
	grace        time.Duration
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

type configStep struct {
	load, leave bool
	// note says what the agent holds and why ("config missing for 12s;
	// leaving in 18s"); empty when the file reads.
	note string
}

// leaveRead is what the leave request said at a poll.
type leaveRead struct {
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

// readLeave reads the leave request at path, and compares it with the
// config at configPath: a request written for another cluster or node (the
// device formed or joined anew since) is not this one's intent.
func readLeave(configPath, path string) leaveRead {
	req, ok, err := formation.ReadLeaveRequest(path)
	lr := leaveRead{req: req, present: ok, err: err, path: path}
	if !ok || err != nil {
		return lr
	}
	// A config that cannot be read now is not compared: the watch decides
	// from what it found before (next).
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

// next decides one poll from the config file's stat and the leave request.
// A leave request overrides the file: the node leaves once and stays out
// while it is there; withdrawn, the config counts as new and is loaded. A
// request that cannot be read says nothing of intent: hold.
func (w *configWatch) next(stamp string, statErr error, lr leaveRead, now time.Time) configStep {
	switch {
	case lr.err != nil:
		return configStep{note: fmt.Sprintf("leave request unreadable (%v); holding what runs", lr.err)}
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
		step.note = strings.TrimPrefix(step.note+"; ", "; ") + fmt.Sprintf("a leave request is ignored (%s): remove %s", why, lr.path)
		return step
	case lr.present:
		w.ignored = formation.LeaveRequest{}
		step := configStep{leave: !w.requestedLeave, note: fmt.Sprintf("left the cluster on request (by %s at %s); remove %s to join again",
			lr.req.By, lr.req.At.UTC().Format(time.RFC3339), lr.path)}
		w.requestedLeave, w.left, w.lastStamp, w.missingSince = true, true, "", time.Time{}
		return step
	}
	return w.fromFile(stamp, statErr, now)
}

// fromFile decides one poll from the config file's stat alone.
func (w *configWatch) fromFile(stamp string, statErr error, now time.Time) configStep {
	w.requestedLeave = false
	switch {
	case statErr == nil:
		w.missingSince = time.Time{}
		changed := stamp != w.lastStamp || w.left
		w.lastStamp, w.left = stamp, false
		load := changed || w.retry
		w.retry = false
		return configStep{load: load}
	case errors.Is(statErr, fs.ErrNotExist):
		if w.left {
			return configStep{note: "no cluster config: not in a cluster"}
		}
		if w.missingSince.IsZero() {
			w.missingSince = now
		}
		missing := now.Sub(w.missingSince)
		if missing >= w.grace {
			w.left, w.lastStamp = true, ""
			return configStep{leave: true, note: "no cluster config: not in a cluster"}
		}
		return configStep{note: fmt.Sprintf("config missing for %s; leaving in %s unless it returns",
			missing.Round(time.Second), (w.grace - missing).Round(time.Second))}
	default:
		// Absence must be continuous to count.
		w.missingSince = time.Time{}
		return configStep{note: fmt.Sprintf("config cannot be read (%v); holding what runs", statErr)}
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

// leaveFailed asks for the leave to be tried again at the next poll.
func (w *configWatch) leaveFailed() { w.left, w.requestedLeave = false, false }

// loadFailed asks for the config to be loaded again at the next poll.
func (w *configWatch) loadFailed() { w.retry = true }

// statConfig stats the config file for one poll: its stamp (mtime and
// size) and the stat's error, which configWatch.next judges. A file is
// absent (fs.ErrNotExist) only when its directory is there to say so: a
// directory that is itself absent or unreadable (/persist not mounted yet,
// or gone with its disk) says nothing of intent, and is returned as a
// configDirError, which next holds on like any unreadable file.
func statConfig(path string) (string, error) {
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

// load reads and validates the config.
func (a *Agent) load() (*config.Validated, error) {
	c, err := config.Load(a.opts.ConfigPath)
	if err != nil {
		return nil, err
	}
	return config.Validate(c, a.opts.Env)
}

func (a *Agent) configError(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Retried every poll: logged when the reason changes, not each time.
	if a.state.ConfigError != err.Error() {
		a.log.Error("cluster config rejected; keeping the previous one, retrying", "err", err)
	}
	a.state.ConfigError = err.Error()
	if a.applied == nil {
		a.state.Phase, a.state.Since, a.state.LastError = PhaseError, time.Now(), err.Error()
	}
}

func (a *Agent) sameAsApplied(v *config.Validated) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.applied == nil {
		return false
	}
	x, _ := json.Marshal(a.applied.Config)
	y, _ := json.Marshal(v.Config)
	return bytes.Equal(x, y) && a.applied.Token == v.Token
}

// leave takes this node out, k3s already stopped by the caller: first the
// containers k3s started (they outlive k3s, each held by its shim, and a
// node that dropped its address while they ran would look dead to the
// others' failover guard, which then starts the same app a second time
// beside them), then the cluster address and the firewall table. A
// container that cannot be stopped keeps the address: false, and the node
// says so and tries again at the next poll.
func (a *Agent) leave(ctx context.Context) bool {
	a.mu.Lock()
	applied := a.applied
	a.mu.Unlock()
	if applied == nil {
		return true
	}
	rep, err := workloads.StopAll(ctx, a.opts.Workloads)
	if err != nil {
		err = fmt.Errorf("leaving: this node's containers could not all be stopped (%s): %w; keeping the cluster address, retrying", rep, err)
		a.log.Error("leave held", "err", err)
		a.setPhase(PhaseError, err)
		return false
	}
	a.log.Info("stopped this node's containers", "killed", len(rep.Killed), "unmounted", rep.Unmounted)
	a.mu.Lock()
	a.applied = nil
	a.mu.Unlock()
	err = a.dropClusterAddress(applied)
	a.setPhase(PhaseLeft, err)
	a.log.Info("left the cluster", "err", err)
	return true
}
