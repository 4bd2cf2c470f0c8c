package agent

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/localapi"

	"k8s.io/apimachinery/pkg/util/wait"
)

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, within, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("%s: not within %s", what, within)
	}
}

// One agent per node: a second one started on the same socket says another
// runs and leaves the first one's socket alone.
func TestSecondAgentRefusedFirstKeepsItsSocket(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "agent.sock")
	opts := Options{ConfigPath: filepath.Join(dir, "cluster.json"), SocketPath: socket, ConfigPollInterval: 50 * time.Millisecond}
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() { first <- New(opts).Run(ctx) }()
	defer func() { cancel(); <-first }()
	waitFor(t, 10*time.Second, "the first agent's socket answers", func() bool {
		_, err := localapi.Get[State](ctx, socket, localapi.PathAgent)
		return err == nil
	})
	second := make(chan error, 1)
	go func() { second <- New(opts).Run(ctx) }()
	select {
	case err := <-second:
		if err == nil || !strings.Contains(err.Error(), "another sitecon agent already runs") || !strings.Contains(err.Error(), strconv.Itoa(os.Getpid())) {
			t.Fatalf("second agent: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a second agent on the same socket ran")
	}
	if _, err := localapi.Get[State](ctx, socket, localapi.PathAgent); err != nil {
		t.Fatalf("the first agent's socket no longer answers: %v", err)
	}
}

// Metrics are a side service: their port taken stops nothing; they are
// served once it is free, and the state says why until then.
func TestMetricsPortTakenStopsNothing(t *testing.T) {
	dir := t.TempDir()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := taken.Addr().String()
	socket := filepath.Join(dir, "agent.sock")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- New(Options{ConfigPath: filepath.Join(dir, "cluster.json"), SocketPath: socket, MetricsAddr: addr,
			ConfigPollInterval: 50 * time.Millisecond, SeedBackoffMin: 20 * time.Millisecond, SeedBackoffMax: 100 * time.Millisecond}).Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	var st State
	waitFor(t, 10*time.Second, "the agent reports the metrics port taken", func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the agent stopped because its metrics port was taken: %v", err)
		default:
		}
		st, err = localapi.Get[State](ctx, socket, localapi.PathAgent)
		return err == nil && strings.Contains(st.MetricsError, "address already in use")
	})
	taken.Close()
	waitFor(t, 10*time.Second, "metrics served once the port is free", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(body), "sitecon_")
	})
	waitFor(t, 5*time.Second, "the metrics error cleared", func() bool {
		st, err = localapi.Get[State](ctx, socket, localapi.PathAgent)
		return err == nil && st.MetricsError == ""
	})
}

// Reading an agent's socket again and again (sitecon status --watch, the
// console) reuses one connection instead of leaving one behind per read.
func TestLocalReadsReuseOneClient(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "agent.sock")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- New(Options{ConfigPath: filepath.Join(dir, "cluster.json"), SocketPath: socket, ConfigPollInterval: 50 * time.Millisecond}).Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, 10*time.Second, "the socket answers", func() bool {
		_, err := localapi.Get[State](ctx, socket, localapi.PathAgent)
		return err == nil
	})
	openFDs := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	before := openFDs()
	for range 100 {
		if _, err := localapi.Get[State](ctx, socket, localapi.PathAgent); err != nil {
			t.Fatal(err)
		}
	}
	if grown := openFDs() - before; grown > 4 {
		t.Fatalf("100 reads of the agent's socket left %d more file descriptors open", grown)
	}
}
