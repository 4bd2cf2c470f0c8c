// Package procexit stops a process that is not this process's child (one
// named by a PID file) and says when it has really ended.
//
// /proc is not enough for that: once a process's main thread has ended,
// /proc shows it as a zombie without a command line or an exe link, while
// its other threads still hold its ports, its files and its locks; a
// process started then on the same ports fails to bind them. A pidfd
// polls readable only once the whole thread group has ended, and a signal
// sent through it cannot reach a process that has since reused the PID.
package procexit

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// Process is a pidfd: a handle on one process, valid while open.
type Process struct{ fd int }

// Open takes a handle on pid; an error if no such process exists. Check
// the process's identity (its command line or exe) after Open, so the
// handle is known to be that process.
func Open(pid int) (*Process, error) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, err
	}
	return &Process{fd: fd}, nil
}

// Close releases the handle.
func (p *Process) Close() { _ = unix.Close(p.fd) }

// Signal sends sig to the process (not to a process that reused its PID).
func (p *Process) Signal(sig unix.Signal) error {
	return unix.PidfdSendSignal(p.fd, sig, nil, 0)
}

// Ended waits up to within for every thread of the process to end, and
// says whether they have.
func (p *Process) Ended(within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		left := max(time.Until(deadline), 0)
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds()))
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return false
		case n > 0:
			return true
		case left == 0:
			return false
		}
	}
}
