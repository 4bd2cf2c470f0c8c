package netcfg

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// TableName is sitecon's own nftables table. sitecon changes nothing else:
// the host's and EVE's tables stay as they are.
const TableName = "sitecon"

// PortRange is a range of ports of one protocol, First..Last inclusive.
type PortRange struct {
	Proto       string // "tcp" or "udp"
	First, Last uint16
}

// ClusterPorts are the ports cluster nodes use among themselves: the k3s API
// (6443), etcd (2379-2381), kubelet (10250), sitecon's /status (12346),
// Longhorn (9500-9503, 8000-8002, iSCSI 3260, NFS 2049), DNS (53) and
// flannel VXLAN (udp 8472).
var ClusterPorts = []PortRange{
	{"tcp", 6443, 6443},
	{"tcp", 2379, 2381},
	{"tcp", 10250, 10250},
	{"tcp", 12346, 12346},
	{"tcp", 9500, 9503},
	{"tcp", 8000, 8002},
	{"tcp", 3260, 3260},
	{"tcp", 2049, 2049},
	{"tcp", 53, 53},
	{"udp", 8472, 8472},
	{"udp", 53, 53},
}

func table() *nftables.Table {
	return &nftables.Table{Name: TableName, Family: nftables.TableFamilyIPv4}
}

func tableExists(c *nftables.Conn) (bool, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return false, fmt.Errorf("list nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == TableName {
			return true, nil
		}
	}
	return false, nil
}

// ApplyFirewall (re)writes sitecon's table in one transaction: on the cluster
// interface, the cluster ports accept traffic from the cluster prefix and
// drop it from anywhere else. Traffic on other interfaces, and other ports,
// is left to the host's own rules.
func ApplyFirewall(iface string, cluster netip.Prefix) error {
	if !cluster.Addr().Is4() {
		return fmt.Errorf("cluster prefix %s: only IPv4 is supported", cluster)
	}
	if len(iface) >= unix.IFNAMSIZ {
		return fmt.Errorf("interface name %q is too long", iface)
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	exists, err := tableExists(c)
	if err != nil {
		return err
	}
	t := table()
	// Deleting and re-adding in the same batch replaces the table atomically:
	// there is no moment with the cluster ports unprotected or half-written.
	if exists {
		c.DelTable(t)
	}
	c.AddTable(t)
	accept := nftables.ChainPolicyAccept
	chain := c.AddChain(&nftables.Chain{
		Name:     "input",
		Table:    t,
		Type:     nftables.ChainTypeFilter,
		Hooknum:  nftables.ChainHookInput,
		Priority: nftables.ChainPriorityFilter,
		Policy:   &accept,
	})
	network := cluster.Masked()
	for _, inside := range []bool{true, false} {
		for _, pr := range ClusterPorts {
			verdict := expr.VerdictAccept
			if !inside {
				verdict = expr.VerdictDrop
			}
			c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: portRule(iface, network, inside, pr, verdict)})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("apply firewall table %s: %w", TableName, err)
	}
	return nil
}

// RemoveFirewall deletes sitecon's table (leaving the cluster). Absent
// already: nothing to do.
func RemoveFirewall() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	exists, err := tableExists(c)
	if err != nil || !exists {
		return err
	}
	c.DelTable(table())
	if err := c.Flush(); err != nil {
		return fmt.Errorf("remove firewall table %s: %w", TableName, err)
	}
	return nil
}

// portRule matches: arrives on iface, source inside (or outside) the cluster
// network, protocol and destination port in range.
func portRule(iface string, network netip.Prefix, inside bool, pr PortRange, verdict expr.VerdictKind) []expr.Any {
	ifname := make([]byte, unix.IFNAMSIZ)
	copy(ifname, iface)
	mask := netipMask(network.Bits())
	addr := network.Addr().As4()
	srcOp := expr.CmpOpEq
	if !inside {
		srcOp = expr.CmpOpNeq
	}
	proto := byte(unix.IPPROTO_TCP)
	if pr.Proto == "udp" {
		proto = unix.IPPROTO_UDP
	}
	exprs := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname},
		// ip saddr & mask ==/!= network
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: srcOp, Register: 1, Data: addr[:]},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		// destination port
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
	}
	if pr.First == pr.Last {
		exprs = append(exprs, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(pr.First)})
	} else {
		exprs = append(exprs, &expr.Range{Op: expr.CmpOpEq, Register: 1,
			FromData: binaryutil.BigEndian.PutUint16(pr.First), ToData: binaryutil.BigEndian.PutUint16(pr.Last)})
	}
	return append(exprs, &expr.Counter{}, &expr.Verdict{Kind: verdict})
}

func netipMask(bits int) []byte {
	m := uint32(0xffffffff) << (32 - bits)
	if bits == 0 {
		m = 0
	}
	return []byte{byte(m >> 24), byte(m >> 16), byte(m >> 8), byte(m)}
}
