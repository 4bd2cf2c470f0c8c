package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ClientCA is a cluster's client CA, as k3s's issues each node its own
// identity (agent/nodecred checks a node's signed word against it).
type ClientCA struct {
	// Path is the CA's certificate (client-ca.crt).
	Path string
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewClientCA writes a client CA's certificate to dir/client-ca.crt.
func NewClientCA(t testing.TB, dir string) *ClientCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "k3s-client-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &ClientCA{Path: filepath.Join(dir, "client-ca.crt"), dir: dir, cert: cert, key: key}
	if err := os.WriteFile(ca.Path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return ca
}

// Kubeconfig writes dir/NAME.kubeconfig holding a client certificate the
// CA issued to common name cn in groups orgs (a node's own identity:
// "system:node:NODE", "system:nodes"), with its key, and returns its path.
func (ca *ClientCA) Kubeconfig(t testing.TB, name, cn string, orgs ...string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(typ string, der []byte) string {
		return base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
	}
	path := filepath.Join(ca.dir, name+".kubeconfig")
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {client-certificate-data: %s, client-key-data: %s}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`, b64("CERTIFICATE", der), b64("EC PRIVATE KEY", keyDER))
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
