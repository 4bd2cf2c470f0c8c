package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
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

	mu       sync.Mutex
	starts   int
	lastExit error
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
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		began := time.Now()
		err = start(cmd)
		logFile.Close()
		s.mu.Lock()
		s.starts++
		s.mu.Unlock()
		if err == nil {
			s.Log.Info("k3s started", "pid", cmd.Process.Pid, "args", s.Args)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case <-ctx.Done():
				s.stop(cmd, exited)
				return nil
			case err = <-exited:
			}
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

func (s *Supervisor) stop(cmd *exec.Cmd, exited <-chan error) {
	timeout := s.StopTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
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
