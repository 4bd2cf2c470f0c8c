// Package netns builds test hosts in Linux network namespaces: a LAN of
// hosts joined by a bridge, each with its own interfaces, addresses and
// firewall, so netlink and nftables code runs for real without touching the
// machine's own network. It needs root and iproute2.
package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/sitecon/sitecon/test/prereq"
)

// Host is one test host: a network namespace with eth1 on the LAN.
type Host struct {
	Name string
	// NS is the namespace's name for `ip netns exec`.
	NS string
	// LANAddr is eth1's address on the LAN, e.g. 192.168.77.1.
	LANAddr string
	// switchNS and port are the LAN switch's namespace and the port eth1
	// is plugged into (SetCable).
	switchNS, port string
}

// Interface is the LAN interface every host has.
const Interface = "eth1"

// Skip skips the test unless it can build namespaces (root, iproute2,
// nftables); under CI it fails instead.
func Skip(t testing.TB) {
	t.Helper()
	prereq.Need(t, os.Geteuid() == 0, "network namespace tests need root")
	_, err := exec.LookPath("ip")
	prereq.Need(t, err == nil, "network namespace tests need iproute2 (ip)")
	_, err = exec.LookPath("nft")
	prereq.Need(t, err == nil, "network namespace tests need nftables (nft)")
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// LANPrefix is the test LAN's prefix, inside the namespaces only.
const LANPrefix = "192.168.77.0/24"

// guardRootNamespace keeps the test process's own namespace from sending
// anything to prefix while the test runs: a blackhole route (its metric
// this process's own, so that test processes running side by side each
// add and remove theirs) makes a dial there that forgot to enter a host's
// namespace fail here at once, instead of leaving by the default route
// for a real network that may use the same addresses.
func guardRootNamespace(t testing.TB, prefix string) {
	t.Helper()
	metric := fmt.Sprint(1000 + os.Getpid()%50000)
	if err := run("ip", "route", "add", "blackhole", prefix, "metric", metric); err != nil && !strings.Contains(err.Error(), "File exists") {
		t.Fatalf("guarding the root namespace against traffic to the test LAN: %v", err)
	}
	t.Cleanup(func() { _ = run("ip", "route", "del", "blackhole", prefix, "metric", metric) })
}

// NewLAN creates one host per name on a shared bridge, LAN 192.168.77.0/24
// (host i at .i+1), and removes them all when the test ends.
func NewLAN(t testing.TB, names ...string) []*Host {
	t.Helper()
	Skip(t)
	prefix := fmt.Sprintf("sct%d", os.Getpid()%100000)
	sw := prefix + "-sw"
	var created []string
	t.Cleanup(func() {
		for _, ns := range created {
			_ = run("ip", "netns", "del", ns)
		}
	})
	must := func(args ...string) {
		t.Helper()
		if err := run(args...); err != nil {
			t.Fatal(err)
		}
	}
	guardRootNamespace(t, LANPrefix)
	must("ip", "netns", "add", sw)
	created = append(created, sw)
	must("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
	must("ip", "-n", sw, "link", "set", "br0", "up")
	hosts := make([]*Host, len(names))
	for i, name := range names {
		ns := prefix + "-" + name
		must("ip", "netns", "add", ns)
		created = append(created, ns)
		port := fmt.Sprintf("p%d", i)
		must("ip", "link", "add", port, "netns", sw, "type", "veth", "peer", "name", Interface, "netns", ns)
		must("ip", "-n", sw, "link", "set", port, "master", "br0", "up")
		must("ip", "-n", ns, "link", "set", "lo", "up")
		must("ip", "-n", ns, "link", "set", Interface, "up")
		lan := fmt.Sprintf("192.168.77.%d", i+1) // in LANPrefix
		must("ip", "-n", ns, "addr", "add", lan+"/24", "dev", Interface)
		hosts[i] = &Host{Name: name, NS: ns, LANAddr: lan, switchNS: sw, port: port}
	}
	return hosts
}

// Do runs fn inside the host's namespace, on a locked OS thread. Sockets
// opened in fn stay in the namespace after it returns.
func (h *Host) Do(fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromName(h.NS)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	fnErr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread is stuck in the test namespace: never hand it back.
		return fmt.Errorf("restore namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return fnErr
}

// Exec runs a command inside the host's namespace and returns its output.
// DialContext dials from inside the host's namespace: a probe the test
// makes as that host would.
func (h *Host) DialContext(ctx context.Context, network, addr string) (conn net.Conn, err error) {
	err = h.Do(func() error { conn, err = (&net.Dialer{}).DialContext(ctx, network, addr); return err })
	return conn, err
}

func (h *Host) Exec(args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", h.NS}, args...)...).CombinedOutput()
	return string(out), err
}

// SetCable plugs eth1's cable in or pulls it out: the switch's port goes up
// or down, so eth1 stays administratively up and loses its carrier (oper
// state lowerlayerdown), as with a cable out or a switch port down.
func (h *Host) SetCable(plugged bool) error {
	state := "down"
	if plugged {
		state = "up"
	}
	return run("ip", "-n", h.switchNS, "link", "set", h.port, state)
}

// PlugSecondPort gives the host a second interface, iface (up, no
// address), plugged into the same LAN switch: a node with two ports on
// one segment (a bond's members, a bridge and its port), whose kernel
// answers ARP for its addresses on either.
func (h *Host) PlugSecondPort(iface string) error {
	port := h.port + "b"
	if err := run("ip", "link", "add", port, "netns", h.switchNS, "type", "veth", "peer", "name", iface, "netns", h.NS); err != nil {
		return err
	}
	if err := run("ip", "-n", h.switchNS, "link", "set", port, "master", "br0", "up"); err != nil {
		return err
	}
	return run("ip", "-n", h.NS, "link", "set", iface, "up")
}

// AcceptOn listens on each address inside h and accepts (and closes) every
// connection, until the test ends: a port that answers.
func (h *Host) AcceptOn(t testing.TB, addrs ...string) {
	t.Helper()
	for _, addr := range addrs {
		if err := h.Do(func() error {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			t.Cleanup(func() { l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}
