package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The cluster CA as k3s keeps it: the first server makes it at its first
// start (<data-dir>/server/tls/server-ca.crt and .key), a node that joins
// fetches it from its server's /cacerts (checked against the CA hash its
// token pins, K10<sha256>::..., as k3s refuses a server serving another
// CA) and keeps it (servers under server/tls, agents as agent/server-ca.crt);
// a restart reuses what is on disk. Every server serves it at /cacerts.
// A server that joins also gets the CA's key, as k3s's bootstrap data
// gives it (GET /v1-k3s/server-bootstrap, authenticated with the token's
// password as user "server", on a server checked against the CA): every
// server holds server-ca.key, no agent does.

// clusterCA is this node's copy of the cluster CA, and the CA's key where
// this node made it.
type clusterCA struct {
	pem []byte
	key *ecdsa.PrivateKey
	crt *x509.Certificate
}

func caFiles(dataDir, sub string) (crt, key string) {
	if sub == "agent" {
		return filepath.Join(dataDir, "agent", "server-ca.crt"), ""
	}
	dir := filepath.Join(dataDir, "server", "tls")
	return filepath.Join(dir, "server-ca.crt"), filepath.Join(dir, "server-ca.key")
}

// loadOrMakeCA finds the cluster CA: on disk, else from the server the
// config joins, else (the first server) made here.
func loadOrMakeCA(sub, dataDir string, settings map[string]any) (*clusterCA, error) {
	crtPath, keyPath := caFiles(dataDir, sub)
	token, _ := settings["token"].(string)
	server, _ := settings["server"].(string)
	if data, err := os.ReadFile(crtPath); err == nil && len(data) > 0 {
		ca := &clusterCA{pem: data}
		if keyPath != "" {
			k, err := os.ReadFile(keyPath)
			if err != nil && server != "" {
				// A joined server whose bootstrap fetch failed last time.
				k, err = fetchServerCAKey(server, token, keyPath, data)
			}
			if err == nil {
				ca.key, ca.crt = parseCA(data, k)
			}
		}
		return ca, nil
	}
	if server != "" {
		data, err := fetchCACerts(server)
		if err != nil {
			// k3s retries; the stand-in goes on without a CA (a test that
			// needs one sees none served).
			fmt.Fprintln(os.Stderr, "k3sstandin: no cluster CA from", server+":", err)
			return &clusterCA{}, nil
		}
		if pin := tokenPin(token); pin != "" {
			sum := sha256.Sum256(data)
			if hex.EncodeToString(sum[:]) != pin {
				return nil, fmt.Errorf("token CA hash does not match the Cluster CA certificate hash: %s != %s", pin, hex.EncodeToString(sum[:]))
			}
		}
		if err := writeFile(crtPath, data); err != nil {
			return nil, err
		}
		ca := &clusterCA{pem: data}
		if keyPath != "" {
			if k, err := fetchServerCAKey(server, token, keyPath, data); err != nil {
				// k3s retries; the stand-in goes on without the key and
				// fetches it again at its next start.
				fmt.Fprintln(os.Stderr, "k3sstandin: no server CA key from", server+":", err)
			} else {
				ca.key, ca.crt = parseCA(data, k)
			}
		}
		return ca, nil
	}
	ca, keyPEM, err := makeCA()
	if err != nil {
		return nil, err
	}
	if err := writeFile(keyPath, keyPEM); err != nil {
		return nil, err
	}
	return ca, writeFile(crtPath, ca.pem)
}

func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// tokenPin is the CA hash a secure token pins (K10<hash>::user:password).
func tokenPin(token string) string {
	rest, ok := strings.CutPrefix(token, "K10")
	if !ok {
		return ""
	}
	hash, _, ok := strings.Cut(rest, "::")
	if !ok || len(hash) != 64 {
		return ""
	}
	return hash
}

