package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Membership answers: a server that has been a member asks its peers, on
// their cluster addresses, whether it still is one before it starts k3s
// (k3s restarts an init node removed from etcd as a cluster of its own,
// k3s-io/k3s#13623). The answer "you were removed" stops a device, so only
// an agent of this cluster may give it: the peer signs its verdict, with
// the cluster's key (the proof of life's, LifeKey), over the asker's fresh
// nonce, the node and device asked about, the verdict and its evidence.
// The token never leaves a node, a recorded answer does not verify for
// another nonce, and a verdict cannot be changed on the way (a forged
// "removed", a "member" turned into "removed").

// MembershipPath is where an agent answers, beside GET /status on its
// cluster address: GET MembershipPath?node=<name>&uuid=<device>&nonce=<hex>.
const MembershipPath = "/status/membership"

// membershipLabel separates these MACs from the proof of life's and every
// other use of the cluster token.
const membershipLabel = "sitecon membership v1"

// Verdict is a peer's answer about a node's membership.
type Verdict string

// Verdicts. Only VerdictRemoved holds a device; VerdictUnknown is what a
// peer says whenever it cannot read the cluster now (no quorum, its API
// not synced, a read failed), and it holds nothing.
const (
	VerdictMember  Verdict = "member"
	VerdictRemoved Verdict = "removed"
	VerdictUnknown Verdict = "unknown"
)

// MembershipAnswer is a peer's signed answer about node.
type MembershipAnswer struct {
	ClusterID string `json:"cluster_id"`
	// Answerer is the peer that answered, by node name.
	Answerer string `json:"answerer"`
	// Node and UUID are what was asked about.
	Node    string  `json:"node"`
	UUID    string  `json:"uuid,omitempty"`
	Verdict Verdict `json:"verdict"`
	// Evidence says, in words, what the verdict rests on.
	Evidence string `json:"evidence"`
	// Proof is the hex HMAC over all of the above and the asker's nonce.
	Proof string `json:"proof"`
}

// membershipMAC is HMAC-SHA256 over the label, the cluster id, the
// answerer, the node and UUID asked about, the verdict, the evidence and
// the nonce, each length-prefixed so that no two inputs share a message.
func (k LifeKey) membershipMAC(a MembershipAnswer, nonce []byte) []byte {
	m := hmac.New(sha256.New, k.key)
	for _, field := range [][]byte{[]byte(membershipLabel), []byte(k.clusterID), []byte(a.Answerer),
		[]byte(a.Node), []byte(strings.ToLower(a.UUID)), []byte(a.Verdict), []byte(a.Evidence), nonce} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(field)))
		m.Write(n[:])
		m.Write(field)
	}
	return m.Sum(nil)
}

// SignMembership is answerer's signed verdict about node (device uuid)
// for the asker's nonce.
func (k LifeKey) SignMembership(answerer, node, uuid string, verdict Verdict, evidence string, nonce []byte) MembershipAnswer {
	a := MembershipAnswer{ClusterID: k.clusterID, Answerer: answerer, Node: node, UUID: uuid, Verdict: verdict, Evidence: evidence}
	a.Proof = hex.EncodeToString(k.membershipMAC(a, nonce))
	return a
}

// VerifyMembership checks that a answers, in this key's cluster, the
// question about node (device uuid) asked with nonce, and that an agent
// of the cluster signed it; the error says what is wrong with it.
func (k LifeKey) VerifyMembership(node, uuid string, nonce []byte, a MembershipAnswer) error {
	switch {
	case !k.Valid():
		return errors.New("no key to check an answer with")
	case !strings.EqualFold(a.ClusterID, k.clusterID):
		return fmt.Errorf("it speaks for cluster %q, not %s", a.ClusterID, k.clusterID)
	case a.Node != node || !strings.EqualFold(a.UUID, uuid):
		return fmt.Errorf("it answers about %q (%q), not %s (%s)", a.Node, a.UUID, node, uuid)
	}
	switch a.Verdict {
	case VerdictMember, VerdictRemoved, VerdictUnknown:
	default:
		return fmt.Errorf("its verdict %q is none of member, removed, unknown", a.Verdict)
	}
	got, err := hex.DecodeString(a.Proof)
	if err != nil || !hmac.Equal(got, k.membershipMAC(a, nonce)) {
		return errors.New("its proof does not verify with the cluster's key (another cluster's token, an answer to another question, or not an agent's)")
	}
	return nil
}
