package streams

import (
	"crypto/des"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"strconv"
	"sync"
	"time"
)

// RFB's security types (RFC 6143 7.1.2, 7.2).
const (
	rfbSecurityNone = 1
	rfbSecurityVNC  = 2
)

// rfbVersion38 is the version a bridge offers its viewers.
const rfbVersion38 = "RFB 003.008\n"

// VNCPasswords are the one-time passwords a bridge accepts from its
// viewers (RFB's VNC Authentication, RFC 6143 7.2.2, the one every viewer
// and the device's remote-console service speak). Each opens one session,
// once, within its lifetime: whoever may ask for one (the agent's socket
// is root's alone) may see the VM, and a process that merely reaches the
// port may not, nor hold its one viewer slot.
type VNCPasswords struct {
	mu      sync.Mutex
	pending []pendingPassword
	now     func() time.Time
}

type pendingPassword struct {
	password string
	expires  time.Time
}

// vncPasswordAlphabet: printable, unambiguous, and within the 8 bytes of
// a VNC password (the protocol's DES key; a longer one is cut to 8).
const vncPasswordAlphabet = "abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"

// Issue makes a password that opens one session within ttl, and says
// until when.
func (p *VNCPasswords) Issue(ttl time.Duration) (string, time.Time, error) {
	raw := make([]byte, 8)
	if _, err := rand.Read(raw); err != nil {
		return "", time.Time{}, err
	}
	for i, b := range raw {
		raw[i] = vncPasswordAlphabet[int(b)%len(vncPasswordAlphabet)]
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock()
	p.dropExpired(now)
	p.pending = append(p.pending, pendingPassword{password: string(raw), expires: now.Add(ttl)})
	return string(raw), now.Add(ttl), nil
}

// Pending is how many passwords wait to be used.
func (p *VNCPasswords) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropExpired(p.clock())
	return len(p.pending)
}

func (p *VNCPasswords) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

func (p *VNCPasswords) dropExpired(now time.Time) {
	kept := p.pending[:0]
	for _, pw := range p.pending {
		if now.Before(pw.expires) {
			kept = append(kept, pw)
		}
	}
	p.pending = kept
}

// use spends the password whose answer to challenge is response and
// returns it; nil when none is.
func (p *VNCPasswords) use(challenge, response []byte) *pendingPassword {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropExpired(p.clock())
	for i, pw := range p.pending {
		want, err := VNCAuthResponse(challenge, pw.password)
		if err == nil && subtle.ConstantTimeCompare(want, response) == 1 {
			p.pending = append(p.pending[:i], p.pending[i+1:]...)
			return &pw
		}
	}
	return nil
}

// giveBack returns a spent password that opened no session (the slot
// busy, KubeVirt failing: not the viewer's doing), with its lifetime as it
// was.
func (p *VNCPasswords) giveBack(pw pendingPassword) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending = append(p.pending, pw)
	p.dropExpired(p.clock())
}

// VNCAuthResponse is a viewer's answer to a VNC Authentication challenge:
// the challenge encrypted with DES (ECB) under the password's first 8
// bytes, each with its bits reversed, as the first VNC viewer did it.
func VNCAuthResponse(challenge []byte, password string) ([]byte, error) {
	if len(challenge) != 16 {
		return nil, fmt.Errorf("challenge of %d bytes, want 16", len(challenge))
	}
	key := make([]byte, 8)
	copy(key, password)
	for i, b := range key {
		key[i] = bits.Reverse8(b)
	}
	block, err := des.NewCipher(key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 16)
	block.Encrypt(out[:8], challenge[:8])
	block.Encrypt(out[8:], challenge[8:])
	return out, nil
}

// errVNCAuthFailed is what a viewer without a valid password is told.
var errVNCAuthFailed = errors.New("authentication failed: ask this device's agent for a one-time password (sitecon agent vnc-password)")

