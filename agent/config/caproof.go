package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// The cluster's CA, vouched for with the cluster key. A cluster formed
// offline hands out the token's password alone (k3s's short form): no CA
// existed to pin when the bundles were made, and k3s makes it at the seed's
// first start. A joiner holding it would trust whichever server answers at
// the join address, and give it the token. So before k3s joins, the joiner
// asks the agent at the join address for the hash of the CA its k3s serves,
// with a fresh nonce; the agent answers an HMAC over the cluster id, its
// node name, the nonce and that hash under the cluster's proof key
// (LifeKey, derived from the token). Only a holder of the token can answer;
// the joiner then checks that /cacerts serves that CA, and gives k3s the
// token pinned to it (K10<hash>::server:<password>), so k3s too joins only a
// server holding that CA's key.

// CAProofPath is where an agent vouches for its cluster's CA, beside GET
// /status on its cluster address: GET CAProofPath?nonce=<hex>.
const CAProofPath = "/status/ca"

// caProofLabel separates these MACs from the proof of life's and every
// other use of the cluster key.
const caProofLabel = "sitecon cluster-ca v1"

// CAProofAnswer is an agent's answer to a CA challenge.
type CAProofAnswer struct {
	ClusterID string `json:"cluster_id"`
	Node      string `json:"node"`
	// CAHash is the hex SHA-256 of the CA bundle its k3s serves at /cacerts.
	CAHash string `json:"ca_sha256"`
	// Proof is the hex HMAC over the cluster id, the node, the nonce and CAHash.
	Proof string `json:"proof"`
}

// caMAC is the keyed MAC under caProofLabel over the cluster id, the
// node, the nonce and the CA's hash.
func (k LifeKey) caMAC(node string, nonce []byte, caHash string) []byte {
	return keyedMAC(k.key, caProofLabel, []byte(k.clusterID), []byte(node), nonce, []byte(caHash))
}

// CAHash is the hash a secure token pins for the CA bundle caPEM.
func CAHash(caPEM []byte) string {
	sum := sha256.Sum256(caPEM)
	return hex.EncodeToString(sum[:])
}

// ProveCA is node's answer to the challenge nonce for the CA bundle caPEM.
func (k LifeKey) ProveCA(node string, nonce, caPEM []byte) CAProofAnswer {
	hash := CAHash(caPEM)
	return CAProofAnswer{ClusterID: k.clusterID, Node: node, CAHash: hash, Proof: hex.EncodeToString(k.caMAC(node, nonce, hash))}
}

// VerifyCA checks that a answers nonce in this key's cluster and returns
// the CA hash it vouches for; the error says what is wrong with it.
func (k LifeKey) VerifyCA(nonce []byte, a CAProofAnswer) (string, error) {
	if !k.Valid() {
		return "", errors.New("no cluster key to check the CA's proof with")
	}
	if !strings.EqualFold(a.ClusterID, k.clusterID) {
		return "", fmt.Errorf("it speaks for cluster %q, not %s", a.ClusterID, k.clusterID)
	}
	if _, err := hex.DecodeString(a.CAHash); err != nil || len(a.CAHash) != sha256.Size*2 {
		return "", fmt.Errorf("its CA hash %q is not a SHA-256", a.CAHash)
	}
	got, err := hex.DecodeString(a.Proof)
	if err != nil || !hmac.Equal(got, k.caMAC(a.Node, nonce, strings.ToLower(a.CAHash))) {
		return "", errors.New("its proof does not verify with the cluster's key (another cluster's token, or an answer to another challenge)")
	}
	return strings.ToLower(a.CAHash), nil
}

// ErrNoClusterCA is a CA reader's answer while this node's k3s has made or
// received no CA yet.
var ErrNoClusterCA = errors.New("no cluster CA on this node yet")

// CAProofHandler answers GET CAProofPath?nonce=<hex> with node's proof of
// the CA bundle ca reads (this node's k3s's), as JSON; 503 while there is
// none, or while it cannot be read.
func CAProofHandler(key LifeKey, node string, ca func() ([]byte, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nonce, ok := key.challenge(w, r)
		if !ok {
			return
		}
		pem, err := ca()
		if err == nil && len(pem) == 0 {
			err = ErrNoClusterCA
		}
		if err != nil {
			// The reason names a path on this node, no secret.
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(key.ProveCA(node, nonce, pem))
	})
}
