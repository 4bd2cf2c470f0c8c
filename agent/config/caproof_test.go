package config

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The CA proof verifies for the cluster's key and that nonce only, and
// binds the hash: an answer with another hash, for another nonce, under
// another cluster's key or another cluster id does not verify. Nor does a
// proof of life passed off as a CA proof.
func TestCAProof(t *testing.T) {
	const cluster = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	key, err := NewLifeKey(cluster, "s3cret-password")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := NewLifeKey(cluster, "another-password")
	otherCluster, _ := NewLifeKey("00000000-0000-4000-8000-000000000000", "s3cret-password")
	nonce, _ := NewLifeNonce()
	later, _ := NewLifeNonce()
	ca := []byte("the cluster CA")
	answer := key.ProveCA("node-a", nonce, ca)
	if hash, err := key.VerifyCA(nonce, answer); err != nil || hash != CAHash(ca) {
		t.Fatalf("the cluster's own answer: %q, %v", hash, err)
	}
	swapped := answer
	swapped.CAHash = CAHash([]byte("another CA"))
	life := answer
	life.Proof = key.Answer("node-a", nonce).Proof
	for _, c := range []struct {
		name   string
		key    LifeKey
		nonce  []byte
		answer CAProofAnswer
	}{
		{"another CA's hash", key, nonce, swapped},
		{"an answer to another challenge", key, later, answer},
		{"another cluster's key", key, nonce, other.ProveCA("node-a", nonce, ca)},
		{"another cluster id", key, nonce, otherCluster.ProveCA("node-a", nonce, ca)},
		{"a proof of life", key, nonce, life},
		{"no key", LifeKey{}, nonce, answer},
	} {
		if hash, err := c.key.VerifyCA(c.nonce, c.answer); err == nil {
			t.Errorf("%s verified (hash %s)", c.name, hash)
		}
	}
}

// The handler proves the CA its reader returns, and says 503 while there
// is none or it cannot be read.
func TestCAProofHandler(t *testing.T) {
	key, _ := NewLifeKey("7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", "s3cret-password")
	nonce, _ := NewLifeNonce()
	var ca []byte
	var readErr error
	h := CAProofHandler(key, "node-a", func() ([]byte, error) { return ca, readErr })
	get := func(query string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, CAProofPath+query, nil))
		return rec
	}
	q := "?nonce=" + hex.EncodeToString(nonce)
	if rec := get(q); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "no cluster CA") {
		t.Errorf("no CA yet: %d %q", rec.Code, rec.Body.String())
	}
	readErr = errors.New("permission denied")
	if rec := get(q); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("an unreadable CA: %d", rec.Code)
	}
	readErr, ca = nil, []byte("the cluster CA")
	rec := get(q)
	var a CAProofAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); rec.Code != http.StatusOK || err != nil {
		t.Fatalf("with a CA: %d %v", rec.Code, err)
	}
	if hash, err := key.VerifyCA(nonce, a); err != nil || hash != CAHash(ca) {
		t.Errorf("its answer: %q, %v", hash, err)
	}
	if rec := get("?nonce=abc"); rec.Code != http.StatusBadRequest {
		t.Errorf("a bad nonce: %d", rec.Code)
	}
	if rec := get(""); rec.Code != http.StatusBadRequest {
		t.Errorf("no nonce: %d", rec.Code)
	}
}
