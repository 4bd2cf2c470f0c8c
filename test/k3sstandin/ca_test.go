package main

import (
	"bytes"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"testing"
)

// A server that joins gets the server CA's key as k3s's bootstrap data
// gives it, for the token's password only; an agent gets the certificate
// alone.
func TestJoinedServerGetsTheServerCAKey(t *testing.T) {
	first := t.TempDir()
	ca, err := loadOrMakeCA("server", first, map[string]any{"token": "pw"})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.servingCert("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: ca.apiHandler("K10" + string(bytes.Repeat([]byte("0"), 64)) + "::server:pw")}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	server := "https://" + l.Addr().(*net.TCPAddr).String()
	_, firstKey := caFiles(first, "server")
	want, err := os.ReadFile(firstKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, sub, token string
		key              bool
	}{
		{"a server with the token", "server", "pw", true},
		{"a server with another token", "server", "not-pw", false},
		{"an agent", "agent", "pw", false},
	} {
		dir := t.TempDir()
		got, err := loadOrMakeCA(c.sub, dir, map[string]any{"server": server, "token": c.token})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		crt, key := caFiles(dir, c.sub)
		if data, err := os.ReadFile(crt); err != nil || !bytes.Equal(data, ca.pem) {
			t.Errorf("%s: no CA certificate (%v)", c.name, err)
		}
		data, err := os.ReadFile(key)
		switch {
		case c.key && (err != nil || !bytes.Equal(data, want) || got.key == nil):
			t.Errorf("%s: the server CA key not kept (%v)", c.name, err)
		case !c.key && (err == nil || got.key != nil):
			t.Errorf("%s: holds a server CA key", c.name)
		}
	}
}
