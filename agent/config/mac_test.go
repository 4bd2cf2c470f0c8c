package config

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The three signed answers keep their wire format: these proofs were made
// by the code before the MACs shared keyedMAC, and an agent of either
// version must verify the other's answers during a rolling update.
func TestProofMACsKnownAnswers(t *testing.T) {
	const cluster = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	nonce := bytes.Repeat([]byte{0x5a}, LifeNonceSize)
	life, err := NewLifeKey(cluster, "s3cret-password")
	if err != nil {
		t.Fatal(err)
	}
	membership := MembershipKey{clusterID: cluster, key: bytes.Repeat([]byte{0x42}, 32)}
	for _, c := range []struct{ what, got, want string }{
		{"proof of life", life.Answer("node-a", nonce).Proof, "313bcd2fecf06da8e3ebb7c845de06f91d0516621ef08a4375a6e3c94960a997"},
		{"CA proof", life.ProveCA("node-a", nonce, []byte("-----BEGIN CERTIFICATE-----\n")).Proof, "e9512de0f48955282432a47dd5e3a324d31cdfe80aba543cb73a7105ed32d85a"},
		{"membership", membership.SignMembership("node-a", "node-b", "6FBD5E32-4143-4425-A2E0-9B7CE947E609", VerdictRemoved, "deleted 3m ago", nonce).Proof, "6b27a820c6cacdab95f09cb92847fee01965844d5c6095bf517fb2baf2f99725"},
	} {
		if c.got != c.want {
			t.Errorf("%s: proof %s, want %s", c.what, c.got, c.want)
		}
	}
}

// Both proof handlers refuse alike before anything is proved: anything but
// GET with 405, an agent without the cluster's key with 503 whatever the
// nonce, a bad nonce with 400.
func TestProofHandlersRefuse(t *testing.T) {
	key, err := NewLifeKey("7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", "pw")
	if err != nil {
		t.Fatal(err)
	}
	ca := func() ([]byte, error) { return []byte("ca"), nil }
	good := "?nonce=" + strings.Repeat("ab", LifeNonceSize)
	for name, handler := range map[string]func(LifeKey) http.Handler{
		"life": func(k LifeKey) http.Handler { return LifeProofHandler(k, "node-a", nil) },
		"CA":   func(k LifeKey) http.Handler { return CAProofHandler(k, "node-a", ca) },
	} {
		for _, c := range []struct {
			method, query string
			key           LifeKey
			code          int
		}{
			{http.MethodGet, good, key, http.StatusOK},
			{http.MethodPost, good, key, http.StatusMethodNotAllowed},
			{http.MethodGet, good, LifeKey{}, http.StatusServiceUnavailable},
			{http.MethodGet, "?nonce=abcd", LifeKey{}, http.StatusServiceUnavailable},
			{http.MethodGet, "?nonce=abcd", key, http.StatusBadRequest},
		} {
			rec := httptest.NewRecorder()
			handler(c.key).ServeHTTP(rec, httptest.NewRequest(c.method, "/status/x"+c.query, nil))
			if rec.Code != c.code {
				t.Errorf("%s proof, %s %s, key %v: %d %s, want %d", name, c.method, c.query, c.key.Valid(), rec.Code, rec.Body, c.code)
			}
			if c.code == http.StatusMethodNotAllowed && rec.Header().Get("Allow") != http.MethodGet {
				t.Errorf("%s proof: 405 without Allow: GET", name)
			}
		}
	}
}
