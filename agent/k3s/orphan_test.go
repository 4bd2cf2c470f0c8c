package k3s

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sitecon/sitecon/test/threadholder"
)

func TestMain(m *testing.M) {
	threadholder.RunIfHolder()
	os.Exit(m.Run())
}

// A k3s left by a previous agent is stopped, and the agent's own k3s
// starts only once every thread of the old one has ended: a k3s whose
// main thread has ended still holds its ports through its other threads,
// and a new k3s started then fails to bind them.
func TestOrphanIsStoppedToItsLastThreadBeforeOursStarts(t *testing.T) {
	dir := t.TempDir()
	// A k3s caught mid-exit: its main thread has ended, its other threads
	// hold a port.
	orphan, addr := threadholder.Start(t, &syscall.SysProcAttr{Setpgid: true})
	pidFile := filepath.Join(dir, "k3s.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(orphan.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}

	portHeldAtStart := make(chan error, 1)
	s := &Supervisor{Bin: os.Args[0], LogFile: filepath.Join(dir, "log"), PIDFile: pidFile,
		Log: testLogger(), StopTimeout: 200 * time.Millisecond,
		// Ours: a sleep, started once the orphan is taken care of.
		Start: func(c *exec.Cmd) error {
			l, err := net.Listen("tcp", addr)
			if err == nil {
				_ = l.Close()
			}
			select {
			case portHeldAtStart <- err:
			default:
			}
			sleep, err := exec.LookPath("sleep")
			if err != nil {
				return err
			}
			c.Path, c.Args = sleep, []string{"sleep", "600"}
			return c.Start()
		}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case err := <-portHeldAtStart:
		if err != nil {
			t.Fatalf("our k3s started while the orphan still held its port: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("our k3s did not start")
	}
}

// processState is the state letter in /proc/PID/stat (0: no such process).
func processState(pid int) byte {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	return data[i+2]
}

// alive: the process exists and is not a zombie waiting for its reaper.
func alive(pid int) bool {
	st := processState(pid)
	return st != 0 && st != 'Z'
}
