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
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/sitecon/sitecon/agent/config"
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

	mu   sync.Mutex
	cert *tls.Certificate
	// certFrom are the files the certificate was read from (the
	// kubeconfig, and the certificate and key files it names, as k3s's
	// does) and their stamps then: k3s renews the files it names.
	certFrom map[string]fileStamp
	roots    *x509.CertPool
	rootFrom fileStamp
}

// New is the credential in kubeconfig (the node's own identity, as k3s
// writes it in <data-dir>/agent/kubelet.kubeconfig) checked against the
// CA in clientCA.
func New(kubeconfig, clientCA string) *Credential {
	return &Credential{kubeconfig: kubeconfig, clientCA: clientCA}
}

// fileStamp tells a file changed since it was read: the SHA-256 of its
// content. The files are small and read at most once per proof; their
// times, which the kernel keeps to a clock tick, could not tell a file
// written twice within one.
type fileStamp [sha256.Size]byte

func stampOf(path string) (fileStamp, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return fileStamp{}, err
	}
	return sha256.Sum256(data), nil
}

// Sign signs digest as node: it returns node's certificate (DER) and the
// signature. A credential that is not node's own (another node's, an
// admin's) signs nothing.
func (c *Credential) Sign(node string, digest []byte) (certDER, sig []byte, err error) {
	if c == nil {
		return nil, nil, errors.New("this node has no credential to sign with")
	}
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
	if c == nil {
		return fmt.Errorf("%w: no client CA given", config.ErrCannotCheckNodeWord)
	}
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

// unchanged says whether every file the certificate was read from is as
// it was then.
func (c *Credential) unchanged() bool {
	if c.cert == nil {
		return false
	}
	for path, was := range c.certFrom {
		if now, err := stampOf(path); err != nil || now != was {
			return false
		}
	}
	return true
}

// certificate is the node's client certificate and key, read again when
// the kubeconfig or a file it names changed.
func (c *Credential) certificate() (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unchanged() {
		return c.cert, nil
	}
	// Stamped before they are read: a change while reading is read next
	// time.
	from := map[string]fileStamp{}
	stamp, err := stampOf(c.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("this node's own credential: %w", err)
	}
	from[c.kubeconfig] = stamp
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("this node's own credential %s: %w", c.kubeconfig, err)
	}
	certPEM, keyPEM := cfg.CertData, cfg.KeyData
	readNamed := func(path string) ([]byte, error) {
		stamp, err := stampOf(path)
		if err != nil {
			return nil, fmt.Errorf("this node's own credential: %w", err)
		}
		from[path] = stamp
		return os.ReadFile(path)
	}
	if len(certPEM) == 0 && cfg.CertFile != "" {
		if certPEM, err = readNamed(cfg.CertFile); err != nil {
			return nil, err
		}
	}
	if len(keyPEM) == 0 && cfg.KeyFile != "" {
		if keyPEM, err = readNamed(cfg.KeyFile); err != nil {
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
	c.cert, c.certFrom = &cert, from
	return c.cert, nil
}

// rootPool is the cluster's client CA, read again when its file changed.
func (c *Credential) rootPool() (*x509.CertPool, error) {
	stamp, err := stampOf(c.clientCA)
	if err != nil {
		return nil, fmt.Errorf("%w: the cluster's client CA: %w", config.ErrCannotCheckNodeWord, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.roots != nil && stamp == c.rootFrom {
		return c.roots, nil
	}
	data, err := os.ReadFile(c.clientCA)
	if err != nil {
		return nil, fmt.Errorf("%w: the cluster's client CA: %w", config.ErrCannotCheckNodeWord, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%w: the cluster's client CA %s holds no certificate", config.ErrCannotCheckNodeWord, c.clientCA)
	}
	c.roots, c.rootFrom = pool, stamp
	return pool, nil
}
