package netcfg_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/netcfg"
	"github.com/sitecon/sitecon/test/netns"
)

// A device must not take a cluster address another device on the link
// holds (a replaced device powered back on, whose address `node replace`
// handed on): the probe finds the holder, and finds nobody at a free
// address within its wait.
func TestProbeAddressFindsItsHolder(t *testing.T) {
	hosts := netns.NewLAN(t, "a", "b")
	a, b := hosts[0], hosts[1]
	held := netip.MustParsePrefix("10.244.244.1/28")
	if err := b.Do(func() error { _, err := netcfg.EnsureClusterAddress(netns.Interface, held, netip.Prefix{}); return err }); err != nil {
		t.Fatal(err)
	}
	const wait = 500 * time.Millisecond
	probe := func(ip string) (time.Duration, error) {
		start := time.Now()
		err := a.Do(func() error { return netcfg.ProbeAddress(netns.Interface, netip.MustParseAddr(ip), wait) })
		return time.Since(start), err
	}
	took, err := probe("10.244.244.1")
	if !errors.Is(err, netcfg.ErrAddressInUse) || !strings.Contains(err.Error(), "10.244.244.1") {
		t.Errorf("probing b's address: %v, want %v", err, netcfg.ErrAddressInUse)
	}
	if took > wait {
		t.Errorf("the holder's answer took %s, the whole wait is %s", took, wait)
	}
	if took, err := probe("10.244.244.5"); err != nil || took > wait+200*time.Millisecond {
		t.Errorf("probing a free address: %v after %s, want nil within %s", err, took, wait)
	}
	// Its own address (b probing what it holds) is not a conflict.
	if err := b.Do(func() error { return netcfg.ProbeAddress(netns.Interface, held.Addr(), wait) }); err != nil {
		t.Errorf("b probing its own address: %v", err)
	}
}

// The link is up only with carrier: a cable out (the switch port down)
// leaves eth1 administratively up without it, and an interface set down
// has neither. A probe on an interface that cannot send is not sent (not
// yet), never "nobody holds the address".
func TestLinkUpAndAProbeThatCannotBeSent(t *testing.T) {
	hosts := netns.NewLAN(t, "a")
	a := hosts[0]
	linkUp := func() error { return a.Do(func() error { return netcfg.LinkUp(netns.Interface) }) }
	if err := linkUp(); err != nil {
		t.Fatalf("eth1 plugged in: %v, want up", err)
	}
	if err := a.SetCable(false); err != nil {
		t.Fatal(err)
	}
	if err := linkUp(); !errors.Is(err, netcfg.ErrNoLink) || !strings.Contains(err.Error(), "carrier") {
		t.Errorf("eth1's cable out: %v, want %v saying no carrier", err, netcfg.ErrNoLink)
	}
	if err := a.SetCable(true); err != nil {
		t.Fatal(err)
	}
	if out, err := a.Exec("ip", "link", "set", netns.Interface, "down"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := linkUp(); !errors.Is(err, netcfg.ErrNoLink) || !strings.Contains(err.Error(), "down") {
		t.Errorf("eth1 set down: %v, want %v saying it is down", err, netcfg.ErrNoLink)
	}
	err := a.Do(func() error {
		return netcfg.ProbeAddress(netns.Interface, netip.MustParseAddr("10.244.244.5"), 200*time.Millisecond)
	})
	if !errors.Is(err, netcfg.ErrProbeNotSent) {
		t.Errorf("a probe on an interface that is down: %v, want %v", err, netcfg.ErrProbeNotSent)
	}
}

// An ARP answer from another of this node's own interfaces (a second port
// on the same LAN: Linux answers ARP for any local address on any
// interface) is not another device holding the address.
func TestProbeIgnoresThisNodesOwnInterfaces(t *testing.T) {
	hosts := netns.NewLAN(t, "a")
	a := hosts[0]
	if err := a.PlugSecondPort("eth2"); err != nil {
		t.Fatal(err)
	}
	if err := a.Do(func() error {
		return netcfg.ProbeHeldAddress(netns.Interface, netip.MustParseAddr(a.LANAddr), 500*time.Millisecond)
	}); err != nil {
		t.Errorf("probing its own address with a second port on the LAN: %v, want nil", err)
	}
}
