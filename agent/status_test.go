package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/localapi"
)

func TestStatusHandler(t *testing.T) {
	member := false
	h := StatusHandler("7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", func() bool { return member })
	get := func(method string) (*http.Response, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, "/status", strings.NewReader("ignored body")))
		return rec.Result(), rec.Body.String()
	}
	if resp, body := get(http.MethodGet); resp.StatusCode != 200 || body != "" {
		t.Errorf("not a member: %d %q, want 200 and an empty body", resp.StatusCode, body)
	}
	member = true
	if resp, body := get(http.MethodGet); resp.StatusCode != 200 || body != "cluster:7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60" {
		t.Errorf("member: %d %q", resp.StatusCode, body)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		if resp, _ := get(m); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" {
			t.Errorf("%s: %d, want 405 with Allow: GET", m, resp.StatusCode)
		}
	}
	srv := localapi.NewServer(h)
	if srv.ReadHeaderTimeout == 0 || srv.IdleTimeout == 0 {
		t.Error("the status server needs read-header and idle timeouts")
	}
}

// seedAt fakes a seed: /status answers body, its agent vouches for the
// cluster's CA, 6443 serves that CA, over TLS if tlsOK. The joiner holds a
// formation's token (no pin).
func seedAt(t *testing.T, body string, tlsOK bool) SeedProbe {
	t.Helper()
	const clusterID = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	ca := []byte("the cluster's CA")
	paths := K3sPaths{DataDir: t.TempDir()}
	if err := config.WriteFileAtomic(filepath.Join(paths.DataDir, "server", "tls", "server-ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := config.NewLifeKey(clusterID, testPassword)
	if err != nil {
		t.Fatal(err)
	}
	status := httptest.NewServer(withCAProof(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }), key, "node-a", paths))
	t.Cleanup(status.Close)
	cacerts := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cacerts" {
			_, _ = w.Write(ca)
		}
	})
	var api *httptest.Server
	if tlsOK {
		api = httptest.NewTLSServer(cacerts)
	} else {
		api = httptest.NewServer(cacerts)
	}
	t.Cleanup(api.Close)
	return SeedProbe{
		JoinIP: netip.MustParseAddr("10.244.244.1"), ClusterID: clusterID, Token: testPassword,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			target := map[string]string{"10.244.244.1:12346": status.Listener.Addr().String(), "10.244.244.1:6443": api.Listener.Addr().String()}[addr]
			return (&net.Dialer{}).DialContext(ctx, network, target)
		},
		Timeout: 2 * time.Second,
	}
}

func TestSeedProbe(t *testing.T) {
	ctx := context.Background()
	if err := seedAt(t, "cluster:7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", true).Check(ctx); err != nil {
		t.Errorf("ready seed: %v", err)
	}
	err := seedAt(t, "cluster:00000000-0000-4000-8000-000000000000", true).Check(ctx)
	if !errors.Is(err, ErrForeignCluster) {
		t.Errorf("foreign seed: %v, want ErrForeignCluster", err)
	}
	if err := seedAt(t, "", true).Check(ctx); err == nil || errors.Is(err, ErrForeignCluster) || !strings.Contains(err.Error(), "not a cluster member yet") {
		t.Errorf("empty /status: %v", err)
	}
	if err := seedAt(t, "cluster:7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", false).Check(ctx); err == nil || !strings.Contains(err.Error(), "/cacerts") {
		t.Errorf("6443 without TLS: %v", err)
	}
}

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
