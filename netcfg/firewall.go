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
	// Dialled are the ports of the range a node's own processes listen
	// on at its cluster address, which its peers dial there, and On the
	// nodes that do (sitecon doctor's SC-PEER-PORTS dials them from a
	// node). None for ports served by pods or on loopback only, and for
	// UDP, which a connect cannot prove.
	Dialled []uint16
	On      Listeners
	// What serves the range.
	What string
}

// Listeners says which nodes listen on a port range.
type Listeners int

// The nodes that listen: none at the node's address, servers only (the
// API server and etcd: a k3s agent runs neither), every node.
const (
	NoNode Listeners = iota
	ServerNodes
	EveryNode
)

// ClusterPorts are the ports cluster nodes use among themselves: the k3s API
// (6443), etcd (2379-2381), kubelet (10250), sitecon's /status (12346),
// Longhorn (9500-9503, 8000-8002, iSCSI 3260, NFS 2049), DNS (53) and
// flannel VXLAN (udp 8472).
var ClusterPorts = []PortRange{
	{Proto: "tcp", First: 6443, Last: 6443, Dialled: []uint16{6443}, On: ServerNodes, What: "k3s API server"},
	// 2381 is etcd's metrics, on loopback.
	{Proto: "tcp", First: 2379, Last: 2381, Dialled: []uint16{2379, 2380}, On: ServerNodes, What: "etcd"},
	{Proto: "tcp", First: 10250, Last: 10250, Dialled: []uint16{10250}, On: EveryNode, What: "kubelet"},
	{Proto: "tcp", First: 12346, Last: 12346, What: "sitecon's /status and node report"},
	{Proto: "tcp", First: 9500, Last: 9503, Dialled: []uint16{9500}, On: EveryNode, What: "Longhorn manager"},
	{Proto: "tcp", First: 8000, Last: 8002, What: "Longhorn instance managers"},
	{Proto: "tcp", First: 3260, Last: 3260, What: "iSCSI (Longhorn)"},
	{Proto: "tcp", First: 2049, Last: 2049, What: "NFS (Longhorn RWX)"},
	{Proto: "tcp", First: 53, Last: 53, What: "DNS"},
	{Proto: "udp", First: 8472, Last: 8472, What: "flannel VXLAN"},
	{Proto: "udp", First: 53, Last: 53, What: "DNS"},
}

// table is sitecon's table: inet, both families in one, since the
// cluster ports listen dual-stack (k3s's API and the kubelet, sitecon's
// /status) and every interface has an IPv6 link-local address.
func table() *nftables.Table {
	return &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
}

// olderTable is the IPv4-only table agents before the inet one wrote.
func olderTable() *nftables.Table {
	return &nftables.Table{Name: TableName, Family: nftables.TableFamilyIPv4}
}

func tableExists(c *nftables.Conn, family nftables.TableFamily) (bool, error) {
	tables, err := c.ListTablesOfFamily(family)
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

// delTables deletes, in c's batch, sitecon's tables that exist.
func delTables(c *nftables.Conn) error {
	for _, t := range []*nftables.Table{table(), olderTable()} {
		exists, err := tableExists(c, t.Family)
		if err != nil {
			return err
		}
		if exists {
			c.DelTable(t)
		}
	}
	return nil
}

// ApplyFirewall (re)writes sitecon's table in one transaction: on the cluster
// interface, the cluster ports accept IPv4 traffic from the cluster prefix
// and drop it from anywhere else, and drop all IPv6 traffic (the cluster is
// IPv4; the ports listen dual-stack). Traffic on other interfaces, and
// other ports, is left to the host's own rules. An older agent's IPv4-only
// table goes in the same transaction.
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
	// Deleting and re-adding in the same batch replaces the table atomically:
	// there is no moment with the cluster ports unprotected or half-written.
	if err := delTables(c); err != nil {
		return err
	}
	t := table()
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
	for _, pr := range ClusterPorts {
		c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: ipv6PortRule(iface, pr)})
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
	if err := delTables(c); err != nil {
		return err
	}
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
	exprs := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname},
		// IPv4 only: the address's offset is the IPv4 header's.
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		// ip saddr & mask ==/!= network
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: srcOp, Register: 1, Data: addr[:]},
	}
	return append(exprs, portMatch(pr, verdict)...)
}

// ipv6PortRule drops every IPv6 packet arriving on iface for the range.
func ipv6PortRule(iface string, pr PortRange) []expr.Any {
	ifname := make([]byte, unix.IFNAMSIZ)
	copy(ifname, iface)
	exprs := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname},
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV6}},
	}
	return append(exprs, portMatch(pr, expr.VerdictDrop)...)
}

// portMatch matches the range's protocol and destination ports, counts,
// and gives the verdict.
func portMatch(pr PortRange, verdict expr.VerdictKind) []expr.Any {
	proto := byte(unix.IPPROTO_TCP)
	if pr.Proto == "udp" {
		proto = unix.IPPROTO_UDP
	}
	exprs := []expr.Any{
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
