package k3s

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// orphanHolderEnv makes this test binary a k3s left by a previous agent
// and caught mid-exit: it holds a listening port, ignores SIGTERM, and
// its main thread (the thread-group leader) ends while its other threads
// keep the port. /proc then shows the leader as a zombie with no exe link,
// yet the process still holds what k3s holds (its ports, its data).
const orphanHolderEnv = "SITECON_TEST_ORPHAN_HOLDER"

func init() {
	if os.Getenv(orphanHolderEnv) != "" {
		// main runs on the process's main thread only if locked in init.
		runtime.LockOSThread()
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(orphanHolderEnv) != "" {
		holdPortAfterMainThreadEnds()
	}
	os.Exit(m.Run())
}

func holdPortAfterMainThreadEnds() {
	signal.Ignore(syscall.SIGTERM)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	fmt.Println(l.Addr().String())
	// End the main thread alone (exit, not exit_group).
	_, _, _ = syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0)
}

// A k3s left by a previous agent is stopped, and the agent's own k3s
// starts only once every thread of the old one has ended: a k3s whose
// main thread has ended still holds its ports through its other threads,
// and a new k3s started then fails to bind them.
func TestOrphanIsStoppedToItsLastThreadBeforeOursStarts(t *testing.T) {
	dir := t.TempDir()
	orphan := exec.Command(os.Args[0], "-test.run=^$")
	orphan.Env = append(os.Environ(), orphanHolderEnv+"=1")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := orphan.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = orphan.Process.Kill(); _ = orphan.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSpace(line)
	if _, err := net.ResolveTCPAddr("tcp", addr); err != nil {
		t.Fatalf("orphan: %s", line)
	}
	waitFor(t, 10*time.Second, "the orphan's main thread ends", func() bool { return processState(orphan.Process.Pid) == 'Z' })
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
