package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/agent/statusserver"
	"github.com/sitecon/sitecon/agent/workloads"
	"github.com/sitecon/sitecon/netcfg"
)

// Bring-up: the cluster address and firewall, the /status server, the k3s
// config and its supervision, each step retried under the agent's backoff.

// bringUp takes a validated config to a running k3s: address and firewall,
// /status server, k3s config, the wait for the seed, k3s.
func (a *Agent) bringUp(ctx context.Context, v *config.Validated) {
	// A node removed from this cluster holds before anything: no address,
	// no /status, no k3s.
	removedMarker := a.records().RemovedMarkerFile()
	if hold := formation.RemovalHold(v, removedMarker); hold != nil {
		a.setPhase(PhaseError, hold)
		a.log.Error("not starting", "err", hold)
		return
	}
	// Seeing its own removal ends this bring-up: k3s stops (its
	// supervisor follows ctx), then the address goes (below).
	ctx, endBringUp := context.WithCancel(ctx)
	defer endBringUp()
	onRemoved := func(evidence string) {
		if err := formation.MarkRemoved(removedMarker, formation.RemovedMarker{ClusterID: v.ClusterID, NodeName: v.NodeName, Evidence: evidence}); err != nil {
			// Unrecorded, the removal is still acted on now; a restart
			// would not know it.
			a.log.Error("removed marker not written", "err", err)
		}
		a.log.Warn("this node was removed from its cluster: stopping k3s and dropping the cluster address", "evidence", evidence)
		endBringUp()
	}
	// One decision of the seed in effect (config and seed record here; the
	// follower decides again, from the config on disk, when the cluster
	// moves the seed).
	disk := v
	seed := a.seedInEffect(v)
	v = seed.Config
	// The role is decided here, once per bring-up, from the seed in
	// effect; everything after (the kubeconfig, the member list, k3s's
	// config, the access grant) takes it from here.
	role := k3s.DecideRole(v)
	a.mu.Lock()
	a.state.Role = role
	a.mu.Unlock()
	a.setPhase(PhaseConfiguring, nil)
	a.attempt(nil)
	addressed := a.retry(ctx, func() bool {
		if !a.linkReady(ctx, v) {
			return false
		}
		a.mu.Lock()
		previous := a.prefix
		a.mu.Unlock()
		err := a.opts.InNetNS(func() error {
			if err := a.probeClusterAddress(v); err != nil {
				return err
			}
			if _, err := netcfg.EnsureClusterAddress(v.ClusterInterface, v.Prefix, previous); err != nil {
				return err
			}
			return netcfg.ApplyFirewall(v.ClusterInterface, v.Network)
		})
		if err != nil {
			a.setPhase(PhaseError, err)
			a.attempt(err)
		}
		return err == nil
	})
	if !addressed {
		return
	}
	a.mu.Lock()
	a.prefix, a.state.ClusterIPReady = v.Prefix, true
	a.mu.Unlock()

	// The seed follower rewrites k3s's config when the cluster moves the
	// seed; it starts only once this bring-up wrote it, so the two never
	// write at once.
	k3sWritten := make(chan struct{})
	member := a.linkCluster(ctx, disk, role, k3sWritten, onRemoved)
	// Whatever ends this bring-up, its link (and the seed follower, which
	// writes k3s's config) ends before the next bring-up writes.
	defer member.wait()
	// Every bring-up step is retried under the capped backoff: what makes
	// one fail (the address still held by a dying listener, a read-only
	// file system at boot) passes, and the node must get there by itself.
	if !a.retry(ctx, func() bool {
		err := a.serveStatus(ctx, v, a.statusMembership(v, member), func(ctx context.Context, node, uuid string) (config.Verdict, string) {
			if role == k3s.RoleAgent {
				// A worker's identity reads no cluster record.
				return config.VerdictUnknown, "a worker does not judge membership"
			}
			return member.judgeMembership(ctx, v.ClusterID, a.opts.Etcd, node, uuid)
		})
		if err != nil {
			a.setPhase(PhaseError, err)
			a.attempt(err)
		}
		return err == nil
	}) {
		return
	}
	// A server that has been a member (its etcd data, its formed marker)
	// starts k3s without waiting on anyone; if it was removed while it
	// was off, k3s would make it a cluster of its own. So it asks its
	// peers first, once and bounded, and holds only on a proven removal.
	been, beenWhy := formation.HasBeenMember(v, a.opts.K3sPaths.EtcdMemberDataPresent(), a.records().FormedMarkerFile())
	if been && role != k3s.RoleAgent {
		// Asked over a link without carrier the question hears nobody,
		// and silence starts k3s: the link first, under the backoff.
		if !a.retry(ctx, func() bool { return a.linkReady(ctx, v) }) {
			return
		}
		if a.stillMember(ctx, v, removedMarker) {
			return
		}
	}
	// Never initialise twice: cluster-init only for the config's own seed
	// that was never part of the cluster, has no etcd data, and finds no
	// member answering on the prefix (mayInitialise); a refusal is an error
	// that holds k3s back and is checked again under the backoff.
	var k k3s.Config
	var initialise bool
	if !a.retry(ctx, func() bool {
		var err error
		initialise, err = a.mayInitialise(ctx, seed)
		if err == nil {
			k = k3s.Render(v, a.opts.K3sPaths, !initialise)
			if err = k.Write(); err != nil {
				err = fmt.Errorf("write k3s config: %w", err)
			}
		}
		if err != nil {
			a.setPhase(PhaseError, err)
			a.attempt(err)
		}
		return err == nil
	}) {
		return
	}
	// The seed starts at once: there is nobody to wait for. So does a node
	// that has been a member: after a whole-site power cut the seed cannot
	// reach etcd quorum without the others, and a member waiting on its
	// /status would wait for ever. The seed wait is for the first join.
	waitSeed := role != k3s.RoleSeed
	// pin is the cluster CA k3s's token is to pin: the one the seed was
	// verified to serve, or on a restart the one this node's k3s holds.
	var pin string
	if waitSeed && been {
		pin = formation.LocalCAPin(a.opts.K3sPaths, a.log)
		switch {
		case pin != "" || a.opts.K3sPaths.EtcdMemberDataPresent():
			waitSeed = false
			a.log.Info("starting k3s without waiting on the seed: this node has been a member", "why", beenWhy)
		default:
			// A member whose k3s data is gone (lost, or not mounted yet):
			// no CA to pin and no etcd to restart from, so k3s would
			// fetch the CA from whoever answers at the join address and
			// trust it. It joins as a first join does, the seed's CA
			// verified first.
			a.log.Warn("this node has been a member, but its k3s holds no cluster CA and no etcd data: verifying the seed's CA before k3s joins", "why", beenWhy)
		}
	}
	if waitSeed {
		a.setPhase(PhaseWaitingSeed, nil)
		probe := formation.SeedProbe{JoinIP: v.JoinIP, ClusterID: v.ClusterID, Dial: a.dialer(), Token: v.Token.Reveal(),
			AllowUnverifiedCA: a.opts.JoinUnverifiedCA, Log: a.log}
		seedAnswers := a.retry(ctx, func() bool {
			var err error
			pin, err = probe.Verify(ctx)
			switch {
			case err == nil:
				return true
			case errors.Is(err, formation.ErrForeignCluster), errors.Is(err, formation.ErrCAUnverified):
				// Another cluster at the join address, or a CA nobody
				// vouches for, is an error, never a reason to join; the
				// check goes on in case the site is fixed.
				a.setPhase(PhaseError, err)
			default:
				a.setPhase(PhaseWaitingSeed, err)
			}
			a.attempt(err)
			return false
		})
		if !seedAnswers {
			return
		}
	}
	// k3s is given the token pinned to the CA just verified, so that it
	// too trusts only that CA (the seed could be replaced between the check
	// and k3s's own fetch). Written before the seed follower may write.
	if pinned := formation.PinnedToken(v, pin); pinned != v {
		if !a.retry(ctx, func() bool {
			k = k3s.Render(pinned, a.opts.K3sPaths, !initialise)
			err := k.Write()
			if err != nil {
				err = fmt.Errorf("write k3s config: %w", err)
				a.setPhase(PhaseError, err)
				a.attempt(err)
			}
			return err == nil
		}) {
			return
		}
	}
	close(k3sWritten)
	a.setPhase(PhaseStartingK3s, nil)
	super := &k3s.Supervisor{
		Bin: a.opts.K3sBin, Args: k.Args, LogFile: a.opts.K3sLogFile, Log: a.log.With("component", "k3s"),
		PIDFile:    filepath.Join(a.opts.K3sPaths.DataDir, "sitecon-k3s.pid"),
		MinBackoff: a.opts.K3sBackoffMin,
		Start: func(c *exec.Cmd) error {
			return a.opts.InNetNS(c.Start)
		},
	}
	a.mu.Lock()
	a.super = super
	a.mu.Unlock()
	superDone := make(chan struct{})
	go func() {
		defer close(superDone)
		_ = super.Run(ctx)
	}()
	member.waitJoined(ctx, func() {
		a.setPhase(PhaseJoined, nil)
		a.markFormed(v, k.FirstBoot)
		// Only a member records the cluster: a node that reaches an API
		// server it never joined must not write into it. A worker's
		// identity writes no cluster-wide state (kube.EnsureAgentAccess):
		// the servers keep the record.
		member.mu.Lock()
		snap := member.snap
		member.mu.Unlock()
		if role != k3s.RoleAgent {
			go a.recordCluster(ctx, snap, v)
			go a.grantAgentAccess(ctx, snap)
		}
	})
	<-superDone
	a.holdIfRemoved(v, removedMarker)
}

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
func (a *Agent) linkReady(ctx context.Context, v *config.Validated) bool {
	deadline := time.Now().Add(cmp.Or(a.opts.LinkWait, DefaultLinkWait))
	for {
		err := a.opts.InNetNS(func() error { return netcfg.LinkUp(v.ClusterInterface) })
		switch {
		case err == nil:
			a.mu.Lock()
			waited := a.state.Phase == PhaseWaitingLink
			a.mu.Unlock()
			if waited {
				a.setPhase(PhaseConfiguring, nil)
			}
			return true
		case !errors.Is(err, netcfg.ErrNoLink):
			a.setPhase(PhaseError, err)
			a.attempt(err)
			return false
		}
		err = fmt.Errorf("waiting for the link: %w; not probing the cluster address or asking the peers until it is up", err)
		a.setPhase(PhaseWaitingLink, err)
		if time.Now().After(deadline) {
			a.attempt(err)
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
func (a *Agent) probeClusterAddress(v *config.Validated) error {
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
		a.log.Warn("cannot ask the link whether another device holds the cluster address; taking it", "addr", v.NodeIP, "err", err)
	}
	return nil
}

// holdIfRemoved, once a bring-up ended (k3s stopped), stops the containers
// k3s left running and takes the cluster address off a node that saw its
// own removal, and says why it holds. Containers that cannot be stopped
// keep the address: a node that dropped it while they ran would look dead
// to the others' failover guard, which would start the same apps again.
func (a *Agent) holdIfRemoved(v *config.Validated, removedMarker string) {
	hold := formation.RemovalHold(v, removedMarker)
	if hold == nil {
		return
	}
	// The bring-up's context has ended; stopping must not.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if rep, err := workloads.StopAll(ctx, a.opts.Workloads); err != nil {
		a.setPhase(PhaseError, errors.Join(hold, fmt.Errorf("this node's containers could not all be stopped (%s): %w; keeping the cluster address", rep, err)))
		return
	}
	if err := a.dropClusterAddress(v); err != nil {
		hold = errors.Join(hold, fmt.Errorf("dropping the cluster address: %w", err))
	}
	a.setPhase(PhaseError, hold)
}

// statusMembership is what /status answers from: the live Node object while
// the cluster can be read, and this node's durable record (its etcd member
// data, its formed marker) while it cannot (an API without quorum after a
// power cut, k3s still starting). A device looking for members must find
// them even then, or it would initialise a second cluster.
func (a *Agent) statusMembership(v *config.Validated, link *clusterLink) statusserver.Membership {
	return func() bool {
		if member, known := link.membership(); known {
			return member
		}
		return formation.DurableServerMember(v, a.opts.K3sPaths.EtcdMemberDataPresent(), a.records().FormedMarkerFile())
	}
}

func (a *Agent) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		err = a.opts.InNetNS(func() error {
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
}

// serveStatus serves GET /status on the cluster address, with the proof
// of life and the membership answers (judged by judge) beside it.
func (a *Agent) serveStatus(ctx context.Context, v *config.Validated, member statusserver.Membership, judge statusserver.MembershipJudge) error {
	var l net.Listener
	addr := net.JoinHostPort(v.NodeIP.String(), strconv.Itoa(config.StatusPort))
	err := a.opts.InNetNS(func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return fmt.Errorf("/status server on %s: %w", addr, err)
	}
	key := a.lifeKey(v.ClusterID, v.Token)
	// Beside /status and the proof of life, this node vouches for the
	// cluster's CA its k3s holds (a joiner whose token pins none checks the
	// server it joins against it) and answers whether a node is still a
	// member (a server that was off asks before starting k3s).
	mux := http.NewServeMux()
	mux.Handle(config.MembershipPath, statusserver.MembershipHandler(func() (config.MembershipKey, error) {
		return statusserver.LoadMembershipKey(v.ClusterID, a.opts.K3sPaths)
	}, v.NodeName, judge))
	mux.Handle("/", statusserver.WithCAProof(statusserver.WithLifeProof(statusserver.Handler(v.ClusterID, member), key, v.NodeName), key, v.NodeName, a.opts.K3sPaths))
	srv := localapi.NewServer(mux)
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	a.log.Info("serving /status", "addr", addr)
	return nil
}
