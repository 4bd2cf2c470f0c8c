package bringup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/netcfg"
)

// The cluster address: taken only once the link carries frames and no
// other device holds it; dropped by a node that was removed or left.

// DefaultLinkWait bounds one wait for the cluster interface's carrier: a
// link coming up at power-on (a switch port's negotiation, EVE bringing
// the port up) takes a few seconds; past it the wait is retried under the
// agent's backoff, the phase saying why.
const DefaultLinkWait = 10 * time.Second

// linkPoll is how often the carrier is looked at while waited for.
const linkPoll = 200 * time.Millisecond

// linkReady waits, within Options.LinkWait, for v's cluster interface to carry
// frames (netcfg.LinkUp): with the cable out or the switch port down the
// address probe hears nobody and the membership question nobody either,
// which would read as a free address and no removal. It says the wait in
// the phase (PhaseWaitingLink) and counts an attempt when the link is
// still down at the end. It returns false, to be retried, until the link
// is up.
func (r *Runner) linkReady(ctx context.Context, v *config.Validated) bool {
	deadline := time.Now().Add(cmp.Or(r.opts.LinkWait, DefaultLinkWait))
	for {
		err := r.opts.InNetNS(func() error { return netcfg.LinkUp(v.ClusterInterface) })
		switch {
		case err == nil:
			if r.host.Phase() == PhaseWaitingLink {
				r.host.SetPhase(PhaseConfiguring, nil)
			}
			return true
		case !errors.Is(err, netcfg.ErrNoLink):
			r.host.SetPhase(PhaseError, err)
			r.host.Attempt(err)
			return false
		}
		err = fmt.Errorf("waiting for the link: %w; not probing the cluster address or asking the peers until it is up", err)
		r.host.SetPhase(PhaseWaitingLink, err)
		if time.Now().After(deadline) {
			r.host.Attempt(err)
			return false
		}
		if !sleepCtx(ctx, linkPoll) {
			return false
		}
	}
}

// addressProbeWait is how long the link is asked whether another device
// holds this node's cluster address before the node takes it: a LAN
// answers in a millisecond, and the wait is paid at every power-on.
const addressProbeWait = 500 * time.Millisecond

// probeClusterAddress refuses v's cluster address while another device on
// the link holds it: a device replaced while it was off (node replace
// hands its address on) powers on with its old config, and taking the
// address back would steal the new device's traffic before anything could
// tell it that it was replaced. An address this node already holds is not
// probed. A probe that could not be sent (the interface down) is "not
// yet", an error retried under the backoff, never "free". A probe that
// cannot be made at all (no permission for a raw socket) is said and does
// not hold the node: the check is a guard, and without it the node comes
// up as before. It runs inside InNetNS.
func (r *Runner) probeClusterAddress(v *config.Validated) error {
	if have, err := netcfg.HasAddress(v.ClusterInterface, v.NodeIP); err == nil && have {
		return nil
	}
	err := netcfg.ProbeAddress(v.ClusterInterface, v.NodeIP, addressProbeWait)
	switch {
	case errors.Is(err, netcfg.ErrAddressInUse):
		return fmt.Errorf("not taking the cluster address: %w; if this device was replaced (sitecon node replace hands its address on), "+
			"it stays out until it is given a new bundle (sitecon form --join); otherwise find the device that holds %s", err, v.NodeIP)
	case errors.Is(err, netcfg.ErrProbeNotSent):
		return fmt.Errorf("not taking the cluster address yet: %w; whether another device holds %s is unknown", err, v.NodeIP)
	case err != nil:
		r.log.Warn("cannot ask the link whether another device holds the cluster address; taking it", "addr", v.NodeIP, "err", err)
	}
	return nil
}

// DropClusterAddress takes the cluster address and the firewall table off
// this node (a removed node keeps neither, nor does one that left).
func (r *Runner) DropClusterAddress(v *config.Validated) error {
	prefix := r.host.SetClusterAddress(netip.Prefix{})
	if !prefix.IsValid() {
		prefix = v.Prefix
	}
	return r.opts.InNetNS(func() error {
		_, err := netcfg.RemoveClusterAddress(v.ClusterInterface, prefix)
		return errors.Join(err, netcfg.RemoveFirewall())
	})
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
