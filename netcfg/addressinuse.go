package netcfg

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrAddressInUse means another device on the link answers for the
// address: taking it too would steal its traffic.
var ErrAddressInUse = errors.New("address in use by another device")

// AddressInUseError is ErrAddressInUse with the device that answered.
type AddressInUseError struct {
	IP        netip.Addr
	Interface string
	// HardwareAddr is the other device's.
	HardwareAddr net.HardwareAddr
}

func (e *AddressInUseError) Error() string {
	return fmt.Sprintf("%v: %s answers for %s on %s", ErrAddressInUse, e.HardwareAddr, e.IP, e.Interface)
}

// Unwrap makes errors.Is(err, ErrAddressInUse) hold.
func (e *AddressInUseError) Unwrap() error { return ErrAddressInUse }

// ErrNoARP means the interface has no Ethernet hardware address (a
// tunnel, loopback): there is no ARP to ask with, so nothing is known.
var ErrNoARP = errors.New("no ARP on this interface (not an Ethernet link)")

// ErrProbeNotSent means the probe could not go out on the link (the
// interface down, no buffer): nothing was asked, so nothing is known of
// the address, least of all that it is free.
var ErrProbeNotSent = errors.New("ARP probe not sent")

// ErrNoLink means the interface cannot carry frames now: set down, or up
// without carrier (a cable out, a switch port down). Whatever is asked on
// it hears nobody, which says nothing.
var ErrNoLink = errors.New("no link")

// LinkUp returns nil when iface can carry frames: administratively up and
// with carrier (oper state up, or unknown with the lower layer up, as
// loopback and dummy interfaces report it); otherwise an error wrapping
// ErrNoLink that says which.
func LinkUp(iface string) error {
	l, err := link(iface)
	if err != nil {
		return err
	}
	a := l.Attrs()
	switch {
	case a.Flags&net.FlagUp == 0:
		return fmt.Errorf("%w on %s: the interface is down", ErrNoLink, iface)
	case a.OperState == netlink.OperUp:
		return nil
	case a.OperState == netlink.OperUnknown && a.RawFlags&unix.IFF_LOWER_UP != 0:
		return nil
	}
	return fmt.Errorf("%w on %s: no carrier (oper state %s): a cable out or the switch port down", ErrNoLink, iface, a.OperState)
}

// ProbeAddress asks the link on iface, before the address is taken, whether
// another device holds ip (an IPv4 address conflict check, RFC 5227): it
// broadcasts ARP probes (sender address 0.0.0.0, so that no neighbour
// learns anything from them) and listens for wait. It returns an error
// wrapping ErrAddressInUse, naming the other device's hardware address,
// when one answers. A device replaced while it was off (`sitecon node
// replace` hands its address to the new device) must not take the address
// back when it powers on.
func ProbeAddress(iface string, ip netip.Addr, wait time.Duration) error {
	if !ip.Is4() {
		return nil
	}
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return fmt.Errorf("interface %s: %w", iface, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		// No Ethernet link (a tunnel, loopback): no ARP to ask with.
		return nil
	}
	conn, err := packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), nil)
	switch {
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("ARP probe on %s: %w", iface, err)
	case err != nil:
		return fmt.Errorf("%w on %s: %w", ErrProbeNotSent, iface, err)
	}
	defer conn.Close()
	probe, err := arp.NewPacket(arp.OperationRequest, ifi.HardwareAddr, netip.IPv4Unspecified(), ethernet.Broadcast, ip)
	if err != nil {
		return err
	}
	payload, err := probe.MarshalBinary()
	if err != nil {
		return err
	}
	frame, err := (&ethernet.Frame{Destination: ethernet.Broadcast, Source: ifi.HardwareAddr,
		EtherType: ethernet.EtherTypeARP, Payload: payload}).MarshalBinary()
	if err != nil {
		return err
	}
	local, err := localHardwareAddrs(ifi.HardwareAddr)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	// Two probes, the second halfway: one lost frame is no answer.
	send := func() error {
		_, err := conn.WriteTo(frame, &packet.Addr{HardwareAddr: ethernet.Broadcast})
		return err
	}
	if err := send(); err != nil {
		return fmt.Errorf("%w on %s: %w", ErrProbeNotSent, iface, err)
	}
	second := time.Now().Add(wait / 2)
	sentSecond := false
	buf := make([]byte, 1500)
	for {
		readUntil := deadline
		if !sentSecond {
			readUntil = second
		}
		if err := conn.SetReadDeadline(readUntil); err != nil {
			return err
		}
		n, _, err := conn.ReadFrom(buf)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded) && !sentSecond:
			sentSecond = true
			if err := send(); err != nil {
				return fmt.Errorf("%w on %s: %w", ErrProbeNotSent, iface, err)
			}
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil
		case err != nil:
			return fmt.Errorf("ARP probe on %s: %w", iface, err)
		}
		var f ethernet.Frame
		var p arp.Packet
		if f.UnmarshalBinary(buf[:n]) != nil || p.UnmarshalBinary(f.Payload) != nil {
			continue
		}
		// A reply from the address, or another device announcing or
		// defending it; never this node's own frames, from any of its
		// interfaces (a bond's other member, a bridge, a second port on
		// the segment: Linux answers ARP for a local address on each).
		if p.SenderIP == ip && !local(p.SenderHardwareAddr) {
			return &AddressInUseError{IP: ip, Interface: iface, HardwareAddr: p.SenderHardwareAddr}
		}
	}
}

// localHardwareAddrs says whether a hardware address is one of this
// node's interfaces' (in the namespace the probe runs in), read when the
// probe starts: an interface added during the second it listens is not
// known.
func localHardwareAddrs(own net.HardwareAddr) (func(net.HardwareAddr) bool, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("this node's interfaces: %w", err)
	}
	addrs := []net.HardwareAddr{own}
	for _, i := range ifaces {
		if len(i.HardwareAddr) > 0 {
			addrs = append(addrs, i.HardwareAddr)
		}
	}
	return func(hw net.HardwareAddr) bool {
		for _, a := range addrs {
			if bytes.Equal(a, hw) {
				return true
			}
		}
		return false
	}, nil
}

// ProbeHeldAddress asks the link on iface whether another device holds ip
// as well, while this node holds it (RFC 5227's ongoing conflict
// detection, with the same probe as ProbeAddress). Unlike ProbeAddress it
// says when it cannot ask: the link down (ErrNoLink) or no Ethernet
// (ErrNoARP) is no answer, and must not read as "nobody else holds it".
func ProbeHeldAddress(iface string, ip netip.Addr, wait time.Duration) error {
	if err := LinkUp(iface); err != nil {
		return err
	}
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return fmt.Errorf("interface %s: %w", iface, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return fmt.Errorf("%w: %s", ErrNoARP, iface)
	}
	return ProbeAddress(iface, ip, wait)
}
