package statusserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/test/netns"
)

// joinLAN is a seed's address and a joiner's on one cluster LAN, each in
// a network namespace of its own.
func joinLAN(t *testing.T) (seed, joiner *netns.Host) {
	t.Helper()
	hosts := netns.NewLAN(t, "seed", "joiner")
	for i, h := range hosts {
		if out, err := h.Exec("ip", "addr", "add", netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, 244, byte(i + 1)}), 28).String(), "dev", netns.Interface); err != nil {
			t.Fatalf("%s: %v: %s", h.Name, err, out)
		}
	}
	return hosts[0], hosts[1]
}

// serveAt serves h on addr inside host's namespace until the test ends;
// with ca, over TLS with its serving certificate.
func serveAt(t *testing.T, host *netns.Host, addr string, h http.Handler, ca *agenttest.CA) {
	t.Helper()
	var l net.Listener
	if err := host.Do(func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	if ca != nil {
		l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{ca.Cert}})
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// apiServerServing answers like k3s's API server port: /cacerts to anyone.
func apiServerServing(ca agenttest.CA) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/cacerts", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(ca.PEM) })
	return mux
}

// A joiner holding a formation's token (the password alone: no cluster CA
// existed when it was made) meets an impostor at the seed's address: a
// server that answers /status with the cluster's id (anyone on the LAN can)
// and serves another CA on 6443. It must not take it for the seed: the
// joiner would give it the cluster token and trust its CA.
func TestJoinerWithAFormationTokenRefusesAnImpostorSeed(t *testing.T) {
	seedHost, joiner := joinLAN(t)
	plan, err := formation.Plan(formation.FormRequest{ClusterName: "site1", Interface: netns.Interface,
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	impostorCA := agenttest.NewCA(t, "impostor")
	serveAt(t, seedHost, "10.244.244.1:12346", Handler(plan.ClusterID, func() bool { return true }), nil)
	serveAt(t, seedHost, "10.244.244.1:6443", apiServerServing(impostorCA), &impostorCA)

	probe := formation.SeedProbe{JoinIP: netip.MustParseAddr("10.244.244.1"), ClusterID: plan.ClusterID,
		Dial: joiner.DialContext, Timeout: 2 * time.Second, Token: plan.Nodes[1].Token.Reveal()}
	if err := probe.Check(context.Background()); err == nil {
		t.Fatalf("a joiner with the formation's token took an impostor at the seed's address (its /status says cluster:%s, its CA is another) for the seed", plan.ClusterID)
	} else if !errors.Is(err, formation.ErrCAUnverified) || !strings.Contains(err.Error(), "10.244.244.1") {
		t.Errorf("the refusal: %v, want ErrCAUnverified naming the seed's address", err)
	}
}

// seedServers serves, in the seed's namespace, /status and the agent's
// routes as a bring-up does (agent/bringup's serveStatus: the CA vouched
// for with key from the k3s data at paths), and an API server port
// serving served.
func seedServers(t *testing.T, host *netns.Host, clusterID string, key config.LifeKey, paths k3s.Paths, served agenttest.CA) {
	t.Helper()
	status := WithCAProof(WithLifeProof(Handler(clusterID, func() bool { return true }), key, "node-a", nil), key, "node-a", paths)
	serveAt(t, host, "10.244.244.1:12346", status, nil)
	serveAt(t, host, "10.244.244.1:6443", apiServerServing(served), &served)
}

// The seed's agent vouches, with the cluster key, for the CA its k3s made:
// a joiner with the formation's token verifies /cacerts against it and
// learns the hash k3s's token is to pin. The same joiner refuses an API
// server serving another CA even when the real agent vouches (a relay), an
// agent of another cluster (another key), and a seed with no CA yet; only
// --join-unverified-ca lets an unvouched CA through, never a mismatch.
func TestJoinerPinsTheCAItsSeedVouchesFor(t *testing.T) {
	seedHost, joiner := joinLAN(t)
	plan, err := formation.Plan(formation.FormRequest{ClusterName: "site1", Interface: netns.Interface,
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	key, err := config.NewLifeKey(plan.ClusterID, plan.Token)
	if err != nil {
		t.Fatal(err)
	}
	clusterCA, otherCA := agenttest.NewCA(t, "site1"), agenttest.NewCA(t, "impostor")
	paths := k3s.Paths{DataDir: filepath.Join(t.TempDir(), "k3s-data")}
	ctx := context.Background()
	var logged bytes.Buffer
	probe := formation.SeedProbe{JoinIP: netip.MustParseAddr("10.244.244.1"), ClusterID: plan.ClusterID,
		Dial: joiner.DialContext, Timeout: 2 * time.Second, Token: plan.Nodes[1].Token.Reveal(),
		Log: slog.New(slog.NewTextHandler(&logged, nil))}

	t.Run("no CA yet", func(t *testing.T) {
		seedServers(t, seedHost, plan.ClusterID, key, paths, clusterCA)
		_, err := probe.Verify(ctx)
		if err == nil || errors.Is(err, formation.ErrCAUnverified) || !strings.Contains(err.Error(), "cannot vouch for the cluster's CA yet") {
			t.Fatalf("a seed whose k3s has no CA yet: %v, want a reason to wait", err)
		}
	})
	if err := config.WriteFileAtomic(filepath.Join(paths.DataDir, "server", "tls", "server-ca.crt"), clusterCA.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("the seed", func(t *testing.T) {
		seedServers(t, seedHost, plan.ClusterID, key, paths, clusterCA)
		pin, err := probe.Verify(ctx)
		if err != nil || pin != config.CAHash(clusterCA.PEM) {
			t.Fatalf("the real seed: pin %q, %v; want %s", pin, err, config.CAHash(clusterCA.PEM))
		}
	})
	t.Run("a relay", func(t *testing.T) {
		seedServers(t, seedHost, plan.ClusterID, key, paths, otherCA)
		if _, err := probe.Verify(ctx); !errors.Is(err, formation.ErrCAMismatch) || !errors.Is(err, formation.ErrForeignCluster) {
			t.Fatalf("the agent vouches for the cluster's CA, the API server serves another: %v, want ErrCAMismatch", err)
		}
		opted := probe
		opted.AllowUnverifiedCA = true
		if _, err := opted.Verify(ctx); !errors.Is(err, formation.ErrCAMismatch) {
			t.Fatalf("--join-unverified-ca let a CA through that differs from the vouched one: %v", err)
		}
	})
	t.Run("another cluster's agent", func(t *testing.T) {
		other, err := config.NewLifeKey(plan.ClusterID, config.Secret("another cluster's token, same id"))
		if err != nil {
			t.Fatal(err)
		}
		seedServers(t, seedHost, plan.ClusterID, other, paths, clusterCA)
		if _, err := probe.Verify(ctx); !errors.Is(err, formation.ErrCAUnverified) || !strings.Contains(err.Error(), "does not verify") {
			t.Fatalf("an agent proving with another key: %v, want ErrCAUnverified", err)
		}
		// The opt-out joins it, and says so in the log every time.
		opted := probe
		opted.AllowUnverifiedCA = true
		logged.Reset()
		if pin, err := opted.Verify(ctx); err != nil || pin != "" {
			t.Fatalf("--join-unverified-ca: pin %q, %v; want no pin and no error", pin, err)
		}
		if !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "unverified") {
			t.Errorf("--join-unverified-ca joined without a warning in the log: %q", logged.String())
		}
	})
}
