package blackhole

import (
	"context"
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// A held address neither completes nor refuses a connection; once given
// back it refuses.
func TestHole(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	h, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if ne := net.Error(nil); !errors.As(err, &ne) || !ne.Timeout() {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a connection to the hole: %v (want a timeout)", err)
	}
	if waited := time.Since(start); waited < 400*time.Millisecond {
		t.Fatalf("the dial ended after %s, before its deadline", waited)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("after Close: %v (want refused)", err)
	}
}
