package netcfg_test

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/netcfg"
	"github.com/sitecon/sitecon/test/netns"
)

func prefixes(t *testing.T, h *netns.Host) []netip.Prefix {
	t.Helper()
	var got []netip.Prefix
	if err := h.Do(func() (err error) {
		got, err = netcfg.InterfacePrefixes(netns.Interface)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestClusterAddressIsIdempotentAndLeavesOthersAlone(t *testing.T) {
	hosts := netns.NewLAN(t, "a")
	a := hosts[0]
	lan := netip.MustParsePrefix(a.LANAddr + "/24")
	first := netip.MustParsePrefix("10.244.244.1/28")
	ensure := func(want, previous netip.Prefix) bool {
		t.Helper()
		var changed bool
		if err := a.Do(func() (err error) {
			changed, err = netcfg.EnsureClusterAddress(netns.Interface, want, previous)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return changed
	}
	if !ensure(first, netip.Prefix{}) {
		t.Error("first apply reported no change")
	}
	if got := prefixes(t, a); !slices.Contains(got, first) || !slices.Contains(got, lan) {
		t.Fatalf("addresses %v, want the cluster address added next to the LAN one", got)
	}
	if ensure(first, first) {
		t.Error("second apply of the same address changed something")
	}
	// The cluster prefix changed: the old address goes, the new one comes.
	second := netip.MustParsePrefix("10.244.244.1/27")
	if !ensure(second, first) {
		t.Error("prefix change reported no change")
	}
	got := prefixes(t, a)
	if slices.Contains(got, first) || !slices.Contains(got, second) || !slices.Contains(got, lan) {
		t.Fatalf("addresses after prefix change %v", got)
	}
	// Leaving the cluster removes it, and only it.
	var removed bool
	if err := a.Do(func() (err error) {
		removed, err = netcfg.RemoveClusterAddress(netns.Interface, second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := prefixes(t, a); !removed || !slices.Equal(got, []netip.Prefix{lan}) {
		t.Fatalf("after leave: removed=%v addresses %v, want only the LAN address", removed, got)
	}
}

func TestMissingInterfaceIsAClearError(t *testing.T) {
	hosts := netns.NewLAN(t, "a")
	err := hosts[0].Do(func() error {
		_, err := netcfg.EnsureClusterAddress("eth9", netip.MustParsePrefix("10.244.244.1/28"), netip.Prefix{})
		return err
	})
	if !errors.Is(err, netcfg.ErrNoInterface) || !strings.Contains(err.Error(), "eth9") {
		t.Errorf("err = %v, want ErrNoInterface naming eth9", err)
	}
}

// dial connects from inside host h, from a given local address.
func dial(h *netns.Host, from, to string) error {
	return h.Do(func() error {
		d := net.Dialer{Timeout: 1500 * time.Millisecond}
		if from != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
		}
		c, err := d.Dial("tcp", to)
		if err == nil {
			c.Close()
		}
		return err
	})
}

func TestFirewallAdmitsOnlyTheClusterPrefix(t *testing.T) {
	hosts := netns.NewLAN(t, "a", "b", "c")
	a, b, c := hosts[0], hosts[1], hosts[2]
	cluster := netip.MustParsePrefix("10.244.244.0/28")
	for i, h := range []*netns.Host{a, b} {
		addr := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, 244, byte(i + 1)}), 28)
		if err := h.Do(func() error {
			_, err := netcfg.EnsureClusterAddress(netns.Interface, addr, netip.Prefix{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Do(func() error { return netcfg.ApplyFirewall(netns.Interface, cluster) }); err != nil {
		t.Fatal(err)
	}
	// Applying again replaces the table rather than stacking rules.
	if err := a.Do(func() error { return netcfg.ApplyFirewall(netns.Interface, cluster) }); err != nil {
		t.Fatal(err)
	}
	out, err := a.Exec("nft", "list", "table", "inet", netcfg.TableName)
	if err != nil {
		t.Fatalf("nft list: %v\n%s", err, out)
	}
	for _, want := range []string{
		`iifname "eth1" ip saddr 10.244.244.0/28 tcp dport 6443 counter`,
		`ip saddr 10.244.244.0/28 tcp dport 2379-2381`,
		`ip saddr 10.244.244.0/28 udp dport 8472`,
		`ip saddr != 10.244.244.0/28 tcp dport 12346 counter packets 0 bytes 0 drop`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rules lack %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "dport 6443"); n != 3 {
		t.Errorf("6443 appears in %d rules, want 3 (IPv4 accepted inside, dropped outside; IPv6 dropped): re-apply stacked rules?\n%s", n, out)
	}

	// Something listening on the /status port and on a port sitecon does not own.
	a.AcceptOn(t, "0.0.0.0:12346", "0.0.0.0:2222")
	if err := dial(b, "10.244.244.2", "10.244.244.1:12346"); err != nil {
		t.Errorf("a peer inside the cluster prefix cannot reach /status: %v", err)
	}
	err = dial(c, "", a.LANAddr+":12346")
	var nerr net.Error
	if err == nil || !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Errorf("a host outside the prefix reached port 12346 (err = %v), want its packets dropped", err)
	}
	if err := dial(c, "", a.LANAddr+":2222"); err != nil {
		t.Errorf("a port sitecon does not own was filtered: %v", err)
	}

	if err := a.Do(netcfg.RemoveFirewall); err != nil {
		t.Fatal(err)
	}
	if out, err := a.Exec("nft", "list", "table", "inet", netcfg.TableName); err == nil {
		t.Errorf("table still there after removal:\n%s", out)
	}
	if err := dial(c, "", a.LANAddr+":12346"); err != nil {
		t.Errorf("after removal the port should answer again: %v", err)
	}
	// Removing twice is fine.
	if err := a.Do(netcfg.RemoveFirewall); err != nil {
		t.Errorf("second removal: %v", err)
	}
}

// IPv6 too (issue 37): k3s's API port, the kubelet's and sitecon's listen
// dual-stack, and a host on the LAN reaches them by the link-local address
// every interface has. The cluster prefix is IPv4: on the cluster
// interface every IPv6 packet to a cluster port is dropped; other ports
// answer as before. One table (inet) holds both families, and a table an
// older agent wrote (ip family) goes when the new one is applied.
func TestFirewallFiltersIPv6(t *testing.T) {
	hosts := netns.NewLAN(t, "a", "c")
	a, c := hosts[0], hosts[1]
	for h, addr := range map[*netns.Host]string{a: "fe80::a", c: "fe80::c"} {
		// nodad: usable at once, not after duplicate address detection.
		if out, err := h.Exec("ip", "-6", "addr", "add", addr+"/64", "dev", netns.Interface, "nodad"); err != nil {
			t.Skipf("no IPv6 in the test namespaces: %v\n%s", err, out)
		}
	}
	// Dual-stack, as k3s's and sitecon's listeners are.
	a.AcceptOn(t, ":12346", ":6443", ":2222")
	target := func(port string) string { return "[fe80::a%" + netns.Interface + "]:" + port }
	if err := dial(c, "", target("12346")); err != nil {
		t.Fatalf("before the firewall, IPv6 to the /status port: %v", err)
	}
	// What an older agent left: the IPv4-only table of the same name.
	if out, err := a.Exec("nft", "add", "table", "ip", netcfg.TableName); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := a.Do(func() error { return netcfg.ApplyFirewall(netns.Interface, netip.MustParsePrefix("10.244.244.0/28")) }); err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{"12346", "6443"} {
		err := dial(c, "", target(port))
		var nerr net.Error
		if err == nil || !errors.As(err, &nerr) || !nerr.Timeout() {
			t.Errorf("IPv6 from the LAN reached cluster port %s (err = %v), want its packets dropped", port, err)
		}
	}
	if err := dial(c, "", target("2222")); err != nil {
		t.Errorf("IPv6 to a port sitecon does not own was filtered: %v", err)
	}
	if out, err := a.Exec("nft", "list", "table", "ip", netcfg.TableName); err == nil {
		t.Errorf("the older agent's ip table is still there beside the inet one:\n%s", out)
	}
	if err := a.Do(netcfg.RemoveFirewall); err != nil {
		t.Fatal(err)
	}
	if err := dial(c, "", target("12346")); err != nil {
		t.Errorf("after removal IPv6 to the /status port should answer again: %v", err)
	}
}
