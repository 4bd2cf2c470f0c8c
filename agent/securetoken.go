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
	"strings"
	"time"
)

// k3s's secure token form: K10<sha256 of the cluster CA bundle>::server:<password>.
// A joiner holding it checks the server it reaches serves that CA before it
// trusts it; the short form (the password alone) trusts whatever answers at
// the join address first.
const secureTokenPrefix = "K10"

// SecureToken puts a token into k3s's secure form for the CA bundle caPEM
// (the file k3s serves at /cacerts: <data-dir>/server/tls/server-ca.crt).
// A token already in that form keeps its password and takes this CA hash.
func SecureToken(token string, caPEM []byte) string {
	_, password := ParseToken(token)
	sum := sha256.Sum256(caPEM)
	return secureTokenPrefix + hex.EncodeToString(sum[:]) + "::server:" + password
}

// ParseToken splits a k3s token into the CA hash it pins (empty for the
// short form) and its password.
func ParseToken(token string) (caHash, password string) {
	if !strings.HasPrefix(token, secureTokenPrefix) {
		return "", token
	}
	rest := strings.TrimPrefix(token, secureTokenPrefix)
	hash, creds, ok := strings.Cut(rest, "::")
	if !ok || len(hash) != sha256.Size*2 {
		return "", token
	}
	if _, err := hex.DecodeString(hash); err != nil {
		return "", token
	}
	// creds is "<user>:<password>"; k3s's server user is "server".
	if _, pw, ok := strings.Cut(creds, ":"); ok {
		return hash, pw
	}
	return hash, creds
}

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
	pin, _ := ParseToken(token)
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
		return fmt.Errorf("seed %s: /cacerts: %w", ip, unwrapURL(err))
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
func BundleToken(token Secret, paths K3sPaths) (Secret, bool, error) {
	ca, err := ClusterCA(paths)
	if err != nil {
		return "", false, err
	}
	if ca == nil {
		return token, false, nil
	}
	return Secret(SecureToken(token.Reveal(), ca)), true, nil
}
