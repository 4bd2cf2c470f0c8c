package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockInstance makes sure one agent runs per node (per socket, or per
// config file without one): a second agent would take the first one's
// socket and start a second k3s. The lock is an flock, so it goes with the
// process however it ends.
func (a *Agent) lockInstance() (func(), error) {
	path := a.opts.SocketPath
	if path == "" {
		path = a.opts.ConfigPath
	}
	if path == "" {
		return func() {}, nil
	}
	path += ".lock"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agent lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("another sitecon agent already runs here (lock %s held by pid %s): stop it first",
			path, strings.TrimSpace(string(holder)))
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}
