package k3s

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/procexit"
)

// Supervisor runs k3s, restarts it with capped exponential backoff when it
// exits, and stops it cleanly.
type Supervisor struct {
	Bin     string
	Args    []string
	LogFile string
	Log     *slog.Logger
	// Start starts the command; tests start it inside a network namespace.
	Start func(*exec.Cmd) error
	// MinBackoff and MaxBackoff bound the wait between restarts; a run that
	// lasted StableAfter resets it.
	MinBackoff, MaxBackoff, StableAfter time.Duration
	// StopTimeout is how long k3s gets to stop on SIGTERM before SIGKILL.
	StopTimeout time.Duration
	// PIDFile records the running k3s, so an agent that starts again after
	// a crash stops a k3s it finds there before starting its own: one node,
	// one k3s. Empty: none.
	PIDFile string

	mu       sync.Mutex
	starts   int
	lastExit error
	// runningSince is when the running k3s started; zero while none runs.
	runningSince time.Time
}

// Running says whether k3s runs now, and since when.
func (s *Supervisor) Running() (running bool, since time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.runningSince.IsZero(), s.runningSince
}

// Stats reports how often k3s was started and how it last exited.
func (s *Supervisor) Stats() (starts int, lastExit error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts, s.lastExit
}

// Run keeps k3s running until ctx ends, then stops it and returns.
func (s *Supervisor) Run(ctx context.Context) error {
	minB, maxB, stable := s.MinBackoff, s.MaxBackoff, s.StableAfter
	if minB == 0 {
		minB = time.Second
	}
	if maxB == 0 {
		maxB = time.Minute
	}
	if stable == 0 {
		stable = 2 * time.Minute
	}
	start := s.Start
	if start == nil {
		start = func(c *exec.Cmd) error { return c.Start() }
	}
	s.stopOrphan()
	backoff := minB
	for {
		logFile, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("k3s log file: %w", err)
		}
		cmd := exec.Command(s.Bin, s.Args...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		// Its own process group: a Ctrl-C meant for the agent's terminal
		// does not reach k3s, which the agent stops in order.
		// Pdeathsig: k3s dies with the agent (a crash, a kill -9), so a
		// restarted agent never finds it running unsupervised; the PID
		// file catches what the signal cannot (the starting thread gone).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
		began := time.Now()
		err = start(cmd)
		logFile.Close()
		s.mu.Lock()
		s.starts++
		s.mu.Unlock()
		if err == nil {
			s.mu.Lock()
			s.runningSince = began
			s.mu.Unlock()
			s.Log.Info("k3s started", "pid", cmd.Process.Pid, "args", s.Args)
			s.recordPID(cmd.Process.Pid)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case <-ctx.Done():
				s.stop(cmd, exited)
				s.mu.Lock()
				s.runningSince = time.Time{}
				s.mu.Unlock()
				return nil
			case err = <-exited:
			}
			s.mu.Lock()
			s.runningSince = time.Time{}
			s.mu.Unlock()
			if err == nil {
				err = errors.New("exited")
			}
		}
		s.mu.Lock()
		s.lastExit = err
		s.mu.Unlock()
		if time.Since(began) >= stable {
			backoff = minB
		}
		s.Log.Warn("k3s stopped; restarting", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxB)
	}
}

// recordPID writes the running k3s's PID and binary to PIDFile.
func (s *Supervisor) recordPID(pid int) {
	if s.PIDFile == "" {
		return
	}
	if err := config.WriteFileAtomic(s.PIDFile, []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		s.Log.Error("k3s PID file", "err", err)
	}
}

