// Package blackhole makes a TCP address on this machine silent, as a
// powered-off host is: connections to it neither complete nor are refused,
// they time out. On loopback a port nobody listens on refuses at once
// (the kernel answers with a reset), which a failover guard rightly reads
// as a host that is up; a test or sitebox that stages a dead node holds
// the node's address with a Hole instead.
package blackhole

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// Hole holds an address silent until Close.
type Hole struct {
	listener *os.File
	filler   net.Conn
	Addr     string
}

// Listen holds addr (IPv4 host:port) silent: a listening socket with a
// backlog of 0 whose one queue slot is taken by a connection of its own
// that is never accepted. Linux drops the SYNs that reach a listener with
// a full accept queue, so every other connection attempt goes unanswered
// and times out.
func Listen(addr string) (*Hole, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("blackhole %s: want an IPv4 host:port", addr)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("blackhole %s: %w", addr, err)
	}
	listener := os.NewFile(uintptr(fd), "blackhole "+addr)
	fail := func(err error) (*Hole, error) {
		listener.Close()
		return nil, fmt.Errorf("blackhole %s: %w", addr, err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return fail(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		return fail(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		return fail(err)
	}
	// The one connection the queue holds; the kernel completes it
	// without an accept.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	filler, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return fail(fmt.Errorf("fill its queue: %w", err))
	}
	return &Hole{listener: listener, filler: filler, Addr: addr}, nil
}

// Close gives the address back: connections are refused again.
func (h *Hole) Close() error {
	h.filler.Close()
	return h.listener.Close()
}
