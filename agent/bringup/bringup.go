// Package bringup takes one applied config to a running k3s, a step at a
// time, each retried under the agent's backoff: the removal hold, the seed
// in effect and the role, the cluster address and firewall (once the link
// has carrier), the /status server, a returning server's membership
// question, the rule that a cluster is initialised once, the seed wait,
// k3s's config and its supervision; then the link to the cluster once k3s
// runs. It reports into the agent that runs it through Host.
//
// Where things are:
//   - bringup.go: Runner.Run, the steps in order; Options and Host.
//   - phase.go: the phases the agent publishes.
//   - address.go: the link's carrier, the cluster address (probed before
//     it is taken, dropped by a removed node).
//   - status.go: the /status server on the cluster address.
//   - initonce.go: the seed in effect for this bring-up, and the rule that
//     a cluster is initialised once, applied.
//   - membercheck.go: a server that has been a member asks its peers
//     before starting k3s, and answers them from its cluster link.
//   - clusterlink.go: the link to the running cluster (snapshot, own
//     Node, the seed follower, the cluster record).
//   - removal.go: a node removed from its cluster holds.
package bringup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/workloads"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/netcfg"
)

// Options are what a bring-up reads of the agent's options (defaults
// already applied).
type Options struct {
	// Records are the agent's records of this node's place in its cluster
	// (the formed and removed markers, the seed record).
	Records    formation.Records
	K3sBin     string
	K3sPaths   k3s.Paths
	K3sLogFile string
	// K3sBackoffMin bounds k3s restarts (tests shorten it).
	K3sBackoffMin time.Duration
	// Workloads are the containers k3s left running, which a removed node
	// stops before it drops its address.
	Workloads workloads.Dirs
	// Kubeconfig reaches this node's cluster; empty: k3s's own kubeconfig
	// once k3s has written it.
	Kubeconfig string
	// Etcd reaches this node's etcd member, read when a peer asks whether
	// it is still a member.
	Etcd nodestate.EtcdAccess
	// InNetNS runs host-network work (addresses, firewall, listening,
	// dialling, starting k3s).
	InNetNS func(func() error) error
	// JoinUnverifiedCA lets a joiner whose token pins no CA join a seed
	// whose agent cannot vouch for the cluster's CA (warned at every
	// join); off, such a joiner holds and retries.
	JoinUnverifiedCA bool
	// MembershipTimeout bounds a returning server's question to its peers
	// (zero: statusserver's default).
	MembershipTimeout time.Duration
	// LinkWait bounds one wait for the cluster interface's carrier (zero:
	// DefaultLinkWait).
	LinkWait time.Duration
	// Report is this node's own report, served behind the cluster key
	// beside /status (nil: none served).
	Report func() nodestate.NodeReport
	// Life is this node's fence state, signed into its proof of life.
	Life *config.LifeStatus
	// NodeWord signs this node's proof of life with its own credential and
	// checks its peers' (agent/nodecred); nil: the token's MAC alone.
	NodeWord config.NodeWord
	// FailoverTimeout is this agent's --failover-timeout, written into the
	// cluster record as the cluster's when the record has none.
	FailoverTimeout time.Duration
	Log             *slog.Logger
}

// Host is the agent a bring-up runs in: where it reports what it does, what
// it keeps from one bring-up to the next (the cluster address), its
// backoff, and the work it starts once the cluster answers.
type Host interface {
	// SetPhase enters phase p (its attempts counted anew when p is not the
	// current phase), err the last error (nil: none).
	SetPhase(p Phase, err error)
	// Attempt counts one more try of the current phase, err its outcome.
	Attempt(err error)
	// Phase is the phase published now.
	Phase() Phase
	// SetRole publishes the role this bring-up decided.
	SetRole(k3s.Role)
	// SetSeedAddress publishes the seed k3s's config joins through when it
	// is not the config's.
	SetSeedAddress(ip string)
	// ClusterAddress is the cluster prefix on the interface now, kept from
	// one bring-up to the next (the next replaces it). SetClusterAddress
	// records the one now there (an invalid prefix: none, the address not
	// ready) and returns the one before.
	ClusterAddress() netip.Prefix
	SetClusterAddress(p netip.Prefix) (previous netip.Prefix)
	// SetSupervisor publishes the supervisor of the k3s this bring-up
	// starts (its restarts).
	SetSupervisor(*k3s.Supervisor)
	// Retry runs try until it reports done, waiting under the agent's
	// capped backoff between tries; false when ctx ended first.
	Retry(ctx context.Context, try func() (done bool)) bool
	// StartClusterWork starts what needs the cluster (the stats leader,
	// etcd's member list, the apps part) once the link connected; role is
	// this bring-up's, lifeKey its cluster's proof-of-life key.
	StartClusterWork(ctx context.Context, snap *kube.Snapshot, node, nodeUUID string, role k3s.Role, lifeKey config.LifeKey)
	// StartFence starts the node's fence watch for this bring-up, before
	// anything that may wait (the peers' answers, k3s's start): an agent
	// restarted while its node is cut off fences from its record.
	StartFence(ctx context.Context, node string, lifeKey config.LifeKey)
}

