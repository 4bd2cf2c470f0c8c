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

	"golang.org/x/sys/unix"

	"github.com/sitecon/sitecon/agent/procexit"
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

// startOrphan starts bin (a k3s left by a previous agent) in its own
// process group, names it in pidFile, and returns a channel closed when
// it has ended.
func startOrphan(t *testing.T, bin, pidFile string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	orphan := exec.Command(bin, "600")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = orphan.Wait(); close(done) }()
	t.Cleanup(func() { _ = orphan.Process.Kill(); <-done })
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(orphan.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	return orphan, done
}

// runSupervisor runs s until the test ends and waits for its own k3s to
// start.
func runSupervisor(t *testing.T, s *Supervisor) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 20*time.Second, "our own k3s starts", func() bool {
		starts, _ := s.Stats()
		return starts >= 1
	})
}

// The orphan is ours even after its binary was replaced in place (an
// upgrade: /proc/PID/exe then reads "PATH (deleted)"); a process of
// another binary named by the PID file (its number reused) is left alone;
// and without pidfds (a seccomp filter, an exhausted descriptor table)
// the orphan is still stopped, by its number.
func TestOrphanIdentity(t *testing.T) {
	t.Run("upgraded in place", func(t *testing.T) {
		dir := t.TempDir()
		bin, pidFile := filepath.Join(dir, "k3s"), filepath.Join(dir, "k3s.pid")
		threadholder.CopySleep(t, bin)
		orphan, done := startOrphan(t, bin, pidFile)
		threadholder.CopySleep(t, bin) // the upgrade
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", orphan.Process.Pid)); !strings.HasSuffix(exe, " (deleted)") {
			t.Fatalf("the orphan's exe after the upgrade: %q", exe)
		}
		runSupervisor(t, &Supervisor{Bin: bin, Args: []string{"601"}, LogFile: filepath.Join(dir, "log"), PIDFile: pidFile,
			Log: testLogger(), StopTimeout: 2 * time.Second})
		select {
		case <-done:
		default:
			t.Fatal("our k3s started while the upgraded-in-place orphan still runs")
		}
	})
	t.Run("another binary", func(t *testing.T) {
		dir := t.TempDir()
		bin, pidFile := filepath.Join(dir, "k3s"), filepath.Join(dir, "k3s.pid")
		threadholder.CopySleep(t, bin)
		sleep, err := exec.LookPath("sleep")
		if err != nil {
			t.Fatal(err)
		}
		other, done := startOrphan(t, sleep, pidFile)
		runSupervisor(t, &Supervisor{Bin: bin, Args: []string{"601"}, LogFile: filepath.Join(dir, "log"), PIDFile: pidFile,
			Log: testLogger(), StopTimeout: 2 * time.Second})
		select {
		case <-done:
			t.Fatalf("a process of another binary (pid %d) named by the PID file was stopped", other.Process.Pid)
		default:
		}
	})
	t.Run("no pidfd", func(t *testing.T) {
		openProcess = func(int) (*procexit.Process, error) { return nil, unix.EMFILE }
		t.Cleanup(func() { openProcess = procexit.Open })
		dir := t.TempDir()
		pidFile := filepath.Join(dir, "k3s.pid")
		// The hard case: a main thread ended, the port held by the rest.
		orphan, addr := threadholder.Start(t, &syscall.SysProcAttr{Setpgid: true})
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(orphan.Process.Pid)), 0o600); err != nil {
			t.Fatal(err)
		}
		var held error
		runSupervisor(t, &Supervisor{Bin: os.Args[0], LogFile: filepath.Join(dir, "log"), PIDFile: pidFile,
			Log: testLogger(), StopTimeout: 200 * time.Millisecond,
			Start: func(c *exec.Cmd) error {
				l, err := net.Listen("tcp", addr)
				if err == nil {
					_ = l.Close()
				}
				held = err
				sleep, err := exec.LookPath("sleep")
				if err != nil {
					return err
				}
				c.Path, c.Args = sleep, []string{"sleep", "600"}
				return c.Start()
			}})
		if held != nil {
			t.Fatalf("without a pidfd our k3s started while the orphan still held its port: %v", held)
		}
	})
}
