// Package threadholder makes a test binary stand in for a process caught
// mid-exit: its main thread (the thread-group leader) has ended, while its
// other threads still hold a listening port and ignore SIGTERM. /proc then
// shows the leader as a zombie with no command line and no exe link, yet
// the port is held: as a process looks while SIGKILL tears its threads
// down, or one whose main thread ended on its own. Tests of code that
// stops such processes (agent/procexit's users) start one with Start.
//
// A test package that uses it imports it (its init locks the main
// goroutine to the main thread when the binary runs as a holder) and
// calls RunIfHolder first thing in its TestMain. CopySleep gives a test a
// binary of its own to run under a name it chooses (or to replace under a
// running process).
package threadholder

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// env makes the test binary a holder.
const env = "SITECON_TEST_THREAD_HOLDER"

func init() {
	if os.Getenv(env) != "" {
		// main runs on the process's main thread only if locked in init.
		runtime.LockOSThread()
	}
}

// RunIfHolder turns this process into the holder when it was started as
// one, and never returns then; otherwise it returns at once.
func RunIfHolder() {
	if os.Getenv(env) == "" {
		return
	}
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
	// End the main thread alone (exit, not exit_group): the process lives
	// on in its other threads.
	_, _, _ = syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0)
}

// Start runs this test binary as a holder, with args after "--" on its
// command line (what the code under test identifies it by) and sys as its
// process attributes, and returns it and the address of the port it
// holds, once its main thread has ended. The holder is killed when the
// test ends.
func Start(t *testing.T, sys *syscall.SysProcAttr, args ...string) (*exec.Cmd, string) {
	t.Helper()
	holder := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	holder.Env = append(os.Environ(), env+"=1")
	holder.SysProcAttr = sys
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSpace(line)
	if _, err := net.ResolveTCPAddr("tcp", addr); err != nil {
		t.Fatalf("holder: %s", line)
	}
	// The main thread's exit follows its print at once.
	for deadline := time.Now().Add(10 * time.Second); !leaderEnded(holder.Process.Pid); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the holder's main thread did not end")
		}
	}
	return holder, addr
}

// leaderEnded: /proc shows pid's main thread as a zombie.
func leaderEnded(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// CopySleep puts a copy of sleep at path, replacing what is there by a
// rename (as an upgrade replaces a binary under a running process): a
// real binary of the test's own, to run under a name of its choosing.
func CopySleep(t *testing.T, path string) {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
