package statusserver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
	"github.com/sitecon/sitecon/agent/k3s"
)

// seedAt fakes a seed: /status answers body, its agent vouches for the
// cluster's CA, 6443 serves that CA, over TLS if tlsOK. The joiner holds a
// formation's token (no pin).
func seedAt(t *testing.T, body string, tlsOK bool) formation.SeedProbe {
	t.Helper()
	const clusterID = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	ca := []byte("the cluster's CA")
	paths := k3s.Paths{DataDir: t.TempDir()}
	if err := config.WriteFileAtomic(filepath.Join(paths.DataDir, "server", "tls", "server-ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := config.NewLifeKey(clusterID, agenttest.TokenPassword)
	if err != nil {
		t.Fatal(err)
	}
	status := httptest.NewServer(WithCAProof(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) }), key, "node-a", paths))
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
	return formation.SeedProbe{
		JoinIP: netip.MustParseAddr("10.244.244.1"), ClusterID: clusterID, Token: agenttest.TokenPassword,
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
	if !errors.Is(err, formation.ErrForeignCluster) {
		t.Errorf("foreign seed: %v, want formation.ErrForeignCluster", err)
	}
	if err := seedAt(t, "", true).Check(ctx); err == nil || errors.Is(err, formation.ErrForeignCluster) || !strings.Contains(err.Error(), "not a cluster member yet") {
		t.Errorf("empty /status: %v", err)
	}
	if err := seedAt(t, "cluster:7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", false).Check(ctx); err == nil || !strings.Contains(err.Error(), "/cacerts") {
		t.Errorf("6443 without TLS: %v", err)
	}
}
