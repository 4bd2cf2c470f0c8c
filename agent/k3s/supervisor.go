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
// process group, SIGKILL after StopTimeout. It returns only once every
// thread of that k3s has ended (procexit says why /proc cannot tell):
// one started before that fails to bind the old one's ports.
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
	old, err := procexit.Open(pid)
	if err != nil {
		_ = os.Remove(s.PIDFile) // no such process
		return
	}
	defer old.Close()
	// A PID is reused: only a process running our binary is ours. Checked
	// after the handle is taken, so the handle is that process.
	want, werr := exec.LookPath(s.Bin)
	if werr == nil {
		want, werr = filepath.EvalSymlinks(want)
	}
	if werr != nil || !runsBinary(pid, want) {
		_ = os.Remove(s.PIDFile)
		return
	}
	s.Log.Warn("a k3s left running by a previous agent; stopping it before starting ours", "pid", pid)
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	timeout := s.StopTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	if !old.Ended(timeout) {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		if !old.Ended(10 * time.Second) {
			s.Log.Error("the previous k3s did not end after SIGKILL; starting ours anyway", "pid", pid)
		} else {
			s.Log.Warn("the previous k3s did not stop in time; killed", "pid", pid)
		}
	}
	_ = os.Remove(s.PIDFile)
}

// runsBinary says whether any thread of pid runs the binary exe: once the
// main thread has ended its exe link is gone, the other threads' are not.
func runsBinary(pid int, exe string) bool {
	threads, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/exe", pid))
	for _, link := range append([]string{fmt.Sprintf("/proc/%d/exe", pid)}, threads...) {
		if got, err := os.Readlink(link); err == nil && got == exe {
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
