package formation

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/localapi"
)

// ErrForeignCluster means the join address answers for another cluster: this
// node must never join it.
var ErrForeignCluster = errors.New("another cluster owns the join address")

// SeedProbe checks whether the seed is ready to take this node in.
type SeedProbe struct {
	JoinIP    netip.Addr
	ClusterID string
	// Dial opens connections (tests dial from a network namespace).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Timeout bounds each check.
	Timeout time.Duration
	// Token is the cluster token; in k3s's secure form it pins the
	// cluster's CA, and a server at the join address serving another CA
	// is never joined. Without a pin, the agent at the join address must
	// vouch for the CA with the cluster key (VouchedCA).
	Token string
	// AllowUnverifiedCA joins, with a warning in Log, a seed whose CA
	// cannot be vouched for (the agent's --join-unverified-ca).
	AllowUnverifiedCA bool
	Log               *slog.Logger
}

// Check returns nil once https://<join IP>:6443 answers, serving the
// cluster's CA (pinned by the token, or vouched for by the agent there), and
// http://<join IP>:12346/status says cluster:<our UUID>. A different UUID or
// CA is ErrForeignCluster, a CA nobody vouches for ErrCAUnverified;
// anything else is a reason to wait.
func (p SeedProbe) Check(ctx context.Context) error {
	_, err := p.Verify(ctx)
	return err
}

// Verify is Check, and returns the hash of the cluster CA the seed was
// verified to serve: what k3s's token is to pin (empty only when
// AllowUnverifiedCA let an unverified CA through).
func (p SeedProbe) Verify(ctx context.Context) (string, error) {
	timeout := p.Timeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	dial := p.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: timeout}).DialContext
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	answer, err := statusAnswer(ctx, p.JoinIP, dial, timeout)
	switch {
	case err != nil:
		return "", fmt.Errorf("seed %s: %w", p.JoinIP, err)
	case answer == "":
		return "", fmt.Errorf("seed %s is not a cluster member yet (empty /status)", p.JoinIP)
	case answer != "cluster:"+p.ClusterID:
		return "", fmt.Errorf("%w: %s answers %q, this node belongs to cluster:%s", ErrForeignCluster, p.JoinIP, answer, p.ClusterID)
	}
	// The API server has to answer TLS and serve the cluster's CA, the one
	// the token pins or the cluster's agent there vouches for: a /status
	// answer alone is anyone's to give.
	pin, err := p.checkCA(ctx, dial, timeout)
	if err != nil {
		if errors.Is(err, ErrCAMismatch) {
			return "", fmt.Errorf("%w: %w", ErrForeignCluster, err)
		}
		return "", err
	}
	conn, err := dial(ctx, "tcp", net.JoinHostPort(p.JoinIP.String(), "6443"))
	if err != nil {
		return "", fmt.Errorf("seed %s: API server port 6443: %w", p.JoinIP, err)
	}
	defer conn.Close()
	tlsConn := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reachability only
	if err := tlsConn.HandshakeContext(ctx); err != nil {
		return "", fmt.Errorf("seed %s: API server port 6443 does not answer TLS: %w", p.JoinIP, err)
	}
	return pin, nil
}

// statusAnswer is what GET http://<ip>:12346/status answers, trimmed.
func statusAnswer(ctx context.Context, ip netip.Addr, dial func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) (string, error) {
	if dial == nil {
		dial = (&net.Dialer{Timeout: timeout}).DialContext
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	statusURL := "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(config.StatusPort)) + "/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, statusURL, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("/status: %w", localapi.URLErrorCause(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256))
	if err != nil {
		return "", fmt.Errorf("/status: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/status answered %s", resp.Status)
	}
	return strings.TrimSpace(string(body)), nil
}
