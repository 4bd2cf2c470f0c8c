package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// keyedMAC is HMAC-SHA256 under key over the domain label and the fields,
// each length-prefixed (8 bytes, big-endian) so that no two inputs share a
// message. The label, a field like the others, keeps the MACs of one use
// (proof of life, the CA's proof, a membership verdict) from standing for
// another's.
func keyedMAC(key []byte, label string, fields ...[]byte) []byte {
	return framed(hmac.New(sha256.New, key), label, fields...)
}

// framedSum is the SHA-256 of the same framing as keyedMAC, without a key:
// what a node signs with its own credential (NodeWord).
func framedSum(label string, fields ...[]byte) []byte {
	return framed(sha256.New(), label, fields...)
}

func framed(m hash.Hash, label string, fields ...[]byte) []byte {
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
