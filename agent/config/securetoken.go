package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// k3s's secure token form: K10<sha256 of the cluster CA bundle>::server:<password>.
// A joiner holding it checks the server it reaches serves that CA before it
// trusts it; the short form (the password alone) trusts whatever answers at
// the join address first.
const secureTokenPrefix = "K10"

// SecureToken puts a token into k3s's secure form for the CA bundle caPEM
// (the file k3s serves at /cacerts: <data-dir>/server/tls/server-ca.crt).
// A token already in that form keeps its password and takes this CA hash.
func SecureToken(token string, caPEM []byte) string {
	sum := sha256.Sum256(caPEM)
	return PinToken(token, hex.EncodeToString(sum[:]))
}

// ParseToken splits a k3s token into the CA hash it pins (empty for the
// short form) and its password.
func ParseToken(token string) (caHash, password string) {
	if !strings.HasPrefix(token, secureTokenPrefix) {
		return "", token
	}
	rest := strings.TrimPrefix(token, secureTokenPrefix)
	hash, creds, ok := strings.Cut(rest, "::")
	if !ok || len(hash) != sha256.Size*2 {
		return "", token
	}
	if _, err := hex.DecodeString(hash); err != nil {
		return "", token
	}
	// creds is "<user>:<password>"; k3s's server user is "server".
	if _, pw, ok := strings.Cut(creds, ":"); ok {
		return hash, pw
	}
	return hash, creds
}

// PinToken puts a token into k3s's secure form for the CA hash caHash (hex
// SHA-256 of the CA bundle, as ParseToken returns it).
func PinToken(token, caHash string) string {
	_, password := ParseToken(token)
	return secureTokenPrefix + strings.ToLower(caHash) + "::server:" + password
}
