package agent

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/localapi"
)

// ClusterCA reads the cluster's CA bundle on a node that runs k3s: a
// server's own, or the copy an agent keeps. Not found: nil, no error (a
// cluster being formed has no CA yet).
func ClusterCA(paths K3sPaths) ([]byte, error) {
	for _, p := range []string{
		filepath.Join(paths.DataDir, "server", "tls", "server-ca.crt"),
		filepath.Join(paths.DataDir, "agent", "server-ca.crt"),
	} {
		data, err := os.ReadFile(p)
		if err == nil && len(data) > 0 {
			return data, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cluster CA %s: %w", p, err)
		}
	}
	return nil, nil
}

// ErrCAMismatch: the server at the join address serves another CA than the
// token pins: another cluster, or someone posing as the seed.
var ErrCAMismatch = errors.New("the server at the join address does not serve the cluster's CA")

// VerifyServerCA fetches https://<ip>:6443/cacerts (k3s serves it to
// anyone, unauthenticated) and checks its hash against the token's pin.
// A token without a pin verifies nothing and returns nil.
func VerifyServerCA(ctx context.Context, ip string, token string, dial func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) error {
	pin, _ := config.ParseToken(token)
	if pin == "" {
		return nil
	}
	if dial == nil {
		dial = (&net.Dialer{Timeout: timeout}).DialContext
	}
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true,
		// The CA is what is being checked: its hash, not a chain, decides.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // verified by the pinned hash below
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(ip, "6443")+"/cacerts", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("seed %s: /cacerts: %w", ip, localapi.URLErrorCause(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("seed %s: /cacerts answered %s (%v)", ip, resp.Status, err)
	}
	sum := sha256.Sum256(body)
	if subtle.ConstantTimeCompare([]byte(hex.EncodeToString(sum[:])), []byte(pin)) != 1 {
		return fmt.Errorf("%w (%s)", ErrCAMismatch, ip)
	}
	return nil
}

// BundleToken is the token a join bundle made on a running cluster
// carries: k3s's secure form when this node holds the cluster's CA, so the
// new node verifies the server it reaches; the token as it is otherwise
// (pinned false: the new node trusts the first server that answers).
func BundleToken(token config.Secret, paths K3sPaths) (config.Secret, bool, error) {
	ca, err := ClusterCA(paths)
	if err != nil {
		return "", false, err
	}
	if ca == nil {
		return token, false, nil
	}
	return config.Secret(config.SecureToken(token.Reveal(), ca)), true, nil
}
