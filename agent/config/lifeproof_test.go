package config

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestLifeProof(t *testing.T) {
	const cluster = "7F3E2A10-8C4B-4F8E-9A55-2B1C3D4E5F60"
	plain, err := NewLifeKey(cluster, "s3cret-password")
	if err != nil {
		t.Fatal(err)
	}
	// A node joined with k3s's secure token form shares the password.
	secure, err := NewLifeKey(strings.ToLower(cluster), Secret(SecureToken("s3cret-password", []byte("ca"))))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewLifeKey(cluster, "another-password")
	otherCluster, _ := NewLifeKey("00000000-0000-4000-8000-000000000000", "s3cret-password")
	nonce, err := NewLifeNonce()
	if err != nil {
		t.Fatal(err)
	}
	later, _ := NewLifeNonce()
	answer := plain.Answer("node-b", nonce)
	if err := secure.Verify("node-b", nonce, answer); err != nil {
		t.Fatalf("the same cluster's key, token in secure form: %v", err)
	}
	forged := answer
	forged.Node = "node-c"
	for _, c := range []struct {
		name  string
		key   LifeKey
		node  string
		nonce []byte
		a     LifeProofAnswer
		want  string
	}{
		{"replayed for another challenge", plain, "node-b", later, answer, "does not verify"},
		{"another node's answer", plain, "node-c", nonce, answer, `node "node-b"`},
		{"a node name changed", plain, "node-c", nonce, forged, "does not verify"},
		{"another token", other, "node-b", nonce, answer, "does not verify"},
		{"another cluster", otherCluster, "node-b", nonce, answer, "cluster"},
		{"no proof", plain, "node-b", nonce, LifeProofAnswer{ClusterID: answer.ClusterID, Node: "node-b"}, "does not verify"},
		{"no key", LifeKey{}, "node-b", nonce, answer, "no key"},
	} {
		if err := c.key.Verify(c.node, c.nonce, c.a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (want an error with %q)", c.name, err, c.want)
		}
	}
	if _, err := NewLifeKey(cluster, ""); err == nil {
		t.Error("a key without a token")
	}
	// The key never prints.
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "key", plain)
	for _, s := range []string{fmt.Sprint(plain), fmt.Sprintf("%#v", plain), fmt.Sprintf("%+v", plain), logged.String()} {
		if strings.Contains(s, fmt.Sprintf("%x", plain.key)) || strings.Contains(s, "s3cret") || !strings.Contains(s, "life key") {
			t.Errorf("the key printed: %s", s)
		}
	}
}

func TestLifeProofHandler(t *testing.T) {
	key, _ := NewLifeKey("7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", "pw")
	h := LifeProofHandler(key, "node-a")
	for _, c := range []struct {
		target string
		code   int
	}{
		{LifeProofPath + "?nonce=" + strings.Repeat("ab", LifeNonceSize), http.StatusOK},
		{LifeProofPath + "?nonce=abcd", http.StatusBadRequest},
		{LifeProofPath, http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.target, nil))
		if rec.Code != c.code {
			t.Errorf("GET %s: %d %s", c.target, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	LifeProofHandler(LifeKey{}, "node-a").ServeHTTP(rec, httptest.NewRequest(http.MethodGet, LifeProofPath+"?nonce="+strings.Repeat("ab", LifeNonceSize), nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("without a key: %d", rec.Code)
	}
}
