// Package nodecred signs a node's word with the node's own credential and
// checks another node's. Every node holds the cluster token, so a MAC
// under a key derived from it shows only that the signer is some node of
// the cluster; a worker could sign in any node's name. A node's own
// credential is the client certificate k3s issues it (user
// system:node:NAME in group system:nodes, its key kept on that node
// alone, in NodeKubeconfig), and the cluster's client CA, which every node
// holds, shows whose it is. What the failover guard lets a failover go on
// (a node's word that it fenced) and what a cut-off node counts as contact
// (a peer's word that it reaches the API server) are signed so
// (config.LifeKey.WithNodeWord).
package nodecred

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

// The identity k3s gives a node (and the API server's Node authorizer
// reads): user system:node:NAME in group system:nodes.
const (
	nodeUserPrefix = "system:node:"
	nodesGroup     = "system:nodes"
)

// Credential is this node's credential and the cluster's client CA, read
// from their files when first needed and again when a file changes (k3s
// renews the certificate; a node's files appear only once its k3s has
// run). Safe for concurrent use.
type Credential struct {
	kubeconfig, clientCA string

	mu       sync.Mutex
	cert     *tls.Certificate
	certFrom fileStamp
	roots    *x509.CertPool
	rootFrom fileStamp
}

// New is the credential in kubeconfig (the node's own identity, as k3s
// writes it in <data-dir>/agent/kubelet.kubeconfig) checked against the
// CA in clientCA.
func New(kubeconfig, clientCA string) *Credential {
	return &Credential{kubeconfig: kubeconfig, clientCA: clientCA}
}

// fileStamp tells a file changed since it was read: a file put in its
// place (a new inode) or written again (its times, which the kernel keeps
// to a clock tick, and its size).
type fileStamp struct {
	ino   uint64
	mod   time.Time
	ctime syscall.Timespec
	size  int64
}

func stampOf(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	stamp := fileStamp{mod: st.ModTime(), size: st.Size()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		stamp.ino, stamp.ctime = sys.Ino, sys.Ctim
	}
	return stamp, nil
}

// Sign signs digest as node: it returns node's certificate (DER) and the
// signature. A credential that is not node's own (another node's, an
// admin's) signs nothing.
func (c *Credential) Sign(node string, digest []byte) (certDER, sig []byte, err error) {
	cert, err := c.certificate()
	if err != nil {
		return nil, nil, err
	}
	if err := isNode(cert.Leaf, node); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", c.kubeconfig, err)
	}
	signer, ok := cert.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s: its key cannot sign", c.kubeconfig)
	}
	opts := crypto.SignerOpts(crypto.SHA256)
	if _, ok := signer.Public().(ed25519.PublicKey); ok {
		opts = crypto.Hash(0)
	}
	sig, err = signer.Sign(rand.Reader, digest, opts)
	if err != nil {
		return nil, nil, err
	}
	return cert.Leaf.Raw, sig, nil
}

// Check checks that sig over digest was made with node's own credential,
// which certDER shows: a certificate the cluster's client CA issued for
// client authentication to system:node:NODE in group system:nodes, valid
// now, whose key made sig.
func (c *Credential) Check(node string, digest, certDER, sig []byte) error {
	roots, err := c.rootPool()
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return fmt.Errorf("its certificate: %w", err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("its certificate is not the cluster's (%s): %w", c.clientCA, err)
	}
	if err := isNode(cert, node); err != nil {
		return err
	}
	var ok bool
	switch pub := cert.PublicKey.(type) {
	case *ecdsa.PublicKey:
		ok = ecdsa.VerifyASN1(pub, digest, sig)
	case *rsa.PublicKey:
		ok = rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest, sig) == nil
	case ed25519.PublicKey:
		ok = ed25519.Verify(pub, digest, sig)
	default:
		return fmt.Errorf("its certificate's key is of a kind not checked (%T)", cert.PublicKey)
	}
	if !ok {
		return fmt.Errorf("its signature does not verify with %s's certificate", node)
	}
	return nil
}

// isNode says why cert is not node's own identity, nil when it is.
func isNode(cert *x509.Certificate, node string) error {
	if cert.Subject.CommonName != nodeUserPrefix+node || !slices.Contains(cert.Subject.Organization, nodesGroup) {
		return fmt.Errorf("the certificate is %q (%v), not node %s's own identity (%s%s in %s)",
			cert.Subject.CommonName, cert.Subject.Organization, node, nodeUserPrefix, node, nodesGroup)
	}
	return nil
}

// certificate is the node's client certificate and key, read again when
// the kubeconfig changed.
func (c *Credential) certificate() (*tls.Certificate, error) {
	stamp, err := stampOf(c.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("this node's own credential: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert != nil && stamp == c.certFrom {
		return c.cert, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("this node's own credential %s: %w", c.kubeconfig, err)
	}
	certPEM, keyPEM := cfg.CertData, cfg.KeyData
	if len(certPEM) == 0 && cfg.CertFile != "" {
		if certPEM, err = os.ReadFile(cfg.CertFile); err != nil {
			return nil, err
		}
	}
	if len(keyPEM) == 0 && cfg.KeyFile != "" {
		if keyPEM, err = os.ReadFile(cfg.KeyFile); err != nil {
			return nil, err
		}
	}
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, fmt.Errorf("this node's own credential %s holds no client certificate and key", c.kubeconfig)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("this node's own credential %s: %w", c.kubeconfig, err)
	}
	c.cert, c.certFrom = &cert, stamp
	return c.cert, nil
}

// rootPool is the cluster's client CA, read again when its file changed.
func (c *Credential) rootPool() (*x509.CertPool, error) {
	stamp, err := stampOf(c.clientCA)
	if err != nil {
		return nil, fmt.Errorf("the cluster's client CA, to check a node's credential with: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.roots != nil && stamp == c.rootFrom {
		return c.roots, nil
	}
	data, err := os.ReadFile(c.clientCA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("the cluster's client CA " + c.clientCA + " holds no certificate")
	}
	c.roots, c.rootFrom = pool, stamp
	return pool, nil
}
