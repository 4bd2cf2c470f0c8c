package config

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Proof of life: before the failover guard force-deletes a lost node's pods
// it asks that node, on its cluster address, to prove that its agent still
// runs. Any HTTP server can answer GET /status (a transparent proxy, another
// device that took the address, an attacker); only an agent of this cluster
// holds the cluster token. The prober sends a fresh random nonce; the agent
// answers an HMAC-SHA256, under a key derived from the token for this use
// alone, over the cluster id, its own node name and that nonce. The token
// never leaves the node, an answer is good for one nonce only (a recorded
// answer replayed later does not verify), and an agent signs only its own
// name (it cannot be asked to vouch for another node).

// LifeProofPath is where an agent answers a proof-of-life challenge, beside
// GET /status on its cluster address: GET LifeProofPath?nonce=<hex>.
const LifeProofPath = "/status/proof"

// LifeNonceSize is the size of a challenge's nonce: 32 random bytes.
const LifeNonceSize = 32

// lifeProofLabel separates this key and these MACs from every other use of
// the cluster token; lifeStateLabel the answers that also sign the
// agent's fence state (LifeState) from those that do not.
const (
	lifeProofLabel = "sitecon life-proof v1"
	lifeStateLabel = "sitecon life-proof v2 state"
	// lifeNodeLabel: an answer signed with the node's own credential.
	lifeNodeLabel = "sitecon life-proof v3 node"
)

// LifeKey proves and checks proofs of life for one cluster. The zero value
// holds no key: it proves nothing and verifies nothing.
type LifeKey struct {
	clusterID string
	key       []byte
	// word, when set, signs this node's answers with its own credential
	// and requires another node's to be so signed (WithNodeWord).
	word NodeWord
}

// NodeWord signs a node's word with the node's own credential and checks
// another node's (agent/nodecred): the token's MAC shows only that some
// node of the cluster signed, and every node holds the token.
type NodeWord interface {
	// Sign signs digest as node: node's certificate (DER) and the
	// signature. It fails when this node's credential is not node's own.
	Sign(node string, digest []byte) (cert, sig []byte, err error)
	// Check checks that sig over digest was made with node's own
	// credential, cert showing it.
	Check(node string, digest, cert, sig []byte) error
}

// ErrCannotCheckNodeWord: this node cannot check another node's signed
// word (it lacks the cluster's client CA): a fault of the reader, not of
// the node that answered.
var ErrCannotCheckNodeWord = errors.New("this node cannot check a node's own signature")

// WithNodeWord is k with this node's answers signed by word as well, and
// another node's answers good only when signed so: a worker that holds
// the token cannot answer in another node's name (say that it fenced, or
// that it reaches the API server).
func (k LifeKey) WithNodeWord(word NodeWord) LifeKey {
	k.word = word
	return k
}

// NewLifeKey derives the proof-of-life key of the cluster from its token.
// The token's password is what every node shares: a node joined with the
// secure form (K10<ca-hash>::server:<password>) and one configured with
// the password alone derive the same key.
func NewLifeKey(clusterID string, token Secret) (LifeKey, error) {
	_, password := ParseToken(token.Reveal())
	switch {
	case clusterID == "":
		return LifeKey{}, errors.New("proof of life: no cluster id")
	case password == "":
		return LifeKey{}, errors.New("proof of life: no cluster token")
	}
	key, err := hkdf.Key(sha256.New, []byte(password), []byte(lifeProofLabel), "key", sha256.Size)
	if err != nil {
		return LifeKey{}, fmt.Errorf("proof of life: %w", err)
	}
	return LifeKey{clusterID: strings.ToLower(clusterID), key: key}, nil
}

// Valid says whether the key can prove and check anything.
func (k LifeKey) Valid() bool { return len(k.key) != 0 }

// ClusterID is the cluster the key proves for (lower case).
func (k LifeKey) ClusterID() string { return k.clusterID }

// String, GoString and LogValue keep the key out of logs and error texts.
func (k LifeKey) String() string { return fmt.Sprintf("[life key of cluster %s]", k.clusterID) }

// GoString: see String.
func (k LifeKey) GoString() string { return k.String() }

// LogValue: see String.
func (k LifeKey) LogValue() slog.Value { return slog.StringValue(k.String()) }

// mac is the keyed MAC under lifeProofLabel over the cluster id, the node
// name and the nonce.
func (k LifeKey) mac(node string, nonce []byte) []byte {
	return keyedMAC(k.key, lifeProofLabel, []byte(k.clusterID), []byte(node), nonce)
}

// LifeProofAnswer is an agent's answer to a challenge.
type LifeProofAnswer struct {
	ClusterID string `json:"cluster_id"`
	Node      string `json:"node"`
	// State is the agent's fence state, signed with the rest (nil: an
	// answer that says nothing of it, as an older agent's).
	State *LifeState `json:"state,omitempty"`
	// Proof is the hex HMAC over the cluster id, the node and the nonce,
	// and the state when there is one.
	Proof string `json:"proof"`
	// NodeCert and NodeSig are the node's own certificate (DER) and its
	// signature over what Proof covers (WithNodeWord); empty when the
	// node could not sign with its credential.
	NodeCert []byte `json:"node_cert,omitempty"`
	NodeSig  []byte `json:"node_sig,omitempty"`
}

