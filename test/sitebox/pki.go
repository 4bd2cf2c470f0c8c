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
// API server's client certificate for the kubelets and the service-account
// key pair.
func (p pki) generate(nodes []Node) error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sitebox-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	if err := writeCert(p.path("ca.crt"), caDER); err != nil {
		return err
	}
	if err := writeECKey(p.path("ca.key"), caKey); err != nil {
		return err
	}
	leaf := func(name string, tmpl *x509.Certificate) error {
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
