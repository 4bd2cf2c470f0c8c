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
	certPEM, keyPEM := ca.issue(t, cn, orgs...)
	b64 := base64.StdEncoding.EncodeToString
	path := filepath.Join(ca.dir, name+".kubeconfig")
	writeKubeconfig(t, path, "client-certificate-data: "+b64(certPEM)+", client-key-data: "+b64(keyPEM))
	return path
}

// NodeKubeconfig writes dir/NODE.kubeconfig holding node's own identity,
// as k3s issues it (system:node:NODE in group system:nodes).
func (ca *ClientCA) NodeKubeconfig(t testing.TB, node string) string {
	t.Helper()
	return ca.Kubeconfig(t, node, "system:node:"+node, "system:nodes")
}

// KubeconfigWithFiles writes dir/NAME.kubeconfig naming the certificate
// and key files dir/NAME.crt and dir/NAME.key, as k3s's
// kubelet.kubeconfig names client-kubelet.crt and .key, and returns the
// kubeconfig's path; IssueFiles writes (and renews) the files.
func (ca *ClientCA) KubeconfigWithFiles(t testing.TB, name, cn string, orgs ...string) string {
	t.Helper()
	ca.IssueFiles(t, name, cn, orgs...)
	path := filepath.Join(ca.dir, name+".kubeconfig")
	writeKubeconfig(t, path, fmt.Sprintf("client-certificate: %q, client-key: %q", filepath.Join(ca.dir, name+".crt"), filepath.Join(ca.dir, name+".key")))
	return path
}

// IssueFiles writes dir/NAME.crt and dir/NAME.key: a certificate the CA
// issued to cn in orgs, and its key.
func (ca *ClientCA) IssueFiles(t testing.TB, name, cn string, orgs ...string) {
	t.Helper()
	certPEM, keyPEM := ca.issue(t, cn, orgs...)
	for file, data := range map[string][]byte{name + ".crt": certPEM, name + ".key": keyPEM} {
		if err := os.WriteFile(filepath.Join(ca.dir, file), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func writeKubeconfig(t testing.TB, path, user string) {
	t.Helper()
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {%s}
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`, user)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue is a certificate the CA issued to cn in orgs, and its key (PEM).
func (ca *ClientCA) issue(t testing.TB, cn string, orgs ...string) (certPEM, keyPEM []byte) {
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
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// NodeWord is what agent/config.NodeWord asks of a node's credential.
type NodeWord interface {
	Sign(node string, digest []byte) (cert, sig []byte, err error)
	Check(node string, digest, cert, sig []byte) error
}

// SignsAs is a forger's node word: it signs every answer with the
// credential of node As, whatever node the answer is for.
type SignsAs struct {
	NodeWord
	As string
}

// Sign signs digest with As's credential.
func (w SignsAs) Sign(_ string, digest []byte) ([]byte, []byte, error) {
	return w.NodeWord.Sign(w.As, digest)
}
