package formation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
	"github.com/sitecon/sitecon/agent/k3s"
)

func TestSecureTokenForm(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----\nsitebox\n-----END CERTIFICATE-----\n")
	sum := sha256.Sum256(ca)
	secure := config.SecureToken(agenttest.TokenPassword, ca)
	if want := "K10" + hex.EncodeToString(sum[:]) + "::server:" + agenttest.TokenPassword; secure != want {
		t.Fatalf("SecureToken = %q, want %q", secure, want)
	}
	if pin, pw := config.ParseToken(secure); pin != hex.EncodeToString(sum[:]) || pw != agenttest.TokenPassword {
		t.Fatalf("ParseToken(secure) = %q, %q", pin, pw)
	}
	// Made again from a secure token: the password stays, the pin follows the CA.
	if again := config.SecureToken(secure, ca); again != secure {
		t.Fatalf("SecureToken of a secure token = %q", again)
	}
	for _, short := range []string{agenttest.TokenPassword, "K10nothex::server:x", "K10" + strings.Repeat("a", 64)} {
		if pin, pw := config.ParseToken(short); pin != "" || pw != short {
			t.Errorf("ParseToken(%q) = %q, %q: want no pin and the token itself", short, pin, pw)
		}
	}
}

// A bundle made where the cluster's CA is on disk pins it; where none
// exists yet (formation), it carries the token as it is.
func TestBundleToken(t *testing.T) {
	paths := k3s.Paths{DataDir: t.TempDir()}
	got, pinned, err := BundleToken(config.Secret(agenttest.TokenPassword), paths)
	if err != nil || pinned || got.Reveal() != agenttest.TokenPassword {
		t.Fatalf("without a CA: %v %v %v", got.Reveal(), pinned, err)
	}
	ca := []byte("the cluster CA")
	if err := config.WriteFileAtomic(filepath.Join(paths.DataDir, "server", "tls", "server-ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	got, pinned, err = BundleToken(config.Secret(agenttest.TokenPassword), paths)
	if err != nil || !pinned || got.Reveal() != config.SecureToken(agenttest.TokenPassword, ca) {
		t.Fatalf("with a CA: %v %v %v", got.Reveal(), pinned, err)
	}
	// A secure token passes the config's entropy check on its password.
	v, err := config.Validate(agenttest.Config(), agenttest.Env(got.Reveal()))
	if err != nil || v.Token.Reveal() != got.Reveal() {
		t.Fatalf("a secure token file is refused: %v", err)
	}
}

// A joiner whose token pins the cluster's CA never joins a server that
// serves another CA, whatever its /status says.
func TestSeedProbeChecksThePinnedCA(t *testing.T) {
	const clusterID = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	status := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "cluster:"+clusterID) }))
	t.Cleanup(status.Close)
	servedCA := []byte("the CA this server serves")
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/cacerts" {
			_, _ = w.Write(servedCA)
		}
	}))
	t.Cleanup(api.Close)
	probe := SeedProbe{
		JoinIP: netip.MustParseAddr("10.244.244.1"), ClusterID: clusterID, Timeout: 2 * time.Second,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			target := map[string]string{"10.244.244.1:12346": status.Listener.Addr().String(), "10.244.244.1:6443": api.Listener.Addr().String()}[addr]
			return (&net.Dialer{}).DialContext(ctx, network, target)
		},
	}
	ctx := context.Background()
	probe.Token = config.SecureToken(agenttest.TokenPassword, servedCA)
	if err := probe.Check(ctx); err != nil {
		t.Errorf("the server serving the pinned CA: %v", err)
	}
	probe.Token = config.SecureToken(agenttest.TokenPassword, []byte("the cluster's real CA"))
	if err := probe.Check(ctx); !errors.Is(err, ErrForeignCluster) || !errors.Is(err, ErrCAMismatch) {
		t.Errorf("a server serving another CA: %v, want ErrForeignCluster and ErrCAMismatch", err)
	}
	// A short token pins nothing, and this seed's agent vouches for no CA:
	// nothing says which CA is the cluster's.
	probe.Token = agenttest.TokenPassword
	if err := probe.Check(ctx); !errors.Is(err, ErrCAUnverified) || errors.Is(err, ErrForeignCluster) {
		t.Errorf("a short token and a seed that does not vouch for its CA: %v, want ErrCAUnverified", err)
	}
}

// k3s gets the token pinned to the verified CA; a token that pins one
// already keeps it, and no pin leaves the token as it is. A member's own
// CA is the pin on a restart.
func TestPinnedToken(t *testing.T) {
	v, err := config.Validate(agenttest.Config(), agenttest.Env(agenttest.TokenPassword))
	if err != nil {
		t.Fatal(err)
	}
	ca := []byte("the cluster CA")
	if got := PinnedToken(v, ""); got != v {
		t.Errorf("no pin changed the config")
	}
	pinned := PinnedToken(v, config.CAHash(ca))
	if pinned.Token.Reveal() != config.SecureToken(agenttest.TokenPassword, ca) || v.Token.Reveal() != agenttest.TokenPassword {
		t.Errorf("pinned %q (the config's own %q)", pinned.Token.Reveal(), v.Token.Reveal())
	}
	if again := PinnedToken(pinned, config.CAHash([]byte("another"))); again != pinned {
		t.Errorf("a token's own pin was replaced")
	}
	if !strings.Contains(string(k3s.Render(pinned, k3s.DefaultPaths, true).Files[0].Content), `token: "K10`+config.CAHash(ca)+`::server:`) {
		t.Errorf("k3s's config does not carry the pinned token")
	}
	paths := k3s.Paths{DataDir: t.TempDir()}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if pin := LocalCAPin(paths, log); pin != "" {
		t.Errorf("no CA on this node: pin %q", pin)
	}
	if err := config.WriteFileAtomic(filepath.Join(paths.DataDir, "agent", "server-ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if pin := LocalCAPin(paths, log); pin != config.CAHash(ca) {
		t.Errorf("a worker's copy of the CA: pin %q", pin)
	}
}
