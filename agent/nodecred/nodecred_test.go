package nodecred

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/test/testcert"
)

func digest(s string) []byte { d := sha256.Sum256([]byte(s)); return d[:] }

// A node signs with its own credential and another node checks it; a
// worker holding every node's token but only its own credential cannot
// sign in another node's name, nor pass its own signature off as
// another's, nor does a certificate from outside the cluster's client CA,
// or an admin's, count.
func TestNodeWordIsTheNodesOwn(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewClientCA(t, dir)
	clientCA := ca.Path
	nodeA := New(ca.Kubeconfig(t, "node-a", "system:node:node-a", "system:nodes"), clientCA)
	worker := New(ca.Kubeconfig(t, "node-d", "system:node:node-d", "system:nodes"), clientCA)
	checker := New(filepath.Join(dir, "none"), clientCA)

	cert, sig, err := nodeA.Sign("node-a", digest("fenced"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checker.Check("node-a", digest("fenced"), cert, sig); err != nil {
		t.Fatalf("node-a's own signature: %v", err)
	}
	if err := checker.Check("node-a", digest("not fenced"), cert, sig); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("node-a's signature over another digest: %v, want refused", err)
	}
	if _, _, err := worker.Sign("node-a", digest("fenced")); err == nil || !strings.Contains(err.Error(), "not node node-a's own identity") {
		t.Errorf("node-d's credential signing as node-a: %v, want refused", err)
	}
	wcert, wsig, err := worker.Sign("node-d", digest("fenced"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checker.Check("node-a", digest("fenced"), wcert, wsig); err == nil || !strings.Contains(err.Error(), "not node node-a's own identity") {
		t.Errorf("node-d's signature passed off as node-a's: %v, want refused", err)
	}
	// node-a's certificate with node-d's signature.
	if err := checker.Check("node-a", digest("fenced"), cert, wsig); err == nil {
		t.Error("node-a's certificate with node-d's signature: accepted")
	}
	admin := New(ca.Kubeconfig(t, "admin", "system:node:node-a"), clientCA)
	if _, _, err := admin.Sign("node-a", digest("fenced")); err == nil {
		t.Error("a certificate named system:node:node-a outside group system:nodes signed as node-a")
	}
	otherDir := t.TempDir()
	other := testcert.NewClientCA(t, otherDir)
	stranger := New(other.Kubeconfig(t, "node-a", "system:node:node-a", "system:nodes"), filepath.Join(otherDir, "client-ca.crt"))
	scert, ssig, err := stranger.Sign("node-a", digest("fenced"))
	if err != nil {
		t.Fatal(err)
	}
	if err := checker.Check("node-a", digest("fenced"), scert, ssig); err == nil || !strings.Contains(err.Error(), "not the cluster's") {
		t.Errorf("node-a's name from another CA: %v, want refused", err)
	}
}

// No credential yet (a node whose k3s has not run), or no client CA to
// check with: a clear error, nothing signed or taken as checked; once the
// files appear they are read.
func TestNodeWordWithoutItsFiles(t *testing.T) {
	dir := t.TempDir()
	kubeconfig, clientCA := filepath.Join(dir, "kubelet.kubeconfig"), filepath.Join(dir, "client-ca.crt")
	c := New(kubeconfig, clientCA)
	if _, _, err := c.Sign("node-a", digest("x")); err == nil || !strings.Contains(err.Error(), "own credential") {
		t.Fatalf("no kubeconfig: %v", err)
	}
	if err := c.Check("node-a", digest("x"), []byte("junk"), []byte("junk")); err == nil || !strings.Contains(err.Error(), "client CA") {
		t.Fatalf("no client CA: %v", err)
	}
	ca := testcert.NewClientCA(t, dir)
	if err := os.Rename(ca.Kubeconfig(t, "node-a", "system:node:node-a", "system:nodes"), kubeconfig); err != nil {
		t.Fatal(err)
	}
	cert, sig, err := c.Sign("node-a", digest("x"))
	if err != nil {
		t.Fatalf("the credential once written: %v", err)
	}
	if err := c.Check("node-a", digest("x"), cert, sig); err != nil {
		t.Fatalf("the client CA once written: %v", err)
	}
	if err := c.Check("node-a", digest("x"), []byte("junk"), sig); err == nil || !strings.Contains(err.Error(), "its certificate") {
		t.Errorf("a certificate that does not parse: %v", err)
	}
}

// k3s's kubelet.kubeconfig names its certificate and key files, and k3s
// renews those files in place: the renewed certificate is the one signed
// with, though the kubeconfig did not change.
func TestNodeWordFollowsRenewedCertificateFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewClientCA(t, dir)
	c := New(ca.KubeconfigWithFiles(t, "kubelet", "system:node:node-a", "system:nodes"), ca.Path)
	if _, _, err := c.Sign("node-a", digest("x")); err != nil {
		t.Fatal(err)
	}
	// Renewed (here: to another name, so that it shows).
	ca.IssueFiles(t, "kubelet", "system:node:node-b", "system:nodes")
	if _, _, err := c.Sign("node-a", digest("x")); err == nil || !strings.Contains(err.Error(), `"system:node:node-b"`) {
		t.Fatalf("after the certificate file changed: %v, want it read again", err)
	}
	cert, sig, err := c.Sign("node-b", digest("x"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check("node-b", digest("x"), cert, sig); err != nil {
		t.Fatal(err)
	}
	var none *Credential
	if _, _, err := none.Sign("node-a", digest("x")); err == nil {
		t.Error("no credential signed")
	}
	if err := none.Check("node-a", digest("x"), cert, sig); err == nil {
		t.Error("no client CA checked a signature")
	}
}
