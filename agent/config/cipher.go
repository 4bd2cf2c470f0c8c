package config

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// CipherBlock is an EVE object-level-encrypted value (eve-api
// evecommon.CipherBlock) in its protobuf-JSON form, as the controller sends
// encrypted_cluster_token.
type CipherBlock struct {
	CipherContextID string `json:"cipherContextId"`
	InitialValue    []byte `json:"initialValue"`
	CipherData      []byte `json:"cipherData"`
	ClearTextSha256 []byte `json:"clearTextSha256"`
}

// ErrDecrypt covers every way decryption can fail; the message says which.
var ErrDecrypt = errors.New("cannot decrypt the cluster token")

// DecryptClusterToken decrypts an encrypted cluster token the way EVE does
// (OBJECT-LEVEL-ENCRYPTION): ECDH on P-256 between the device's ECDH private
// key and the controller certificate's public key; the AES-256 key is the
// SHA-256 of the shared point's X and Y, each padded to 32 bytes; AES-256-CFB
// with the block's initial value; the clear text's SHA-256 must match; the
// clear text is a protobuf EncryptionBlock whose cluster_token (field 8) is
// the token. Nothing partial is ever returned.
func DecryptClusterToken(block CipherBlock, deviceKeyPEM, controllerCertPEM []byte) (Secret, error) {
	if len(block.CipherData) == 0 || len(block.ClearTextSha256) == 0 {
		return "", fmt.Errorf("%w: the cipher block has no data or no clear-text hash", ErrDecrypt)
	}
	if len(block.InitialValue) != aes.BlockSize {
		return "", fmt.Errorf("%w: initial value is %d bytes, want %d", ErrDecrypt, len(block.InitialValue), aes.BlockSize)
	}
	priv, err := parseECPrivateKey(deviceKeyPEM)
	if err != nil {
		return "", fmt.Errorf("%w: device key: %v", ErrDecrypt, err)
	}
	pub, err := parseCertECPublicKey(controllerCertPEM)
	if err != nil {
		return "", fmt.Errorf("%w: controller certificate: %v", ErrDecrypt, err)
	}
	key, err := SharedAESKey(priv, pub)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrDecrypt, err)
	}
	aesBlock, err := aes.NewCipher(key[:])
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrDecrypt, err)
	}
	clear := make([]byte, len(block.CipherData))
	//nolint:staticcheck // CFB is what EVE's controllers encrypt with.
	cipher.NewCFBDecrypter(aesBlock, block.InitialValue).XORKeyStream(clear, block.CipherData)
	sum := sha256.Sum256(clear)
	if !bytes.Equal(sum[:], block.ClearTextSha256) {
		return "", fmt.Errorf("%w: the clear text does not match its SHA-256 (wrong device key or controller certificate, or a corrupted block)", ErrDecrypt)
	}
	token, err := clusterTokenField(clear)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrDecrypt, err)
	}
	return Secret(token), nil
}

// SharedAESKey is EVE's session key: SHA-256 over the ECDH shared point's X
// and Y coordinates, each left-padded to 32 bytes.
func SharedAESKey(priv *ecdsa.PrivateKey, peer *ecdsa.PublicKey) ([32]byte, error) {
	curve := elliptic.P256()
	// ECDH() refuses a point off the curve (crypto/ecdh's check).
	if _, err := peer.ECDH(); err != nil || peer.Curve != curve {
		return [32]byte{}, errors.New("the peer key is not a P-256 point")
	}
	d, err := priv.Bytes()
	if err != nil {
		return [32]byte{}, fmt.Errorf("private key: %v", err)
	}
	//nolint:staticcheck // crypto/ecdh returns only X; EVE's KDF hashes X and Y.
	x, y := curve.ScalarMult(peer.X, peer.Y, d)
	var point [64]byte
	x.FillBytes(point[:32])
	y.FillBytes(point[32:])
	return sha256.Sum256(point[:]), nil
}

// clusterTokenField reads cluster_token (field 8, a string) from a protobuf
// EncryptionBlock.
func clusterTokenField(msg []byte) (string, error) {
	const clusterTokenNumber = 8
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return "", errors.New("the clear text is not a protobuf EncryptionBlock")
		}
		msg = msg[n:]
		if num == clusterTokenNumber && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(msg)
			if n < 0 {
				return "", errors.New("cluster_token is truncated")
			}
			if len(v) == 0 {
				return "", errors.New("cluster_token is empty")
			}
			return string(v), nil
		}
		n = protowire.ConsumeFieldValue(num, typ, msg)
		if n < 0 {
			return "", errors.New("the clear text is not a protobuf EncryptionBlock")
		}
		msg = msg[n:]
	}
	return "", errors.New("the EncryptionBlock has no cluster_token")
}

// EncodeEncryptionBlock is the protobuf EncryptionBlock carrying a cluster
// token, as a controller builds it before encrypting.
func EncodeEncryptionBlock(token string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, 8, protowire.BytesType), token)
}

func parseECPrivateKey(data []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("not PEM")
	}
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, errors.New("not an EC private key")
	}
	ec, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an EC private key")
	}
	return ec, nil
}

func parseCertECPublicKey(data []byte) (*ecdsa.PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("not PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return nil, errors.New("the certificate's key is not ECDSA")
	}
	return pub, nil
}
