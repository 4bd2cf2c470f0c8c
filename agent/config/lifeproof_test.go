package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
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
	h := LifeProofHandler(key, "node-a", nil)
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
	LifeProofHandler(LifeKey{}, "node-a", nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, LifeProofPath+"?nonce="+strings.Repeat("ab", LifeNonceSize), nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("without a key: %d", rec.Code)
	}
}

// The fence state an agent signs cannot be changed on the way: a peer's
// claim of contact with the quorum, or a node's word that it fenced, is
// believed only as signed.
func TestLifeProofState(t *testing.T) {
	key, _ := NewLifeKey("7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", "pw")
	nonce, _ := NewLifeNonce()
	status := NewLifeStatus(true, 28*time.Second)
	now := time.Now()
	status.QuorumContact(now.Add(-2 * time.Second))
	st := status.State(now)
	if ago, ok := st.QuorumContactAgo(); !ok || ago != 2*time.Second {
		t.Fatalf("contact %s ago (%v), want 2s", ago, ok)
	}
	if _, fenced := st.FencedFor(); fenced {
		t.Fatal("fenced before any stop")
	}
	answer := key.AnswerWith("node-b", nonce, st)
	if err := key.Verify("node-b", nonce, answer); err != nil {
		t.Fatalf("the signed state: %v", err)
	}
	for name, change := range map[string]func(*LifeState){
		"contact made fresher": func(s *LifeState) { s.QuorumContactAgoMs = 0 },
		"a fence claimed":      func(s *LifeState) { s.FencedForMs = 60000 },
		"fencing claimed":      func(s *LifeState) { s.Fencing = false },
		"timeout changed":      func(s *LifeState) { s.FailoverTimeoutMs = 60000 },
	} {
		forged := answer
		changed := *answer.State
		change(&changed)
		forged.State = &changed
		if err := key.Verify("node-b", nonce, forged); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
	// The state dropped: the MAC was over it, so the answer fails as v1.
	stripped := answer
	stripped.State = nil
	if err := key.Verify("node-b", nonce, stripped); err == nil {
		t.Error("an answer stripped of its state verified")
	}
	// Fenced from the first stop that worked, cleared by a lift.
	status.SetFenced(true, now.Add(-5*time.Second))
	status.SetFenced(true, now)
	if d, ok := status.State(now).FencedFor(); !ok || d != 5*time.Second {
		t.Fatalf("fenced for %s (%v), want 5s from the first stop", d, ok)
	}
	status.SetFenced(false, now)
	if _, ok := status.State(now).FencedFor(); ok {
		t.Fatal("still fenced after the lift")
	}
	// A handler with a status signs it.
	rec := httptest.NewRecorder()
	LifeProofHandler(key, "node-b", status).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, LifeProofPath+"?nonce="+fmt.Sprintf("%x", nonce), nil))
	var got LifeProofAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.State == nil || key.Verify("node-b", nonce, got) != nil {
		t.Fatalf("handler answer %s: %v", rec.Body, err)
	}
}
