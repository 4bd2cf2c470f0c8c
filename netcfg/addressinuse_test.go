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