// Runner runs the agent's bring-ups, one applied config at a time: the
// agent stops one (its context) before it runs the next.
type Runner struct {
	opts Options
	host Host
	log  *slog.Logger
}

// New prepares the bring-ups of an agent.
func New(opts Options, host Host) *Runner {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.InNetNS == nil {
		opts.InNetNS = func(fn func() error) error { return fn() }
	}
	return &Runner{opts: opts, host: host, log: opts.Log}
}

// Run takes a validated config to a running k3s: address and firewall,
// /status server, k3s config, the wait for the seed, k3s. It returns when
// ctx ends, or when a step holds for good (a removed node).
func (r *Runner) Run(ctx context.Context, v *config.Validated) {
	// A node removed from this cluster holds before anything: no address,
	// no /status, no k3s.
	removedMarker := r.opts.Records.RemovedMarkerFile()
	if hold := formation.RemovalHold(v, removedMarker); hold != nil {
		r.host.SetPhase(PhaseError, hold)
		r.log.Error("not starting", "err", hold)
		return
	}
	// Seeing its own removal ends this bring-up: k3s stops (its
	// supervisor follows ctx), then the address goes (below).
	ctx, endBringUp := context.WithCancel(ctx)
	defer endBringUp()
	// The fence first: what follows may wait for seconds (the membership
	// question, k3s's start) while the leader's timer runs.
	r.host.StartFence(ctx, v.NodeName, LifeKey(v.ClusterID, v.Token, r.opts.NodeWord, r.log))
	onRemoved := func(evidence string) {
		if err := formation.MarkRemoved(removedMarker, formation.RemovedMarker{ClusterID: v.ClusterID, NodeName: v.NodeName, Evidence: evidence}); err != nil {
			// Unrecorded, the removal is still acted on now; a restart
			// would not know it.
			r.log.Error("removed marker not written", "err", err)
		}
		r.log.Warn("this node was removed from its cluster: stopping k3s and dropping the cluster address", "evidence", evidence)
		endBringUp()
	}
	// One decision of the seed in effect (config and seed record here; the
	// follower decides again, from the config on disk, when the cluster
	// moves the seed).
	disk := v
	seed := r.seedInEffect(v)
	v = seed.Config
	// The role is decided here, once per bring-up, from the seed in
	// effect; everything after (the kubeconfig, the member list, k3s's
	// config, the access grant) takes it from here.
	role := k3s.DecideRole(v)
	r.host.SetRole(role)
	r.host.SetPhase(PhaseConfiguring, nil)
	r.host.Attempt(nil)
	addressed := r.host.Retry(ctx, func() bool {
		if !r.linkReady(ctx, v) {
			return false
		}
		previous := r.host.ClusterAddress()
		err := r.opts.InNetNS(func() error {
			if err := r.probeClusterAddress(v); err != nil {
				return err
			}
			if _, err := netcfg.EnsureClusterAddress(v.ClusterInterface, v.Prefix, previous); err != nil {
				return err
			}
			return netcfg.ApplyFirewall(v.ClusterInterface, v.Network)
		})
		if err != nil {
			r.host.SetPhase(PhaseError, err)
			r.host.Attempt(err)
		}
		return err == nil
	})
	if !addressed {
		return
	}
	r.host.SetClusterAddress(v.Prefix)

	// The seed follower rewrites k3s's config when the cluster moves the
	// seed; it starts only once this bring-up wrote it, so the two never
	// write at once.
	k3sWritten := make(chan struct{})
	member := r.linkCluster(ctx, disk, role, k3sWritten, onRemoved)
	// Whatever ends this bring-up, its link (and the seed follower, which
	// writes k3s's config) ends before the next bring-up writes.
	defer member.wait()
	// Every bring-up step is retried under the capped backoff: what makes
	// one fail (the address still held by a dying listener, a read-only
	// file system at boot) passes, and the node must get there by itself.
	if !r.host.Retry(ctx, func() bool {
		err := r.serveStatus(ctx, v, r.statusMembership(v, member), func(ctx context.Context, node, uuid string) (config.Verdict, string) {
			if role == k3s.RoleAgent {
				// A worker's identity reads no cluster record.
				return config.VerdictUnknown, "a worker does not judge membership"
			}
			return member.judgeMembership(ctx, v.ClusterID, r.opts.Etcd, node, uuid)
		})
		if err != nil {
			r.host.SetPhase(PhaseError, err)
			r.host.Attempt(err)
		}
		return err == nil
	}) {
		return
	}
	// A server that has been a member (its etcd data, its formed marker)
	// starts k3s without waiting on anyone; if it was removed while it
	// was off, k3s would make it a cluster of its own. So it asks its
	// peers first, once and bounded, and holds only on a proven removal.
	been, beenWhy := formation.HasBeenMember(v, r.opts.K3sPaths.EtcdMemberDataPresent(), r.opts.Records.FormedMarkerFile())
	if been && role != k3s.RoleAgent {
		// Asked over a link without carrier the question hears nobody,
		// and silence starts k3s: the link first, under the backoff.
		if !r.host.Retry(ctx, func() bool { return r.linkReady(ctx, v) }) {
			return
		}
		if r.stillMember(ctx, v, removedMarker) {
			return
		}
	}
	// Never initialise twice: cluster-init only for the config's own seed
	// that was never part of the cluster, has no etcd data, and finds no
	// member answering on the prefix (mayInitialise); a refusal is an error
	// that holds k3s back and is checked again under the backoff.
	var k k3s.Config
	var initialise bool
	if !r.host.Retry(ctx, func() bool {
		var err error
		initialise, err = r.mayInitialise(ctx, seed)
		if err == nil {
			k = k3s.Render(v, r.opts.K3sPaths, !initialise)
			if err = k.Write(); err != nil {
				err = fmt.Errorf("write k3s config: %w", err)
			}
		}
		if err != nil {
			r.host.SetPhase(PhaseError, err)
			r.host.Attempt(err)
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
		pin = formation.LocalCAPin(r.opts.K3sPaths, r.log)
		switch {
		case pin != "" || r.opts.K3sPaths.EtcdMemberDataPresent():
			waitSeed = false
			r.log.Info("starting k3s without waiting on the seed: this node has been a member", "why", beenWhy)
		default:
			// A member whose k3s data is gone (lost, or not mounted yet):
			// no CA to pin and no etcd to restart from, so k3s would
			// fetch the CA from whoever answers at the join address and
			// trust it. It joins as a first join does, the seed's CA
			// verified first.
			r.log.Warn("this node has been a member, but its k3s holds no cluster CA and no etcd data: verifying the seed's CA before k3s joins", "why", beenWhy)
		}
	}
	if waitSeed {
		r.host.SetPhase(PhaseWaitingSeed, nil)
		probe := formation.SeedProbe{JoinIP: v.JoinIP, ClusterID: v.ClusterID, Dial: r.dialer(), Token: v.Token.Reveal(),
			AllowUnverifiedCA: r.opts.JoinUnverifiedCA, Log: r.log}
		seedAnswers := r.host.Retry(ctx, func() bool {
			var err error
			pin, err = probe.Verify(ctx)
			switch {
			case err == nil:
				return true
			case errors.Is(err, formation.ErrForeignCluster), errors.Is(err, formation.ErrCAUnverified):
				// Another cluster at the join address, or a CA nobody
				// vouches for, is an error, never a reason to join; the
				// check goes on in case the site is fixed.
				r.host.SetPhase(PhaseError, err)
			default:
				r.host.SetPhase(PhaseWaitingSeed, err)
			}
			r.host.Attempt(err)
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
		if !r.host.Retry(ctx, func() bool {
			k = k3s.Render(pinned, r.opts.K3sPaths, !initialise)
			err := k.Write()
			if err != nil {
				err = fmt.Errorf("write k3s config: %w", err)
				r.host.SetPhase(PhaseError, err)
				r.host.Attempt(err)
			}
			return err == nil
		}) {
			return
		}
	}
	close(k3sWritten)
	r.host.SetPhase(PhaseStartingK3s, nil)
	super := &k3s.Supervisor{
		Bin: r.opts.K3sBin, Args: k.Args, LogFile: r.opts.K3sLogFile, Log: r.log.With("component", "k3s"),
		PIDFile:    filepath.Join(r.opts.K3sPaths.DataDir, "sitecon-k3s.pid"),
		MinBackoff: r.opts.K3sBackoffMin,
		Start: func(c *exec.Cmd) error {
			return r.opts.InNetNS(c.Start)
		},
	}
	r.host.SetSupervisor(super)
	superDone := make(chan struct{})
	go func() {
		defer close(superDone)
		_ = super.Run(ctx)
	}()
	member.waitJoined(ctx, func() {
		r.host.SetPhase(PhaseJoined, nil)
		r.markFormed(v, k.FirstBoot)
		// Only a member records the cluster: a node that reaches an API
		// server it never joined must not write into it. A worker's
		// identity writes no cluster-wide state (kube.EnsureAgentAccess):
		// the servers keep the record.
		member.mu.Lock()
		snap := member.snap
		member.mu.Unlock()
		if role != k3s.RoleAgent {
			go r.recordCluster(ctx, snap, v)
			go r.GrantAgentAccess(ctx, snap)
		}
	})
	<-superDone
	r.holdIfRemoved(v, removedMarker)
}
