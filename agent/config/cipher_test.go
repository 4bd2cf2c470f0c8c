package config

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"strings"
	"testing"
	"time"
)

type cipherFixture struct {
	deviceKeyPEM, otherKeyPEM, controllerCertPEM []byte
	block                                        CipherBlock
}

func pemKey(t *testing.T, k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// encryptLikeAController encrypts a token for a device the way EVE's
// controllers do: ECDH(controller private, device public), same KDF, CFB.
func encryptLikeAController(t *testing.T, token string) cipherFixture {
	t.Helper()
	ctrl, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	dev, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "controller-ecdh"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ctrl.PublicKey, ctrl)
	if err != nil {
		t.Fatal(err)
	}
	key, err := SharedAESKey(ctrl, &dev.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	clear := EncodeEncryptionBlock(token)
	iv := make([]byte, aes.BlockSize)
	_, _ = rand.Read(iv)
	blockCipher, _ := aes.NewCipher(key[:])
	data := make([]byte, len(clear))
	//nolint:staticcheck // CFB is what EVE's controllers encrypt with.
	cipher.NewCFBEncrypter(blockCipher, iv).XORKeyStream(data, clear)
	sum := sha256.Sum256(clear)
	return cipherFixture{
		deviceKeyPEM:      pemKey(t, dev),
		otherKeyPEM:       pemKey(t, other),
		controllerCertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		block:             CipherBlock{CipherContextID: "ctx-1", InitialValue: iv, CipherData: data, ClearTextSha256: sum[:]},
	}
}

func TestDecryptClusterToken(t *testing.T) {
	f := encryptLikeAController(t, goodToken)
	got, err := DecryptClusterToken(f.block, f.deviceKeyPEM, f.controllerCertPEM)
	if err != nil || got.Reveal() != goodToken {
		t.Fatalf("decrypt = %v, %v", got, err)
	}
	corrupted := f.block
	corrupted.CipherData = append([]byte(nil), f.block.CipherData...)
	corrupted.CipherData[3] ^= 0x40
	shortIV := f.block
	shortIV.InitialValue = shortIV.InitialValue[:8]
	cases := map[string]struct {
		block CipherBlock
		key   []byte
		cert  []byte
		say   string
	}{
		"wrong device key": {f.block, f.otherKeyPEM, f.controllerCertPEM, "does not match its SHA-256"},
		"corrupted block":  {corrupted, f.deviceKeyPEM, f.controllerCertPEM, "does not match its SHA-256"},
		"short IV":         {shortIV, f.deviceKeyPEM, f.controllerCertPEM, "initial value is 8 bytes"},
		"key not PEM":      {f.block, []byte("nope"), f.controllerCertPEM, "device key: not PEM"},
		"cert not PEM":     {f.block, f.deviceKeyPEM, []byte("nope"), "controller certificate: not PEM"},
		"empty block":      {CipherBlock{}, f.deviceKeyPEM, f.controllerCertPEM, "no data"},
	}
	for name, c := range cases {
		tok, err := DecryptClusterToken(c.block, c.key, c.cert)
		if !errors.Is(err, ErrDecrypt) || !strings.Contains(err.Error(), c.say) || tok != "" {
			t.Errorf("%s: token %q err %v, want ErrDecrypt saying %q and no token", name, tok.Reveal(), err, c.say)
		}
	}
}

func TestValidateEncryptedToken(t *testing.T) {
	f := encryptLikeAController(t, goodToken)
	blockJSON, err := json.Marshal(f.block)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"/persist/certs/ecdh.key.pem": f.deviceKeyPEM, "/persist/ctrl.pem": f.controllerCertPEM, "/persist/other.pem": f.otherKeyPEM}
	env := Environment{
		InterfaceExists: func(string) bool { return true },
		ReadFile: func(p string) ([]byte, error) {
			if d, ok := files[p]; ok {
				return d, nil
			}
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
		},
	}
	c := validConfig()
	c.TokenFile, c.EncryptedClusterToken, c.ControllerCertFile = "", blockJSON, "/persist/ctrl.pem"
	v, err := Validate(c, env)
	if err != nil || v.Token.Reveal() != goodToken {
		t.Fatalf("validate: %v", err)
	}
	c.DeviceKeyFile = "/persist/other.pem"
	_, err = Validate(c, env)
	if err == nil || !strings.Contains(err.Error(), "encrypted_cluster_token: cannot decrypt") || strings.Contains(err.Error(), goodToken) {
		t.Errorf("wrong key: %v", err)
	}
	c.DeviceKeyFile, c.ControllerCertFile = "", ""
	if _, err = Validate(c, env); err == nil || !strings.Contains(err.Error(), "controller_cert_file: missing") {
		t.Errorf("no controller cert: %v", err)
	}
}

// TestSharedAESKeyKnownAnswer pins the session key to the bytes the
// math/big derivation (ScalarMult with D.Bytes()) gave before the key's
// scalar was read with PrivateKey.Bytes: a controller encrypting the EVE way
// must still be understood. The first scalar has a leading zero byte, where
// D.Bytes() is 31 bytes and PrivateKey.Bytes() 32.
func TestSharedAESKeyKnownAnswer(t *testing.T) {
	scalar := func(h string) *ecdsa.PrivateKey {
		t.Helper()
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), b)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	a := scalar("00a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f")
	b := scalar("5f4e3d2c1b0a99887766554433221100ffeeddccbbaa99887766554433221101")
	const want = "914d58e7a07d7f68192a664a80ccdb552d3108f23e0ec3f3f15e1a0350424e2c"
	for _, tc := range []struct {
		name string
		priv *ecdsa.PrivateKey
		peer *ecdsa.PublicKey
	}{{"a with b's public key", a, &b.PublicKey}, {"b with a's public key", b, &a.PublicKey}} {
		key, err := SharedAESKey(tc.priv, tc.peer)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := hex.EncodeToString(key[:]); got != want {
			t.Errorf("%s: key %s, want %s", tc.name, got, want)
		}
	}
}

// A controller key that is not a P-256 point gets no session key: off the
// curve (an invalid-curve attack's point) or on another curve.
func TestSharedAESKeyRefusesOtherPoints(t *testing.T) {
	dev, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	onP384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	// Only field by field: x509 and ecdsa's parsers refuse such a point.
	//nolint:staticcheck // the deprecated X and Y are the way to build it.
	offCurve := &ecdsa.PublicKey{Curve: elliptic.P256(), X: big.NewInt(1), Y: big.NewInt(1)}
	for name, peer := range map[string]*ecdsa.PublicKey{"off the curve": offCurve, "on P-384": &onP384.PublicKey} {
		if _, err := SharedAESKey(dev, peer); err == nil || !strings.Contains(err.Error(), "not a P-256 point") {
			t.Errorf("%s: err %v, want 'not a P-256 point'", name, err)
		}
	}
}