// stopOrphan stops a k3s that a previous agent started and left running
// (its PID file names a live process of the same binary): SIGTERM to its
// process group, SIGKILL after StopTimeout. It waits until every thread
// of that k3s has ended (procexit says why /proc cannot tell): one started
// before that fails to bind the old one's ports. (The containerd k3s
// started is in its group and gets the signals, but is not waited for: a
// socket it still holds fails our first start, which the loop retries.)
func (s *Supervisor) stopOrphan() {
	if s.PIDFile == "" {
		return
	}
	data, err := os.ReadFile(s.PIDFile)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 1 {
		return
	}
	want, err := exec.LookPath(s.Bin)
	if err == nil {
		want, err = filepath.EvalSymlinks(want)
	}
	if err != nil {
		// Our binary cannot be named now (an upgrade replacing it): whose
		// the PID file's process is cannot be told. The file stays for
		// the next start; ours may fail to bind beside it, and retries.
		s.Log.Warn("the previous k3s cannot be identified: the k3s binary is not found; leaving its PID file", "bin", s.Bin, "err", err)
		return
	}
	old, err := openProcess(pid)
	switch {
	case errors.Is(err, unix.ESRCH):
		_ = os.Remove(s.PIDFile) // no such process
		return
	case err != nil:
		// No pidfd (out of descriptors, a seccomp filter, an old kernel):
		// /proc and signals by number, as before pidfds.
		s.Log.Warn("no pidfd for the previous k3s; stopping it by its number", "pid", pid, "err", err)
		s.stopOrphanByNumber(pid, want)
		return
	}
	defer old.Close()
	// Read after the handle is taken, and the handle still alive after
	// it: the number then still named the handle's process when /proc
	// was read (a process that ended and was reaped could have left its
	// number to another).
	if !runsBinary(pid, want) || old.Ended(0) {
		_ = os.Remove(s.PIDFile)
		return
	}
	s.Log.Warn("a k3s left running by a previous agent; stopping it before starting ours", "pid", pid)
	timeout := s.StopTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	if signalGroup(old, pid, syscall.SIGTERM); !old.Ended(timeout) {
		signalGroup(old, pid, syscall.SIGKILL)
		if !old.Ended(10 * time.Second) {
			s.Log.Error("the previous k3s did not end after SIGKILL; starting ours anyway", "pid", pid)
		} else {
			s.Log.Warn("the previous k3s did not stop in time; killed", "pid", pid)
		}
	}
	_ = os.Remove(s.PIDFile)
}

// openProcess is procexit.Open; tests make it fail as a seccomp filter
// or an exhausted descriptor table would.
var openProcess = procexit.Open

// signalGroup signals the k3s behind the handle, then its process group
// (its containerd) while the k3s lives: a process group's number is not
// reused while any member of it lives.
func signalGroup(p *procexit.Process, pgid int, sig syscall.Signal) {
	_ = p.Signal(sig)
	if !p.Ended(0) {
		_ = syscall.Kill(-pgid, sig)
	}
}

// stopOrphanByNumber is stopOrphan without a pidfd: the identity and the
// end read from /proc, the signals by number.
func (s *Supervisor) stopOrphanByNumber(pid int, want string) {
	if !runsBinary(pid, want) {
		_ = os.Remove(s.PIDFile)
		return
	}
	timeout := s.StopTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	for _, step := range []struct {
		sig    syscall.Signal
		within time.Duration
	}{{syscall.SIGTERM, timeout}, {syscall.SIGKILL, 10 * time.Second}} {
		_ = syscall.Kill(-pid, step.sig)
		for deadline := time.Now().Add(step.within); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if threadGroupGone(pid) {
				_ = os.Remove(s.PIDFile)
				return
			}
		}
	}
	s.Log.Error("the previous k3s did not end after SIGKILL; starting ours anyway", "pid", pid)
	_ = os.Remove(s.PIDFile)
}

// threadGroupGone: pid has no thread left alive. A main thread that has
// ended is a zombie in /proc while its other threads run; they are
// listed under /proc/PID/task until they end too.
func threadGroupGone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z' {
		return false
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	return len(tasks) <= 1
}

// runsBinary says whether any thread of pid runs the binary exe: once the
// main thread has ended its exe link is gone, the other threads' are not.
// A binary replaced since the process started (an upgrade in place) reads
// "PATH (deleted)": still ours.
func runsBinary(pid int, exe string) bool {
	threads, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/exe", pid))
	for _, link := range append([]string{fmt.Sprintf("/proc/%d/exe", pid)}, threads...) {
		if got, err := os.Readlink(link); err == nil && strings.TrimSuffix(got, " (deleted)") == exe {
			return true
		}
	}
	return false
}

func (s *Supervisor) stop(cmd *exec.Cmd, exited <-chan error) {
	timeout := s.StopTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	if s.PIDFile != "" {
		defer func() { _ = os.Remove(s.PIDFile) }()
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		s.Log.Info("k3s stopped")
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-exited
		s.Log.Warn("k3s did not stop in time; killed", "after", timeout)
	}
}
