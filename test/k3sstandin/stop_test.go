package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// memberHolderEnv makes this test binary a stand-in for an etcd member
// caught mid-exit: it holds a listening port, ignores SIGTERM, and its
// main thread (the thread-group leader) exits while the others keep the
// port. /proc then shows the leader as a zombie with no command line, yet
// the port is still held: as a member killed with SIGKILL looks while
// its threads are still being torn down.
const memberHolderEnv = "K3SSTANDIN_MEMBER_HOLDER"

func init() {
	if os.Getenv(memberHolderEnv) != "" {
		// main runs on the process's main thread only if locked in init.
		runtime.LockOSThread()
	}
}

func TestMain(m *testing.M) {
	if os.Getenv(memberHolderEnv) != "" {
		holdMemberPort()
	}
	os.Exit(m.Run())
}

func holdMemberPort() {
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

// stopRunning returns only once the member has let go of what it held:
// every thread of it gone, not only its main thread. The stand-in then
// starts the member again on the same ports and data; one started while
// the old one's threads still held them exited at once (the bootstrap
// power-cut test saw a joiner's k3s start twice on first boot).
func TestStopRunningWaitsForEveryThreadOfTheMember(t *testing.T) {
	memberData := filepath.Join(t.TempDir(), "member")
	holder := exec.Command(os.Args[0], "-test.run=^$", "--", "--data-dir="+memberData)
	holder.Env = append(os.Environ(), memberHolderEnv+"=1")
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
	addr := line[:len(line)-1]
	if _, err := net.ResolveTCPAddr("tcp", addr); err != nil {
		t.Fatalf("holder: %s", line)
	}
	pidFile := filepath.Join(t.TempDir(), "member.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(holder.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Wait until the holder's main thread has ended (its /proc entry a
	// zombie leader) while the port is held: the case to get right.
	deadline := time.Now().Add(10 * time.Second)
	for !leaderEnded(holder.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("the holder's main thread did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}

	stopRunning(pidFile, memberData, 200*time.Millisecond)

	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("stopRunning returned while the member still held its port: %v", err)
	}
	_ = l.Close()
}

func leaderEnded(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' {
			return i+2 < len(stat) && stat[i+2] == 'Z'
		}
	}
	return false
}
