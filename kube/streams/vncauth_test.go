package streams

import (
	"encoding/binary"
	"encoding/hex"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// The answers OpenSSL gives (des-ecb, the key's bits reversed per byte):
// printf 0123456789abcdef | openssl enc -des-ecb -nopad -K ce962ea6c6f6768c
// (sitecon1) and -K 0eee000000000000 (pw, padded with zeros).
func TestVNCAuthResponse(t *testing.T) {
	challenge := []byte("0123456789abcdef")
	for _, c := range []struct{ password, want string }{
		{"sitecon1", "681b414e316877fc08b3d9894d4573eb"},
		{"sitecon1-and-more", "681b414e316877fc08b3d9894d4573eb"}, // VNC keeps 8 bytes
		{"pw", "845f7bd7d2190ec213938238de53373b"},
	} {
		got, err := VNCAuthResponse(challenge, c.password)
		if err != nil || hex.EncodeToString(got) != c.want {
			t.Errorf("%q: %x, %v; want %s", c.password, got, err, c.want)
		}
	}
	if _, err := VNCAuthResponse([]byte("short"), "pw"); err == nil {
		t.Error("a 5-byte challenge was answered")
	}
}

func TestVNCPasswordsOpenOneSessionWithinTheirLifetime(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	p := &VNCPasswords{now: func() time.Time { return now }}
	challenge := []byte("0123456789abcdef")
	answer := func(pw string) []byte {
		r, err := VNCAuthResponse(challenge, pw)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first, expires, err := p.Issue(time.Minute)
	if err != nil || len(first) != 8 || !expires.Equal(now.Add(time.Minute)) {
		t.Fatalf("Issue: %q until %s, %v", first, expires, err)
	}
	second, _, _ := p.Issue(time.Minute)
	if first == second {
		t.Fatalf("two passwords alike: %q", first)
	}
	if p.use(challenge, answer("not-it")) != nil {
		t.Error("a wrong password opened a session")
	}
	spent := p.use(challenge, answer(second))
	if spent == nil {
		t.Fatal("the second password did not open a session")
	}
	if p.use(challenge, answer(second)) != nil {
		t.Error("a spent password opened a second session")
	}
	// Given back (the slot was busy): good again, for its lifetime only.
	p.giveBack(*spent)
	if p.use(challenge, answer(second)) == nil {
		t.Error("a password given back did not open a session")
	}
	p.giveBack(*spent)
	now = now.Add(time.Minute)
	if p.use(challenge, answer(first)) != nil || p.use(challenge, answer(second)) != nil {
		t.Error("a password past its lifetime opened a session")
	}
	if n := p.Pending(); n != 0 {
		t.Errorf("%d passwords pending after one was spent and one expired", n)
	}
}

// The bridge's side of a viewer's handshake, against a viewer of each
// version: VNC Authentication alone is offered, a good answer opens, a bad
// one is refused with the reason (3.8) or without (3.3, which has no room
// for one), and a viewer asking for none is refused.
func TestViewerHandshake(t *testing.T) {
	for _, c := range []struct {
		name, version, password string
		choose                  byte
		wantOK                  bool
		wantErr                 string
	}{
		{name: "3.8 with the password", version: "RFB 003.008\n", password: "right", choose: rfbSecurityVNC, wantOK: true},
		{name: "3.8 with another", version: "RFB 003.008\n", password: "wrong", choose: rfbSecurityVNC},
		{name: "3.7 with the password", version: "RFB 003.007\n", password: "right", choose: rfbSecurityVNC, wantOK: true},
		{name: "3.3 with the password", version: "RFB 003.003\n", password: "right", wantOK: true},
		{name: "3.3 with another", version: "RFB 003.003\n", password: "wrong"},
		{name: "3.8 asking for none", version: "RFB 003.008\n", choose: rfbSecurityNone, wantErr: "only VNC Authentication"},
		{name: "not RFB", version: "GET / HTTP/1\n", wantErr: "not RFB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			passwords := &VNCPasswords{}
			right, _, err := passwords.Issue(time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			password := map[string]string{"right": right, "wrong": "x" + right[1:]}[c.password]
			bridge, viewer := net.Pipe()
			defer bridge.Close()
			_ = viewer.SetDeadline(time.Now().Add(5 * time.Second))
			type result struct {
				minor int
				ok    bool
				err   error
			}
			got := make(chan result, 1)
			go func() {
				minor, spent, err := viewerHandshake(bridge, passwords)
				ok := spent != nil
				if err == nil {
					why := errVNCAuthFailed
					if ok {
						why = nil
					}
					err = sendSecurityResult(bridge, minor, why)
				}
				got <- result{minor, ok, err}
				_ = bridge.Close()
			}()
			reason, viewerErr := playViewer(viewer, c.version, c.choose, password)
			r := <-got
			if c.wantErr != "" {
				if r.err == nil || !strings.Contains(r.err.Error(), c.wantErr) {
					t.Errorf("bridge: %v, want %q", r.err, c.wantErr)
				}
				return
			}
			if r.err != nil || viewerErr != nil {
				t.Fatalf("bridge %v, viewer %v", r.err, viewerErr)
			}
			if r.ok != c.wantOK {
				t.Errorf("ok %v, want %v", r.ok, c.wantOK)
			}
			switch {
			case c.wantOK && reason != "":
				t.Errorf("the viewer was refused: %q", reason)
			case !c.wantOK && r.minor >= 8 && !strings.Contains(reason, "one-time password"):
				t.Errorf("the viewer was told %q, want the way to a password", reason)
			case !c.wantOK && reason == "":
				t.Error("the viewer was let in")
			}
		})
	}
}

// playViewer speaks a viewer's side up to the security result; reason is
// "" when it let the viewer in ("refused" when the version gives none).
func playViewer(c net.Conn, version string, choose byte, password string) (reason string, err error) {
	server := make([]byte, 12)
	if _, err := io.ReadFull(c, server); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, version); err != nil {
		return "", err
	}
	var minor int
	switch version {
	case "RFB 003.003\n":
		minor = 3
		kind := make([]byte, 4)
		if _, err := io.ReadFull(c, kind); err != nil {
			return "", err
		}
	case "RFB 003.008\n", "RFB 003.007\n":
		minor = int(version[10] - '0')
		types := make([]byte, 2)
		if _, err := io.ReadFull(c, types); err != nil {
			return "", err
		}
		if _, err := c.Write([]byte{choose}); err != nil {
			return "", err
		}
		if choose != rfbSecurityVNC {
			return "", nil
		}
	default:
		return "", nil
	}
	challenge := make([]byte, 16)
	if _, err := io.ReadFull(c, challenge); err != nil {
		return "", err
	}
	response, err := VNCAuthResponse(challenge, password)
	if err != nil {
		return "", err
	}
	if _, err := c.Write(response); err != nil {
		return "", err
	}
	result := make([]byte, 4)
	if _, err := io.ReadFull(c, result); err != nil {
		return "", err
	}
	if binary.BigEndian.Uint32(result) == 0 {
		return "", nil
	}
	if minor < 8 {
		return "refused", nil
	}
	return readReason(c), nil
}

// The bridge's side of the VM's handshake: none chosen from what the VM
// offers; a console that asks for a password or refuses is an error.
func TestUpstreamHandshake(t *testing.T) {
	for _, c := range []struct {
		name    string
		serve   []byte // what the VM sends after its version, at once
		version string
		wantErr string
	}{
		{name: "3.8 offering none", version: "RFB 003.008\n", serve: []byte{2, 16, rfbSecurityNone, 0, 0, 0, 0}},
		{name: "3.7 offering none", version: "RFB 003.007\n", serve: []byte{1, rfbSecurityNone}},
		{name: "3.3 naming none", version: "RFB 003.003\n", serve: []byte{0, 0, 0, rfbSecurityNone}},
		{name: "3.8 asking for a password", version: "RFB 003.008\n", serve: []byte{1, rfbSecurityVNC}, wantErr: "not none"},
		{name: "3.8 refusing", version: "RFB 003.008\n", serve: append([]byte{0, 0, 0, 0, 4}, "busy"...), wantErr: "refused: busy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			vm, bridge := net.Pipe()
			defer vm.Close()
			_ = bridge.SetDeadline(time.Now().Add(5 * time.Second))
			go func() {
				_ = vm.SetDeadline(time.Now().Add(5 * time.Second))
				_, _ = io.WriteString(vm, c.version)
				asked := make([]byte, 12)
				if _, err := io.ReadFull(vm, asked); err != nil || string(asked) != c.version {
					_ = vm.Close()
					return
				}
				// One byte at a time, as a websocket may deliver it; the
				// bridge's choice read once the types are sent.
				types := 0
				if c.version != "RFB 003.003\n" && c.serve[0] != 0 {
					types = 1 + int(c.serve[0])
				}
				for i, b := range c.serve {
					if _, err := vm.Write([]byte{b}); err != nil {
						return
					}
					if i+1 == types {
						choice := make([]byte, 1)
						if _, err := io.ReadFull(vm, choice); err != nil || choice[0] != rfbSecurityNone {
							_ = vm.Close()
							return
						}
					}
				}
			}()
			err := upstreamHandshake(bridge)
			switch {
			case c.wantErr == "" && err != nil:
				t.Errorf("%v", err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Errorf("%v, want %q", err, c.wantErr)
			}
		})
	}
}
