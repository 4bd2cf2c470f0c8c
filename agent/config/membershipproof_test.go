package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

// testServerCAKey is a server CA private key as k3s writes it (SEC 1 PEM).
func testServerCAKey(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func TestMembershipProof(t *testing.T) {
	const cluster = "7F3E2A10-8C4B-4F8E-9A55-2B1C3D4E5F60"
	const uuid = "6fbd5e32-4143-4425-a2e0-9b7ce947e609"
	caKey := testServerCAKey(t)
	key, err := NewMembershipKey(cluster, caKey)
	if err != nil {
		t.Fatal(err)
	}
	// Another server holding the same key in PKCS#8 PEM checks with it.
	block, _ := pem.Decode(caKey)
	ec, _ := x509.ParseECPrivateKey(block.Bytes)
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(ec)
	sameInPKCS8, err := NewMembershipKey(cluster, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewMembershipKey(cluster, testServerCAKey(t))
	otherCluster, _ := NewMembershipKey("00000000-0000-4000-8000-000000000000", caKey)
	// A worker holds the token, not the server CA key: the best it can
	// sign with is a key made from the token (what v1 signed with).
	tokenKey, _ := NewLifeKey(cluster, "s3cret-password")
	workerKey := MembershipKey{clusterID: strings.ToLower(cluster), key: tokenKey.key}
	nonce, _ := NewLifeNonce()
	byWorker := workerKey.SignMembership("edge-w", "node-q", uuid, VerdictRemoved, "trust me", nonce)
	later, _ := NewLifeNonce()
	removed := key.SignMembership("node-r", "node-q", uuid, VerdictRemoved, "its Node node-q is gone", nonce)
	if err := sameInPKCS8.VerifyMembership("node-q", strings.ToUpper(uuid), nonce, removed); err != nil {
		t.Fatalf("a genuine answer: %v", err)
	}
	// The proof of life of the same node and nonce is no membership answer.
	life := tokenKey.Answer("node-r", nonce)
	changed := func(f func(*MembershipAnswer)) MembershipAnswer {
		a := key.SignMembership("node-r", "node-q", uuid, VerdictMember, "its Node node-q is in the cluster", nonce)
		f(&a)
		return a
	}
	for _, c := range []struct {
		name  string
		key   MembershipKey
		node  string
		uuid  string
		nonce []byte
		a     MembershipAnswer
		want  string
	}{
		{"replayed for another question", key, "node-q", uuid, later, removed, "does not verify"},
		{"about another node", key, "node-s", uuid, nonce, removed, "answers about"},
		{"about another device", key, "node-q", "0b5e0000-0000-4000-8000-00000000a11e", nonce, removed, "answers about"},
		{"member turned into removed", key, "node-q", uuid, nonce, changed(func(a *MembershipAnswer) { a.Verdict = VerdictRemoved }), "does not verify"},
		{"evidence rewritten", key, "node-q", uuid, nonce, changed(func(a *MembershipAnswer) { a.Evidence = "trust me" }), "does not verify"},
		{"answerer renamed", key, "node-q", uuid, nonce, changed(func(a *MembershipAnswer) { a.Answerer = "node-s" }), "does not verify"},
		{"a verdict of its own", key, "node-q", uuid, nonce, changed(func(a *MembershipAnswer) { a.Verdict = "gone" }), "none of"},
		{"unsigned", key, "node-q", uuid, nonce, MembershipAnswer{ClusterID: strings.ToLower(cluster), Answerer: "node-r", Node: "node-q", UUID: uuid, Verdict: VerdictRemoved}, "does not verify"},
		{"a proof of life in its place", key, "node-q", uuid, nonce, MembershipAnswer{ClusterID: life.ClusterID, Answerer: "node-r", Node: "node-q", UUID: uuid, Verdict: VerdictRemoved, Proof: life.Proof}, "does not verify"},
		{"a worker signs with the token", key, "node-q", uuid, nonce, byWorker, "does not verify"},
		{"another server CA key", other, "node-q", uuid, nonce, removed, "does not verify"},
		{"another cluster", otherCluster, "node-q", uuid, nonce, removed, "cluster"},
		{"no key", MembershipKey{}, "node-q", uuid, nonce, removed, "no membership key"},
	} {
		if err := c.key.VerifyMembership(c.node, c.uuid, c.nonce, c.a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (want an error with %q)", c.name, err, c.want)
		}
	}
}

// A key file that holds no private key gives no membership key: a node
// with it answers nothing rather than sign with a key derived from junk.
func TestNewMembershipKeyRefuses(t *testing.T) {
	const cluster = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not a key")})
	for name, c := range map[string]struct {
		id  string
		pem []byte
	}{
		"empty":         {cluster, nil},
		"a certificate": {cluster, cert},
		"a broken key":  {cluster, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte("junk")})},
		"no cluster id": {"", testServerCAKey(t)},
	} {
		if k, err := NewMembershipKey(c.id, c.pem); err == nil || k.Valid() {
			t.Errorf("%s: a key (%v), want an error", name, err)
		}
	}
	k, _ := NewMembershipKey(cluster, testServerCAKey(t))
	if s := k.String(); strings.Contains(s, string(k.key)) || !strings.Contains(s, cluster) {
		t.Errorf("String %q", s)
	}
}
