package cmd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A write to a connection its peer has closed (k3s restarting under the
// agent, an API server going away under the console) raises SIGPIPE. It
// says nothing about the terminal and must not stop the agent or the
// console: the agent exited with status 0 this way right after it
// restarted k3s (sitebox's bootstrap-mode power cut).
func TestBrokenConnectionDoesNotEndTheCommand(t *testing.T) {
	ctx, stop := signalContext(context.Background())
	defer stop()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	// The peer goes with a reset: the next writes fail with EPIPE.
	_ = peer.(*net.TCPConn).SetLinger(0)
	peer.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := conn.Write([]byte("x"))
		if errors.Is(err, syscall.EPIPE) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no EPIPE from a write to a closed connection; last error %v", err)
		}
	}
	// A signal is delivered asynchronously: give it the time a real one
	// takes to arrive, as a bounded wait on the context.
	select {
	case <-ctx.Done():
		t.Fatalf("a broken connection ended the command: %v", context.Cause(ctx))
	case <-time.After(500 * time.Millisecond):
	}
}

// The signals that do mean "stop" still end it: a SIGTERM (init stopping
// the agent), with the signal as the cause.
func TestTerminationSignalEndsTheCommand(t *testing.T) {
	ctx, stop := signalContext(context.Background())
	defer stop()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
		var ie interruptedError
		if !errors.As(context.Cause(ctx), &ie) || ie.sig != syscall.SIGTERM {
			t.Errorf("cause %v, want interrupted by SIGTERM", context.Cause(ctx))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM did not end the command within 5 s")
	}
}

// The same mechanism must not reach the agent's children: an ignored
// SIGPIPE (SIG_IGN) is inherited across exec, by k3s and the containers it
// starts, where a program writing into a closed pipe would no longer stop.
// A caught one is reset to the default in the child.
func TestChildrenKeepTheDefaultSIGPIPE(t *testing.T) {
	_, stop := signalContext(context.Background())
	defer stop()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if hex, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			if mask&(1<<(uint(syscall.SIGPIPE)-1)) != 0 {
				t.Errorf("the child ignores SIGPIPE (SigIgn %s)", strings.TrimSpace(hex))
			}
			return
		}
	}
	t.Fatalf("no SigIgn line in the child's status:\n%s", status)
}
