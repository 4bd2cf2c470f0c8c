package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/netcfg"
)

// The network section of this node's report (kube.NetworkReport): its
// cluster interface and MTU, read when the report is made (a netlink
// question answered in microseconds), so sitecon doctor can compare the
// nodes' MTUs; and the last ARP probe for its own cluster address, made in
// the background (a probe listens for a second: never on a report's
// request).

// DefaultAddressProbeInterval is how often the agent asks its cluster
// link whether another device holds its cluster address too.
const DefaultAddressProbeInterval = time.Minute

// heldAddressProbeWait is how long one probe listens for another holder.
const heldAddressProbeWait = time.Second

// networkReport is this node's cluster interface now, with the last probe.
func (a *Agent) networkReport() *nodestate.NetworkReport {
	a.mu.Lock()
	v := a.applied
	a.mu.Unlock()
	r := &nodestate.NetworkReport{AddressProbe: a.addressSeen.last()}
	if a.opts.NoBootstrap {
		r.Unmanaged = true
		r.Problem = "no cluster interface of its own: the agent runs with --no-bootstrap"
		return r
	}
	if v == nil {
		r.Problem = "no cluster interface: no cluster config applied"
		return r
	}
	r.Interface = v.ClusterInterface
	err := a.opts.InNetNS(func() (err error) {
		r.MTU, err = netcfg.InterfaceMTU(v.ClusterInterface)
		return err
	})
	if err != nil {
		r.Problem = err.Error()
	}
	return r
}

// addressSeen is the last probe for this node's cluster address.
type addressSeen struct {
	mu    sync.Mutex
	probe *nodestate.AddressProbe
}

func (s *addressSeen) last() *nodestate.AddressProbe {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.probe == nil {
		return nil
	}
	p := *s.probe
	return &p
}

func (s *addressSeen) set(p *nodestate.AddressProbe) {
	s.mu.Lock()
	s.probe = p
	s.mu.Unlock()
}

// observeAddress probes this node's cluster address every
// Options.AddressProbeInterval until ctx ends; while no config is applied
// it looks again every few seconds.
func (a *Agent) observeAddress(ctx context.Context) {
	interval := a.opts.AddressProbeInterval
	if interval <= 0 {
		interval = DefaultAddressProbeInterval
	}
	for {
		next := interval
		if p := a.probeOwnAddress(); p != nil {
			// How often a new probe lands (the wait, then the listening):
			// the doctor reads a probe older than a few of these as stale.
			p.Every = next + heldAddressProbeWait
			a.addressSeen.set(p)
		} else {
			// No config applied yet: look again soon, not a minute on.
			next = min(interval, 5*time.Second)
		}
		if !sleepCtx(ctx, next) {
			return
		}
	}
}

// probeOwnAddress sends one ARP probe from the cluster interface for this
// node's cluster address; nil when no config is applied.
func (a *Agent) probeOwnAddress() *nodestate.AddressProbe {
	a.mu.Lock()
	v := a.applied
	a.mu.Unlock()
	if v == nil || !v.NodeIP.IsValid() {
		return nil
	}
	p := &nodestate.AddressProbe{Address: v.NodeIP.String(), At: time.Now()}
	err := a.opts.InNetNS(func() error { return netcfg.ProbeHeldAddress(v.ClusterInterface, v.NodeIP, heldAddressProbeWait) })
	var inUse *netcfg.AddressInUseError
	switch {
	case errors.As(err, &inUse):
		p.HeldBy = inUse.HardwareAddr.String()
	case err != nil:
		p.Problem = err.Error()
	}
	return p
}
