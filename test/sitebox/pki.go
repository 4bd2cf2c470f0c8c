package sitebox

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the certificate set of one site, generated in Go (no openssl needed).
type pki struct {
	dir string
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

// generate writes a CA, the apiserver's serving certificate, an admin client
// certificate (system:masters), each node's own identity (node-NAME), each
// node's kubelet serving certificate (kubelet-NAME, for its address), the
// API server's client certificate for the kubelets, the front proxy's CA and
// client identity, virt-api's serving certificate and the service-account
// key pair.
func (p pki) generate(nodes []Node) error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	now := time.Now()
	ca, caKey, err := newCA(p, "ca", "sitebox-ca", now)
	if err != nil {
		return err
	}
	leaf := func(name string, tmpl *x509.Certificate) error { return signLeaf(p, name, tmpl, ca, caKey, now) }
	if err := leaf("apiserver", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceClusterIP)},
	}); err != nil {
		return err
	}
	if err := leaf("admin", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "sitebox-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}
	// The identity k3s gives every node's own controllers
	// (<data-dir>/agent/k3scontroller.kubeconfig), the same on every node:
	// sitecon grants it nothing (a worker's agent uses its node's own
	// identity below); it is here because k3s writes it on every node.
	if err := leaf("k3s-controller", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:k3s-controller"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}
	// Each node's own identity, as k3s issues it to every node it admits
	// (<data-dir>/agent/client-kubelet.crt): user system:node:<name> in
	// group system:nodes. A worker's agent reaches the cluster with it.
	for _, n := range nodes {
		if err := leaf("node-"+n.Name, &x509.Certificate{
			Subject:     pkix.Name{CommonName: "system:node:" + n.Name, Organization: []string{"system:nodes"}},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}); err != nil {
			return err
		}
		// The kubelet's serving certificate, as k3s issues it
		// (<data-dir>/agent/serving-kubelet.crt): the node's name and the
		// address the API server dials, signed by the CA the API server
		// checks kubelets against (--kubelet-certificate-authority).
		if err := leaf("kubelet-"+n.Name, &x509.Certificate{
			Subject:     pkix.Name{CommonName: n.Name},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			DNSNames:    []string{n.Name},
			IPAddresses: []net.IP{net.ParseIP(kubeletAddr(n))},
		}); err != nil {
			return err
		}
	}
	// The API server's identity towards the kubelets
	// (--kubelet-client-certificate), as k3s's client-kube-apiserver.
	if err := leaf("apiserver-kubelet-client", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}
	// The aggregation layer's own trust, apart from the cluster CA as
	// kubeadm and k3s keep it: the front-proxy CA signs only the identity
	// the API server presents when it proxies to an aggregated API server
	// (--proxy-client-cert-file), which that server trusts to name the user
	// in its request headers.
	proxyCA, proxyCAKey, err := newCA(p, "front-proxy-ca", "sitebox-front-proxy-ca", now)
	if err != nil {
		return err
	}
	if err := signLeaf(p, FrontProxyClient, &x509.Certificate{
		Subject:     pkix.Name{CommonName: FrontProxyClientName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, proxyCA, proxyCAKey, now); err != nil {
		return err
	}
	// virt-api's serving certificate: the aggregator checks it against the
	// APIService's caBundle under the Service's name.
	if err := leaf(virtAPICert, &x509.Certificate{
		Subject:     pkix.Name{CommonName: virtAPIServerName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{virtAPIServerName},
	}); err != nil {
		return err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	if err := writePEM(p.path("sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	return writePEM(p.path("sa.pub"), "PUBLIC KEY", pub)
}

// The front proxy's identity: the files' name and the certificate's
// common name, as k3s names it (--requestheader-allowed-names).
const (
	FrontProxyClient     = "front-proxy-client"
	FrontProxyClientName = "system:auth-proxy"
)

// newCA writes a self-signed CA as NAME.crt and NAME.key.
func newCA(p pki, name, cn string, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if err := writeCert(p.path(name+".crt"), der); err != nil {
		return nil, nil, err
	}
	if err := writeECKey(p.path(name+".key"), key); err != nil {
		return nil, nil, err
	}
	return ca, key, nil
}

// signLeaf writes NAME.crt and NAME.key, tmpl signed by ca.
func signLeaf(p pki, name string, tmpl *x509.Certificate, ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(365 * 24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writeCert(p.path(name+".crt"), der); err != nil {
		return err
	}
	return writeECKey(p.path(name+".key"), key)
}

func writeCert(path string, der []byte) error { return writePEM(path, "CERTIFICATE", der) }

func writeECKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "EC PRIVATE KEY", der)
}

func writePEM(path, blockType string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