// tokenPassword is the password of a token, secure (K10<hash>::server:pw)
// or plain (the password itself), as k3s reads it.
func tokenPassword(token string) string {
	if rest, ok := strings.CutPrefix(token, "K10"); ok {
		if _, creds, ok := strings.Cut(rest, "::"); ok {
			if _, pw, ok := strings.Cut(creds, ":"); ok {
				return pw
			}
			return creds
		}
	}
	return token
}

// serverBootstrapPath is where k3s's servers hand a joining server the
// cluster's bootstrap data (its CA keys among them).
const serverBootstrapPath = "/v1-k3s/server-bootstrap"

// serverBootstrap is the part of k3s's bootstrap data the stand-in hands
// on: the server CA's key.
type serverBootstrap struct {
	ServerCAKey struct {
		Content []byte `json:"Content"`
	} `json:"ServerCAKey"`
}

// fetchServerCAKey gets the server CA's key from server as a joining k3s
// server does, checks that it is the key of the CA certificate crtPEM, and
// writes it to keyPath.
func fetchServerCAKey(server, token, keyPath string, crtPEM []byte) ([]byte, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(crtPEM) {
		return nil, fmt.Errorf("no CA certificate to check %s with", server)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(server, "/")+serverBootstrapPath, nil)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth("server", tokenPassword(token))
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", serverBootstrapPath, resp.Status)
	}
	var boot serverBootstrap
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&boot); err != nil {
		return nil, err
	}
	if key, crt := parseCA(crtPEM, boot.ServerCAKey.Content); key == nil || !key.PublicKey.Equal(crt.PublicKey) {
		return nil, errors.New("the bootstrap data's server CA key is not the cluster CA's")
	}
	return boot.ServerCAKey.Content, writeFile(keyPath, boot.ServerCAKey.Content)
}

func fetchCACerts(server string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // checked against the token's pin, as k3s does
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(server, "/")+"/cacerts", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err == nil && (resp.StatusCode != http.StatusOK || len(data) == 0) {
		err = fmt.Errorf("/cacerts answered %s", resp.Status)
	}
	return data, err
}

func makeCA() (*clusterCA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: fmt.Sprintf("k3s-server-ca@%d", time.Now().Unix())},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	crt, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return &clusterCA{pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key, crt: crt},
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func parseCA(crtPEM, keyPEM []byte) (*ecdsa.PrivateKey, *x509.Certificate) {
	cb, _ := pem.Decode(crtPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil
	}
	crt, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil
	}
	return key, crt
}

// servingCert is the API server's certificate: signed by the cluster CA
// where this node holds its key (the first server, and a joined one that
// got it with the bootstrap data), self-signed otherwise.
func (ca *clusterCA) servingCert(ip string) (tls.Certificate, error) {
	if ca.key == nil || ca.crt == nil {
		return selfSigned()
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "k3s"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if addr := net.ParseIP(ip); addr != nil {
		tmpl.IPAddresses = []net.IP{addr}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.crt, &key.PublicKey, ca.key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.crt.Raw}, PrivateKey: key}, nil
}

// apiHandler answers like k3s's API server port: /cacerts to anyone, the
// bootstrap data (the server CA's key) to a server that presents the
// token's password, "ok" elsewhere.
func (ca *clusterCA) apiHandler(token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == serverBootstrapPath {
			user, pw, ok := r.BasicAuth()
			want := tokenPassword(token)
			if !ok || user != "server" || want == "" || subtle.ConstantTimeCompare([]byte(pw), []byte(want)) != 1 {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			if ca.key == nil {
				http.Error(w, "no server CA key", http.StatusServiceUnavailable)
				return
			}
			der, err := x509.MarshalECPrivateKey(ca.key)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			var boot serverBootstrap
			boot.ServerCAKey.Content = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(boot)
			return
		}
		if r.URL.Path == "/cacerts" {
			if len(ca.pem) == 0 {
				http.Error(w, "no cluster CA", http.StatusServiceUnavailable)
				return
			}
			_, _ = w.Write(ca.pem)
			return
		}
		fmt.Fprintln(w, "ok")
	})
}