// viewerHandshake is the bridge's side of a viewer's handshake up to the
// security result: the version, VNC Authentication offered alone, the
// challenge and the viewer's answer. It returns the minor version the
// viewer speaks and the password it matched (spent; nil: none did); the
// result is sent by sendSecurityResult, once the bridge knows whether it
// can serve the viewer.
func viewerHandshake(c net.Conn, passwords *VNCPasswords) (minor int, spent *pendingPassword, err error) {
	if _, err := io.WriteString(c, rfbVersion38); err != nil {
		return 0, nil, err
	}
	version := make([]byte, 12)
	if _, err := io.ReadFull(c, version); err != nil {
		return 0, nil, fmt.Errorf("viewer's version: %w", err)
	}
	minor, err = rfbMinor(version)
	if err != nil {
		return 0, nil, err
	}
	if minor < 7 {
		// 3.3: the server names the one type.
		if _, err := c.Write(binary.BigEndian.AppendUint32(nil, rfbSecurityVNC)); err != nil {
			return minor, nil, err
		}
	} else {
		if _, err := c.Write([]byte{1, rfbSecurityVNC}); err != nil {
			return minor, nil, err
		}
		choice := make([]byte, 1)
		if _, err := io.ReadFull(c, choice); err != nil {
			return minor, nil, fmt.Errorf("viewer's security type: %w", err)
		}
		if choice[0] != rfbSecurityVNC {
			return minor, nil, fmt.Errorf("viewer chose security type %d, only VNC Authentication (2) is offered", choice[0])
		}
	}
	challenge := make([]byte, 16)
	if _, err := rand.Read(challenge); err != nil {
		return minor, nil, err
	}
	if _, err := c.Write(challenge); err != nil {
		return minor, nil, err
	}
	response := make([]byte, 16)
	if _, err := io.ReadFull(c, response); err != nil {
		return minor, nil, fmt.Errorf("viewer's answer to the challenge: %w", err)
	}
	return minor, passwords.use(challenge, response), nil
}

// sendSecurityResult ends a viewer's security handshake: OK when why is
// nil, else failed, with the reason where the viewer's version has room
// for one (3.8).
func sendSecurityResult(c net.Conn, minor int, why error) error {
	if why == nil {
		_, err := c.Write([]byte{0, 0, 0, 0})
		return err
	}
	msg := []byte{0, 0, 0, 1}
	if minor >= 8 {
		reason := why.Error()
		msg = binary.BigEndian.AppendUint32(msg, uint32(len(reason)))
		msg = append(msg, reason...)
	}
	_, err := c.Write(msg)
	return err
}

// upstreamHandshake is a viewer's side of the VM's handshake, choosing no
// authentication (KubeVirt's console asks for none: the API server
// authorised the connection), up to its security result.
func upstreamHandshake(c net.Conn) error {
	version := make([]byte, 12)
	if _, err := io.ReadFull(c, version); err != nil {
		return fmt.Errorf("the VM's version: %w", err)
	}
	minor, err := rfbMinor(version)
	if err != nil {
		return fmt.Errorf("the VM's console: %w", err)
	}
	minor = min(minor, 8)
	if _, err := fmt.Fprintf(c, "RFB 003.%03d\n", minor); err != nil {
		return err
	}
	if minor < 7 {
		kind := make([]byte, 4)
		if _, err := io.ReadFull(c, kind); err != nil {
			return err
		}
		if t := binary.BigEndian.Uint32(kind); t != rfbSecurityNone {
			return fmt.Errorf("the VM's console asks for security type %d, not none", t)
		}
		return nil
	}
	count := make([]byte, 1)
	if _, err := io.ReadFull(c, count); err != nil {
		return err
	}
	if count[0] == 0 {
		return fmt.Errorf("the VM's console refused: %s", readReason(c))
	}
	types := make([]byte, count[0])
	if _, err := io.ReadFull(c, types); err != nil {
		return err
	}
	offered := false
	for _, t := range types {
		offered = offered || t == rfbSecurityNone
	}
	if !offered {
		return fmt.Errorf("the VM's console offers security types %v, not none", types)
	}
	if _, err := c.Write([]byte{rfbSecurityNone}); err != nil {
		return err
	}
	if minor < 8 {
		// 3.7 sends no result for None.
		return nil
	}
	result := make([]byte, 4)
	if _, err := io.ReadFull(c, result); err != nil {
		return err
	}
	if binary.BigEndian.Uint32(result) != 0 {
		return fmt.Errorf("the VM's console refused: %s", readReason(c))
	}
	return nil
}

func rfbMinor(version []byte) (int, error) {
	if len(version) != 12 || string(version[:8]) != "RFB 003." || version[11] != '\n' {
		return 0, fmt.Errorf("not RFB: %q", version)
	}
	minor, err := strconv.Atoi(string(version[8:11]))
	if err != nil {
		return 0, fmt.Errorf("not RFB: %q", version)
	}
	return minor, nil
}

// readReason reads RFB's length-prefixed reason string (bounded).
func readReason(c net.Conn) string {
	n := make([]byte, 4)
	if _, err := io.ReadFull(c, n); err != nil {
		return "no reason given"
	}
	reason := make([]byte, min(binary.BigEndian.Uint32(n), 1024))
	if _, err := io.ReadFull(c, reason); err != nil {
		return "no reason given"
	}
	return string(reason)
}
