// Package netcfg owns the host network changes the agent makes: the cluster
// address on the cluster interface and sitecon's firewall table.
package netcfg

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
)

// ErrNoInterface means the named interface does not exist.
var ErrNoInterface = errors.New("no such interface")

func link(name string) (netlink.Link, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil, fmt.Errorf("%w: %s", ErrNoInterface, name)
		}
		return nil, fmt.Errorf("interface %s: %w", name, err)
	}
	return l, nil
}

// InterfacePrefixes lists the IPv4 addresses on an interface with their prefix length.
func InterfacePrefixes(name string) ([]netip.Prefix, error) {
	_, have, err := linkPrefixes(name)
	return have, err
}

// linkPrefixes looks the interface up once and lists its IPv4 prefixes.
func linkPrefixes(name string) (netlink.Link, []netip.Prefix, error) {
	l, err := link(name)
	if err != nil {
		return nil, nil, err
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return nil, nil, fmt.Errorf("addresses of %s: %w", name, err)
	}
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		if p, ok := toPrefix(a.IPNet); ok {
			out = append(out, p)
		}
	}
	return l, out, nil
}

func toPrefix(n *net.IPNet) (netip.Prefix, bool) {
	addr, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(addr, ones), true
}

func toAddr(p netip.Prefix) *netlink.Addr {
	a := p.Addr().As4()
	return &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(a[:]), Mask: net.CIDRMask(p.Bits(), 32)}}
}

// removeIfPresent deletes addr from the link when have lists it.
func removeIfPresent(l netlink.Link, iface string, have []netip.Prefix, addr netip.Prefix) (bool, error) {
	if !slices.Contains(have, addr) {
		return false, nil
	}
	if err := netlink.AddrDel(l, toAddr(addr)); err != nil {
		return false, fmt.Errorf("remove cluster address %s from %s: %w", addr, iface, err)
	}
	return true, nil
}

// EnsureClusterAddress puts the cluster address (this node's IP with the
// cluster prefix length) on the interface as an additional address. It is
// idempotent: already there, nothing changes. previous is the cluster address
// applied before, if any: when the cluster prefix changed it is replaced. The
// interface's other addresses are never touched. It reports whether anything
// changed.
func EnsureClusterAddress(iface string, want netip.Prefix, previous netip.Prefix) (bool, error) {
	l, have, err := linkPrefixes(iface)
	if err != nil {
		return false, err
	}
	changed := false
	if previous.IsValid() && previous != want {
		if changed, err = removeIfPresent(l, iface, have, previous); err != nil {
			return false, err
		}
	}
	if !slices.Contains(have, want) {
		if err := netlink.AddrAdd(l, toAddr(want)); err != nil {
			return changed, fmt.Errorf("add cluster address %s to %s: %w", want, iface, err)
		}
		changed = true
	}
	return changed, nil
}

// RemoveClusterAddress takes the cluster address off the interface (leaving
// the cluster). Absent already: nothing to do.
func RemoveClusterAddress(iface string, addr netip.Prefix) (bool, error) {
	l, have, err := linkPrefixes(iface)
	if err != nil {
		return false, err
	}
	return removeIfPresent(l, iface, have, addr)
}

// HasAddress reports whether the interface carries ip.
func HasAddress(iface string, ip netip.Addr) (bool, error) {
	have, err := InterfacePrefixes(iface)
	if err != nil {
		return false, err
	}
	for _, p := range have {
		if p.Addr() == ip {
			return true, nil
		}
	}
	return false, nil
}