// Answer is node's answer to the challenge nonce, without a state.
func (k LifeKey) Answer(node string, nonce []byte) LifeProofAnswer {
	a := LifeProofAnswer{ClusterID: k.clusterID, Node: node, Proof: hex.EncodeToString(k.mac(node, nonce))}
	k.signAsNode(&a, nonce)
	return a
}

// AnswerWith is node's answer to the challenge nonce, vouching for state.
func (k LifeKey) AnswerWith(node string, nonce []byte, state LifeState) LifeProofAnswer {
	a := LifeProofAnswer{ClusterID: k.clusterID, Node: node, State: &state, Proof: hex.EncodeToString(k.stateMAC(node, nonce, state))}
	k.signAsNode(&a, nonce)
	return a
}

// nodeDigest is what a node signs of its answer with its own credential:
// the cluster, the node, the nonce and the state (none: an empty field).
func (k LifeKey) nodeDigest(node string, nonce []byte, state *LifeState) []byte {
	var st []byte
	if state != nil {
		st = state.macField()
	}
	return framedSum(lifeNodeLabel, []byte(k.clusterID), []byte(node), nonce, st)
}

// signAsNode adds the node's own signature to a, when this key has a
// NodeWord that can sign as a.Node; an answer it cannot sign goes without
// and its reader treats it as the word of an unknown signer.
func (k LifeKey) signAsNode(a *LifeProofAnswer, nonce []byte) {
	if k.word == nil {
		return
	}
	cert, sig, err := k.word.Sign(a.Node, k.nodeDigest(a.Node, nonce, a.State))
	if err == nil {
		a.NodeCert, a.NodeSig = cert, sig
	}
}

// stateMAC is the keyed MAC of an answer with a state.
func (k LifeKey) stateMAC(node string, nonce []byte, state LifeState) []byte {
	return keyedMAC(k.key, lifeStateLabel, []byte(k.clusterID), []byte(node), nonce, state.macField())
}

// Verify checks that a is node's answer to nonce in this key's cluster,
// its state included; the error says what is wrong with it.
func (k LifeKey) Verify(node string, nonce []byte, a LifeProofAnswer) error {
	if !k.Valid() {
		return errors.New("no key to check a proof with")
	}
	if !strings.EqualFold(a.ClusterID, k.clusterID) {
		return fmt.Errorf("it speaks for cluster %q, not %s", a.ClusterID, k.clusterID)
	}
	if a.Node != node {
		return fmt.Errorf("it speaks for node %q, not %s", a.Node, node)
	}
	want := k.mac(node, nonce)
	if a.State != nil {
		want = k.stateMAC(node, nonce, *a.State)
	}
	got, err := hex.DecodeString(a.Proof)
	if err != nil || !hmac.Equal(got, want) {
		return errors.New("its proof does not verify with the cluster's key (another cluster's token, or an answer to another challenge)")
	}
	if k.word == nil {
		return nil
	}
	if len(a.NodeSig) == 0 {
		return fmt.Errorf("it is not signed with node %s's own credential (an agent whose node has no credential yet, or another node answering in its name)", node)
	}
	if err := k.word.Check(node, k.nodeDigest(node, nonce, a.State), a.NodeCert, a.NodeSig); err != nil {
		return fmt.Errorf("its signature as node %s does not hold: %w", node, err)
	}
	return nil
}

// NewLifeNonce is a fresh challenge.
func NewLifeNonce() ([]byte, error) {
	nonce := make([]byte, LifeNonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return nonce, nil
}

// LifeProofHandler answers GET LifeProofPath?nonce=<hex> with node's proof
// of life, as JSON, with status's state signed in it (none when status is
// nil). It answers whatever the API server's state: the proof says that
// this node's agent runs, which is what a node cut off from the others
// must still be able to show, and whether it has fenced.
func LifeProofHandler(key LifeKey, node string, status *LifeStatus) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nonce, ok := key.challenge(w, r)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		answer := key.Answer(node, nonce)
		if status != nil {
			answer = key.AnswerWith(node, nonce, status.State(time.Now()))
		}
		_ = json.NewEncoder(w).Encode(answer)
	})
}

// challenge is the nonce of a request for a proof made with k: anything
// but GET is answered 405, an agent without the cluster's key 503 and a
// bad nonce 400, and then ok is false.
func (k LifeKey) challenge(w http.ResponseWriter, r *http.Request) (nonce []byte, ok bool) {
	if !onlyGet(w, r) {
		return nil, false
	}
	if !k.Valid() {
		http.Error(w, "this agent has no cluster token to prove with", http.StatusServiceUnavailable)
		return nil, false
	}
	return NonceOf(w, r)
}

// onlyGet answers anything but GET with 405 (the proofs and the
// membership question are GETs) and says whether r may go on.
func onlyGet(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return false
	}
	return true
}

// NonceOf is the asker's nonce of a proof request (GET ...?nonce=<hex>,
// LifeNonceSize bytes), the one check every signed answer starts with;
// anything else is answered 405 or 400 here and ok is false.
func NonceOf(w http.ResponseWriter, r *http.Request) (nonce []byte, ok bool) {
	if !onlyGet(w, r) {
		return nil, false
	}
	nonce, err := hex.DecodeString(r.URL.Query().Get("nonce"))
	if err != nil || len(nonce) != LifeNonceSize {
		http.Error(w, fmt.Sprintf("nonce: want %d bytes in hex", LifeNonceSize), http.StatusBadRequest)
		return nil, false
	}
	return nonce, true
}
