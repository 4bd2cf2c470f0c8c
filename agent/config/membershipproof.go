package config

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// Membership answers: a server that has been a member asks its peers, on
// their cluster addresses, whether it still is one before it starts k3s
// (k3s restarts an init node removed from etcd as a cluster of its own,
// k3s-io/k3s#13623). The answer "you were removed" stops a device, so only
// a server of this cluster may give it: every node holds the cluster token,
// workers too, and a worker is not trusted with the cluster (one
// compromised worker must not hold every server that reboots). The peer
// signs its verdict with the membership key (MembershipKey), derived from
// the cluster's server CA private key, which k3s gives servers only (the
// first server makes it, joined servers get it with k3s's bootstrap data;
// agents keep the CA's certificate alone). The MAC covers the asker's
// fresh nonce, the node and device asked about, the verdict and its
// evidence: the key never leaves a server, a recorded answer does not
// verify for another nonce, and a verdict cannot be changed on the way (a
// forged "removed", a "member" turned into "removed").

// MembershipPath is where an agent answers, beside GET /status on its
// cluster address: GET MembershipPath?node=<name>&uuid=<device>&nonce=<hex>.
const MembershipPath = "/status/membership"

// membershipLabel separates this key and these MACs from every other use
// of the server CA key (v2: v1 keyed them with the cluster token).
const membershipLabel = "sitecon membership v2"

// MembershipKey signs and checks membership answers for one cluster. The
// zero value holds no key: it signs nothing and verifies nothing.
type MembershipKey struct {
	clusterID string
	key       []byte
}

// NewMembershipKey derives the membership key of the cluster from its
// server CA private key (PEM, as k3s keeps it in
// <data-dir>/server/tls/server-ca.key): HKDF-SHA256 over the key's PKCS#8
// DER, so that servers holding the same key in another PEM form (SEC 1,
// PKCS#8, PKCS#1) derive the same membership key, with this use's label
// and the cluster id.
func NewMembershipKey(clusterID string, serverCAKeyPEM []byte) (MembershipKey, error) {
	if clusterID == "" {
		return MembershipKey{}, errors.New("membership key: no cluster id")
	}
	der, err := privateKeyDER(serverCAKeyPEM)
	if err != nil {
		return MembershipKey{}, fmt.Errorf("membership key: the server CA key: %w", err)
	}
	clusterID = strings.ToLower(clusterID)
	key, err := hkdf.Key(sha256.New, der, []byte(membershipLabel), clusterID, sha256.Size)
	if err != nil {
		return MembershipKey{}, fmt.Errorf("membership key: %w", err)
	}
	return MembershipKey{clusterID: clusterID, key: key}, nil
}

// privateKeyDER is the PKCS#8 DER of the first private key in data.
func privateKeyDER(data []byte) ([]byte, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, errors.New("no PEM private key in it")
		}
		var (
			key any
			err error
		)
		switch block.Type {
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("unreadable %s: %w", block.Type, err)
		}
		return x509.MarshalPKCS8PrivateKey(key)
	}
}

// Valid says whether the key can sign and check anything.
func (k MembershipKey) Valid() bool { return len(k.key) != 0 }

// String, GoString and LogValue keep the key out of logs and error texts.
func (k MembershipKey) String() string {
	return fmt.Sprintf("[membership key of cluster %s]", k.clusterID)
}

// GoString: see String.
func (k MembershipKey) GoString() string { return k.String() }

// LogValue: see String.
func (k MembershipKey) LogValue() slog.Value { return slog.StringValue(k.String()) }

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

// membershipMAC is the keyed MAC under membershipLabel over the cluster
// id, the answerer, the node and UUID asked about, the verdict, the
// evidence and the nonce.
func (k MembershipKey) membershipMAC(a MembershipAnswer, nonce []byte) []byte {
	return keyedMAC(k.key, membershipLabel, []byte(k.clusterID), []byte(a.Answerer),
		[]byte(a.Node), []byte(strings.ToLower(a.UUID)), []byte(a.Verdict), []byte(a.Evidence), nonce)
}

// SignMembership is answerer's signed verdict about node (device uuid)
// for the asker's nonce.
func (k MembershipKey) SignMembership(answerer, node, uuid string, verdict Verdict, evidence string, nonce []byte) MembershipAnswer {
	a := MembershipAnswer{ClusterID: k.clusterID, Answerer: answerer, Node: node, UUID: uuid, Verdict: verdict, Evidence: evidence}
	a.Proof = hex.EncodeToString(k.membershipMAC(a, nonce))
	return a
}

// VerifyMembership checks that a answers, in this key's cluster, the
// question about node (device uuid) asked with nonce, and that a server
// of the cluster signed it; the error says what is wrong with it.
func (k MembershipKey) VerifyMembership(node, uuid string, nonce []byte, a MembershipAnswer) error {
	switch {
	case !k.Valid():
		return errors.New("no membership key to check an answer with (this node holds no server CA key)")
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
		return errors.New("its proof does not verify with the cluster's membership key (another cluster's, an answer to another question, or not a server's: a worker's or a stranger's)")
	}
	return nil
}
