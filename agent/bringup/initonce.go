package bringup

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
)

// seedInEffect decides the seed at bring-up: the cluster cannot be asked
// before k3s runs, so from the config and the seed record. A record that no
// longer applies is removed.
func (r *Runner) seedInEffect(v *config.Validated) formation.SeedDecision {
	in, err := formation.LocalSeedInputs(r.opts.Records, v)
	if err != nil {
		r.log.Error("seed record unreadable; joining through the config's seed", "err", err)
	}
	d := formation.SeedInEffect(in)
	if d.RecordStale {
		r.log.Info("seed record no longer applies; removed", "record", in.Record.JoinServerIP, "config", v.JoinIP)
		if err := os.Remove(r.opts.Records.SeedRecordFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.log.Error("remove seed record", "err", err)
		}
	}
	if d.Source != formation.SeedFromConfig {
		r.log.Info("joining through the seed in effect", "seed", d.JoinIP, "why", d.Why)
		r.host.SetSeedAddress(d.JoinIP.String())
	}
	return d
}

// mayInitialise is the last word before k3s starts with cluster-init: the
// node must be the config's own seed, without etcd data, never part of the
// cluster before (formed marker), and no member of the same cluster may
// answer /status on the prefix. A member that answers is remembered in the
// marker: a reboot of that member must not open the door again.
func (r *Runner) mayInitialise(ctx context.Context, d formation.SeedDecision) (bool, error) {
	marker := r.opts.Records.FormedMarkerFile()
	initialise, err := formation.InitCheck(d, r.opts.K3sPaths.EtcdMemberDataPresent(), marker)
	if err != nil || !initialise {
		return false, err
	}
	v := d.Config
	var extra []netip.Addr
	if in, _ := formation.LocalSeedInputs(r.opts.Records, v); in.Record != nil {
		for _, s := range []string{in.Record.JoinServerIP, in.Record.ConfigJoinIP} {
			if ip, err := netip.ParseAddr(s); err == nil {
				extra = append(extra, ip)
			}
		}
	}
	member := formation.MemberProbe{ClusterID: v.ClusterID, Dial: r.dialer()}.Find(ctx, formation.ProbeAddresses(v, extra...))
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if member.IsValid() {
		how := fmt.Sprintf("a member of the cluster answered /status at %s before this node initialised", member)
		if err := formation.MarkFormed(marker, formation.FormedMarker{ClusterID: v.ClusterID, NodeName: v.NodeName, How: how}); err != nil {
			r.log.Error("formed marker", "err", err)
		}
		return false, fmt.Errorf("%w: %s answers /status for cluster %s, so the cluster already runs; "+
			"on a live member run `sitecon seed NODE` to move the seed off %s, then give this device a bundle (sitecon node replace)",
			formation.ErrAlreadyFormed, member, v.ClusterID, v.NodeIP)
	}
	return true, nil
}

// markFormed records that this node is part of its cluster, once it is.
func (r *Runner) markFormed(v *config.Validated, initialised bool) {
	how := "joined the cluster"
	if initialised {
		how = "initialised the cluster"
	}
	if err := formation.MarkFormed(r.opts.Records.FormedMarkerFile(), formation.FormedMarker{ClusterID: v.ClusterID, NodeName: v.NodeName, How: how, Joined: true}); err != nil {
		r.log.Error("formed marker not written", "err", err)
	}
}
