package formation

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/localapi"
)

// ClusterCA reads the cluster's CA bundle on a node that runs k3s: a
// server's own, or the copy an agent keeps. Not found: nil, no error (a
// cluster being formed has no CA yet).
func ClusterCA(paths k3s.Paths) ([]byte, error) {
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
// token pins, or than the cluster's agent there vouches for: another
// cluster, or someone posing as the seed.
var ErrCAMismatch = errors.New("the server at the join address does not serve the cluster's CA")

// ErrCAUnverified: the CA at the join address cannot be checked against
// anything the cluster's key vouches for. A joiner refuses it unless told
// to trust it unverified (the agent's --join-unverified-ca).
var ErrCAUnverified = errors.New("the cluster's CA at the join address cannot be verified")

// checkCA finds the CA hash the joiner pins and checks that the API server
// at the join address serves that CA. The pin is the token's own (a bundle
// made on a running cluster); for a token without one (a formation's) it is
// the hash the agent at the join address vouches for with the cluster key.
// With AllowUnverifiedCA a CA that cannot be vouched for is trusted, and the
// log says so each time; a CA that differs from a known pin never is.
func (p SeedProbe) checkCA(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) (string, error) {
	ip := p.JoinIP.String()
	pin, _ := config.ParseToken(p.Token)
	if pin == "" {
		key, err := config.NewLifeKey(p.ClusterID, config.Secret(p.Token))
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrCAUnverified, err)
		} else {
			pin, err = VouchedCA(ctx, ip, key, dial, timeout)
		}
		if err != nil {
			if !p.AllowUnverifiedCA || !errors.Is(err, ErrCAUnverified) {
				return "", err
			}
			log := p.Log
			if log == nil {
				log = slog.Default()
			}
			log.Warn("joining with the cluster's CA unverified, as --join-unverified-ca allows: "+
				"the token goes to whichever server answers at the join address", "seed", ip, "why", err.Error())
			return "", nil
		}
	}
	if err := VerifyServerCA(ctx, ip, pin, dial, timeout); err != nil {
		return "", err
	}
	return pin, nil
}

// VouchedCA asks the agent at ip, with a fresh nonce, for the hash of the
// CA its k3s serves, and checks its proof with the cluster key. An answer
// that does not prove (another cluster's agent, an older sitecon, anything
// else answering there) is ErrCAUnverified; a seed whose k3s has no CA yet
// is a reason to wait.
func VouchedCA(ctx context.Context, ip string, key config.LifeKey, dial func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) (string, error) {
	nonce, err := config.NewLifeNonce()
	if err != nil {
		return "", err
	}
	if dial == nil {
		dial = (&net.Dialer{Timeout: timeout}).DialContext
	}
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(config.StatusPort)) + config.CAProofPath + "?nonce=" + hex.EncodeToString(nonce)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("seed %s: %s: %w", ip, config.CAProofPath, localapi.URLErrorCause(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case err != nil:
		return "", fmt.Errorf("seed %s: %s: %w", ip, config.CAProofPath, err)
	case resp.StatusCode == http.StatusServiceUnavailable:
		return "", fmt.Errorf("seed %s cannot vouch for the cluster's CA yet: %s", ip, strings.TrimSpace(string(body)))
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("%w: seed %s does not vouch for it (%s answered %s: not a sitecon agent of this version)", ErrCAUnverified, ip, config.CAProofPath, resp.Status)
	}
	var answer config.CAProofAnswer
	if err := json.Unmarshal(body, &answer); err != nil {
		return "", fmt.Errorf("%w: seed %s: %s: %w", ErrCAUnverified, ip, config.CAProofPath, err)
	}
	hash, err := key.VerifyCA(nonce, answer)
	if err != nil {
		return "", fmt.Errorf("%w: the answer at %s: %w", ErrCAUnverified, ip, err)
	}
	return hash, nil
}

// VerifyServerCA fetches https://<ip>:6443/cacerts (k3s serves it to
// anyone, unauthenticated) and checks its hash against pin.
func VerifyServerCA(ctx context.Context, ip string, pin string, dial func(ctx context.Context, network, addr string) (net.Conn, error), timeout time.Duration) error {
	if pin == "" {
		return fmt.Errorf("%w: no CA hash to check /cacerts against", ErrCAUnverified)
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
	if subtle.ConstantTimeCompare([]byte(config.CAHash(body)), []byte(strings.ToLower(pin))) != 1 {
		return fmt.Errorf("%w (%s)", ErrCAMismatch, ip)
	}
	return nil
}

// BundleToken is the token a join bundle made on a running cluster
// carries: k3s's secure form when this node holds the cluster's CA, so the
// new node verifies the server it reaches; the token as it is otherwise
// (pinned false: the new node trusts the first server that answers).
func BundleToken(token config.Secret, paths k3s.Paths) (config.Secret, bool, error) {
	ca, err := ClusterCA(paths)
	if err != nil {
		return "", false, err
	}
	if ca == nil {
		return token, false, nil
	}
	return config.Secret(config.SecureToken(token.Reveal(), ca)), true, nil
}

// PinnedToken is v with its token pinned to the CA hash pin (k3s's secure
// form), so that k3s, too, joins only a server serving that CA; v itself
// when pin is empty or the token pins a CA already.
func PinnedToken(v *config.Validated, pin string) *config.Validated {
	if pin == "" {
		return v
	}
	if own, _ := config.ParseToken(v.Token.Reveal()); own != "" {
		return v
	}
	pinned := *v
	pinned.Token = config.Secret(config.PinToken(v.Token.Reveal(), pin))
	return &pinned
}

// LocalCAPin is the hash of the cluster CA this node's k3s keeps under
// paths; empty when it has none (or it cannot be read: k3s then keeps the
// token as it is, and the log says why).
func LocalCAPin(paths k3s.Paths, log *slog.Logger) string {
	ca, err := ClusterCA(paths)
	if err != nil {
		log.Warn("the cluster's CA cannot be read: k3s's token stays unpinned", "err", err)
	}
	if len(ca) == 0 {
		return ""
	}
	return config.CAHash(ca)
}
