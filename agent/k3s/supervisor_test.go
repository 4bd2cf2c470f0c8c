package k3s

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestSupervisorRestartsWithBackoffAndStopsCleanly(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	// The gaps between starts double from MinBackoff and stop at
	// MaxBackoff: 100, 200, 400, 400, 400, 400 ms. Each gap is at least its
	// backoff (plus the run of a shell that exits at once); a backoff that
	// did not grow shows in the second and third, one that was not capped
	// in the fourth on (800, 1600, 3200 ms uncapped).
	const minB, maxB = 100 * time.Millisecond, 400 * time.Millisecond
	want := []time.Duration{minB, 2 * minB, maxB, maxB, maxB, maxB}
	var mu sync.Mutex
	var starts []time.Time
	crashing := &Supervisor{Bin: "/bin/sh", Args: []string{"-c", "exit 3"},
		LogFile: filepath.Join(dir, "log"), Log: log, MinBackoff: minB, MaxBackoff: maxB,
		Start: func(c *exec.Cmd) error {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			return c.Start()
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- crashing.Run(ctx) }()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		n, _ := crashing.Stats()
		return n >= len(want)+1, nil
	})
	cancel()
	if err != nil {
		n, _ := crashing.Stats()
		t.Fatalf("a crashing k3s was started %d times in 30 s, want %d", n, len(want)+1)
	}
	<-done
	if _, last := crashing.Stats(); last == nil || !strings.Contains(last.Error(), "exit status 3") {
		t.Errorf("last exit = %v", last)
	}
	mu.Lock()
	var gaps []time.Duration
	for i := 1; i < len(starts); i++ {
		gaps = append(gaps, starts[i].Sub(starts[i-1]))
	}
	mu.Unlock()
	for i, w := range want {
		// At least the backoff; under twice the cap (a loaded machine's
		// slack, well short of an uncapped doubling).
		if gaps[i] < w || gaps[i] >= 2*maxB {
			t.Errorf("gap %d between restarts = %s, want %s (at least, and under %s); all gaps %v", i+1, gaps[i], w, 2*maxB, gaps[:len(want)])
		}
	}

	// A running k3s gets SIGTERM on shutdown and its output reaches the log.
	running := &Supervisor{Bin: "/bin/sh", Args: []string{"-c", "trap 'echo stopping; exit 0' TERM; echo up; while :; do sleep 0.05; done"},
		LogFile: filepath.Join(dir, "k3s.log"), Log: log, StopTimeout: 5 * time.Second}
	ctx, cancel = context.WithCancel(context.Background())
	go func() { done <- running.Run(ctx) }()
	err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(running.LogFile)
		return strings.Contains(string(data), "up"), nil
	})
	if err != nil {
		t.Fatal("k3s output not captured")
	}
	cancel()
	<-done
	if data, _ := os.ReadFile(running.LogFile); !strings.Contains(string(data), "stopping") {
		t.Errorf("k3s was not stopped with SIGTERM: %q", data)
	}
	if starts, _ := running.Stats(); starts != 1 {
		t.Errorf("a healthy k3s was started %d times", starts)
	}
}

// helperSupervisorEnv makes this test binary a stand-in agent process that
// supervises a "k3s" (sleep) until it is killed.
const helperSupervisorEnv = "SITECON_TEST_SUPERVISOR_PIDFILE"

func TestHelperSupervisorProcess(t *testing.T) {
	pidFile := os.Getenv(helperSupervisorEnv)
	if pidFile == "" {
		return // run only as the helper process of the test below
	}
	s := &Supervisor{Bin: "sleep", Args: []string{"600"}, LogFile: pidFile + ".log", PIDFile: pidFile, Log: testLogger()}
	_ = s.Run(context.Background())
}

func testLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// An agent killed hard (a crash, kill -9) takes its k3s with it; and a k3s
// found running from before (its PID file names a live k3s) is stopped
// before a new one starts: one node, one k3s.
func TestK3sDiesWithItsAgentAndAnOrphanIsStopped(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "k3s.pid")
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperSupervisorProcess$")
	helper.Env = append(os.Environ(), helperSupervisorEnv+"="+pidFile)
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	var k3sPID int
	waitFor(t, 10*time.Second, "the helper agent starts its k3s", func() bool {
		data, err := os.ReadFile(pidFile)
		k3sPID, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil && alive(k3sPID)
	})
	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	waitFor(t, 10*time.Second, fmt.Sprintf("k3s (pid %d) dies with its agent", k3sPID), func() bool { return !alive(k3sPID) })

	// A k3s the signal did not reach: running, named by the PID file.
	orphan := exec.Command("sleep", "600")
	orphan.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	orphanDone := make(chan struct{})
	go func() { _ = orphan.Wait(); close(orphanDone) }()
	defer func() { _ = orphan.Process.Kill() }()
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(orphan.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Supervisor{Bin: "sleep", Args: []string{"601"}, LogFile: filepath.Join(dir, "log"), PIDFile: pidFile,
		Log: testLogger(), StopTimeout: 5 * time.Second}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-orphanDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the orphaned k3s named by the PID file was not stopped")
	}
	waitFor(t, 10*time.Second, "our own k3s starts and is recorded", func() bool {
		starts, _ := s.Stats()
		data, _ := os.ReadFile(pidFile)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		return starts == 1 && pid != orphan.Process.Pid && alive(pid)
	})
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, within, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: not within %s", what, within)
	}
}
