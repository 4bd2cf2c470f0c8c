package netns

import (
	"context"
	"net"
	"testing"
	"time"
)

// While a LAN exists, a dial to it from the test process's own namespace
// (one that forgot to enter a host's) fails here, at once: it never leaves
// by the machine's default route. A dial from inside a host reaches the
// other host.
func TestTheRootNamespaceCannotReachTheLAN(t *testing.T) {
	hosts := NewLAN(t, "a", "b")
	hosts[1].AcceptOn(t, hosts[1].LANAddr+":7777")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	if c, err := (&net.Dialer{}).DialContext(ctx, "tcp", hosts[1].LANAddr+":7777"); err == nil {
		c.Close()
		t.Fatal("a dial from the root namespace reached the test LAN")
	} else if time.Since(start) > time.Second {
		t.Fatalf("a dial from the root namespace took %s to fail (%v): it was sent somewhere", time.Since(start), err)
	}
	c, err := hosts[0].DialContext(ctx, "tcp", hosts[1].LANAddr+":7777")
	if err != nil {
		t.Fatalf("a dial from host a: %v", err)
	}
	c.Close()
}
