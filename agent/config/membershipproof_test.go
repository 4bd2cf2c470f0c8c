package config

import (
	"strings"
	"testing"
)

func TestMembershipProof(t *testing.T) {
	const cluster = "7F3E2A10-8C4B-4F8E-9A55-2B1C3D4E5F60"
	const uuid = "6fbd5e32-4143-4425-a2e0-9b7ce947e609"
	key, err := NewLifeKey(cluster, "s3cret-password")
	if err != nil {
		t.Fatal(err)
	}
	// A node joined with k3s's secure token form checks with the same key.
	secure, _ := NewLifeKey(cluster, Secret(SecureToken("s3cret-password", []byte("ca"))))
	other, _ := NewLifeKey(cluster, "another-password")
	otherCluster, _ := NewLifeKey("00000000-0000-4000-8000-000000000000", "s3cret-password")
	nonce, _ := NewLifeNonce()
	later, _ := NewLifeNonce()
	removed := key.SignMembership("node-r", "node-q", uuid, VerdictRemoved, "its Node node-q is gone", nonce)
	if err := secure.VerifyMembership("node-q", strings.ToUpper(uuid), nonce, removed); err != nil {
		t.Fatalf("a genuine answer: %v", err)
	}
	// The proof of life of the same node and nonce is no membership answer.
	life := key.Answer("node-r", nonce)
	changed := func(f func(*MembershipAnswer)) MembershipAnswer {
		a := key.SignMembership("node-r", "node-q", uuid, VerdictMember, "its Node node-q is in the cluster", nonce)
		f(&a)
		return a
	}
	for _, c := range []struct {
		name  string
		key   LifeKey
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
		{"another token", other, "node-q", uuid, nonce, removed, "does not verify"},
		{"another cluster", otherCluster, "node-q", uuid, nonce, removed, "cluster"},
		{"no key", LifeKey{}, "node-q", uuid, nonce, removed, "no key"},
	} {
		if err := c.key.VerifyMembership(c.node, c.uuid, c.nonce, c.a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (want an error with %q)", c.name, err, c.want)
		}
	}
}
