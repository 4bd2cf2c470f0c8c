package cmd

import (
	"context"
	"errors"
	"time"

	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/netcfg"
)

// clusterNetwork is what sitecon doctor's cluster-network checks look
// from: this node's cluster config (its prefix, its cluster id, its own
// name and address).
type clusterNetwork struct{ configPath string }

// Bounds of the prefix scan: 64 hosts asked at a time, a second each, so
// a /24 with nobody on it takes four seconds (within the check's
// deadline).
const (
	statusScanParallel = 64
	statusScanTimeout  = time.Second
)

// statusScan asks every host of the cluster prefix (as a seed about to
// initialise does: formation.ProbeAddresses) for /status with dial.
func (c clusterNetwork) statusScan(ctx context.Context, dial doctor.DialFunc) doctor.StatusScan {
	v, err := nodeReports{configPath: c.configPath}.config()
	if err != nil {
		return doctor.StatusScan{Problem: err.Error()}
	}
	addrs := formation.ProbeAddresses(v)
	s := doctor.StatusScan{ClusterID: v.ClusterID, Prefix: v.Network.String(), Asked: len(addrs),
		// More than 254 hosts (ProbeAddresses' limit): more than 8 host bits.
		FirstHostsOnly: v.Network.Addr().BitLen()-v.Network.Bits() > 8}
	answers := formation.AskStatus(ctx, addrs, dial, statusScanTimeout, statusScanParallel)
	// The scan's own deadline (not one host's timeout) left these out.
	cut := ctx.Err() != nil
	for _, a := range answers {
		switch {
		case a.Err == nil:
			s.Answers = append(s.Answers, doctor.StatusAnswer{Address: a.Addr.String(), Answer: a.Answer})
		case cut && (errors.Is(a.Err, context.DeadlineExceeded) || errors.Is(a.Err, context.Canceled)):
			s.CutShort++
		}
	}
	return s
}

// localNode is this machine's node: its name, cluster address and
// cluster prefix.
func (c clusterNetwork) localNode() (doctor.LocalNode, error) {
	v, err := nodeReports{configPath: c.configPath}.config()
	if err != nil {
		return doctor.LocalNode{}, err
	}
	return doctor.LocalNode{Name: v.NodeName, Address: v.NodeIP.String(), Network: v.Network}, nil
}

// doctorClusterPorts are the TCP ports of the agent's firewall list that
// a node's peers dial at its cluster address, and which nodes listen on
// them: the list the firewall opens is the list the doctor dials.
func doctorClusterPorts() []doctor.ClusterPort {
	var out []doctor.ClusterPort
	for _, r := range netcfg.ClusterPorts {
		if r.Proto != "tcp" {
			continue
		}
		for _, p := range r.Dialled {
			out = append(out, doctor.ClusterPort{Port: p, ServersOnly: r.On == netcfg.ServerNodes, What: r.What})
		}
	}
	return out
}
