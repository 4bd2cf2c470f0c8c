package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// keyedMAC is HMAC-SHA256 under key over the domain label and the fields,
// each length-prefixed (8 bytes, big-endian) so that no two inputs share a
// message. The label, a field like the others, keeps the MACs of one use
// (proof of life, the CA's proof, a membership verdict) from standing for
// another's.
func keyedMAC(key []byte, label string, fields ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	write := func(field []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(field)))
		m.Write(n[:])
		m.Write(field)
	}
	write([]byte(label))
	for _, field := range fields {
		write(field)
	}
	return m.Sum(nil)
}
