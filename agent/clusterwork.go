package agent

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/sitecon/sitecon/agent/applogs"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/bringup"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/access"
	"github.com/sitecon/sitecon/kube/nodestate"
)

// The work that needs the cluster, started by a bring-up once its link
// connected (bringUpHost.StartClusterWork) and by an agent run against a
// cluster it did not form (runExternal).

// fenceOptions are the fence watch's (and its settings' publication).
func (a *Agent) fenceOptions(node string, lifeKey config.LifeKey) apps.Options {
	opts := a.opts.Apps
	opts.NodeName, opts.StateDir = node, cmp.Or(opts.StateDir, a.opts.StateDir)
	opts.Log = a.log.With("component", "fence")
	opts.LifeKey = lifeKey
	if opts.ProbeDial == nil {
		opts.ProbeDial = a.dialer()
	}
	if opts.Fence.PodsOnNode == nil {
		dirs := a.opts.Workloads
		opts.Fence.PodsOnNode = func() ([]string, error) { return dirs.PodsInNamespace(kube.AppNamespace) }
	}
	return opts
}

// startFence starts node's fence watch until ctx ends (a bring-up's, or the
// agent's run against an external cluster), from its durable record until
// the cache is connected (FenceWatch.Connect).
func (a *Agent) startFence(ctx context.Context, node string, lifeKey config.LifeKey) *apps.FenceWatch {
	fence := apps.NewFenceWatch(a.fenceOptions(node, lifeKey), a.life)
	a.mu.Lock()
	a.fence = fence
	a.mu.Unlock()
	a.writers.Go(func() { fence.Run(ctx) })
	return fence
}

// startClusterWork starts what needs the cluster: the stats-leader election
// (every node stands), the publication of etcd's member list (servers)
// and the apps part.
// role is the bring-up's; an agent run against a cluster it did not form
// (--no-bootstrap) has none, and publishes the member list when it has
// etcd access (sitebox's agents do).
//
// What the agent's credential is decides what it writes: with its node's
// own identity (a worker's) it writes no cluster-wide state (no member
// list, no overrides) and does not stand for the stats leader, whose
// failover guard force-deletes other nodes' pods; it follows the servers'
// election instead (kube.EnsureAgentAccess says who may do what). lifeKey
// checks the lost nodes' proofs of life for the failover guard.
func (a *Agent) startClusterWork(ctx context.Context, snap *kube.Snapshot, node, nodeUUID string, role k3s.Role, lifeKey config.LifeKey) {
	a.mu.Lock()
	a.snap = snap
	a.mu.Unlock()
	// The fence watch runs from the bring-up's start (startFence), from
	// its record; from now on it reads the cache. An agent run against a
	// cluster it did not form starts it here, before the API server has
	// answered once.
	a.mu.Lock()
	fence := a.fence
	a.mu.Unlock()
	if fence == nil || fence.Node != node {
		fence = a.startFence(ctx, node, lifeKey)
	}
	fence.Connect(snap)
	fenceOpts := a.fenceOptions(node, lifeKey)
	nodeIdentity, ok := a.nodeIdentity(ctx, snap)
	if !ok {
		return
	}
	// Every node says how it fences, on its own Node: the leader lets a
	// lost node's pods go only when that node fences with its timeout.
	a.writers.Go(func() {
		apps.PublishFenceSettings(ctx, snap, node, kube.FenceSettings{Fencing: !fenceOpts.Fence.Disabled,
			FailoverTimeout: fenceOpts.EffectiveFailoverTimeout()}, fence, a.log.With("component", "fence"))
	})
	leader := &apps.StatsLeader{Client: snap.Clients().Core, Identity: node, Durations: a.opts.LeaderDurations,
		Log: a.log.With("component", "stats-leader"), ReleaseOnCancel: true}
	a.mu.Lock()
	a.leader = leader
	a.mu.Unlock()
	// Every server publishes what its own member sees, not the stats
	// leader alone: a server cut off from the quorum cannot write, so what
	// is published comes from the side that holds it.
	if a.opts.Etcd.Endpoint != "" && role != k3s.RoleAgent && !nodeIdentity {
		publisher := &nodestate.EtcdPublisher{Access: a.opts.Etcd, Node: node, Client: snap.Clients().Core,
			Log: a.log.With("component", "etcd-members"), Observe: func(ctx context.Context) (nodestate.EtcdView, error) {
				view, err := a.etcdSeen.last(ctx)
				if err == nil && view.ObservedBy != node {
					// Observed before this node's name was known: its key
					// would be another's (or none).
					return nodestate.EtcdView{}, errNoEtcdObservation
				}
				return view, err
			}}
		go publisher.Run(ctx)
	}
	if nodeIdentity {
		go leader.Follow(ctx, snap)
	} else {
		go func() { _ = leader.Run(ctx) }()
		// Each node's identity opens its own VMs' consoles only: the
		// leader keeps the grants by name.
		go grantConsolesWhileLeading(ctx, snap, leader.State, &access.ConsoleGrants{Client: snap.Clients().Core, Log: a.log.With("component", "vm-consoles")})
	}
	// A bring-up grants once its node has joined (bringup.Runner.Run); an agent run
	// with a server's credential against a cluster it did not form
	// (--no-bootstrap: sitebox's) grants as a joined server does, so the
	// workers' agents beside it can reach the cluster.
	if role == "" && !nodeIdentity {
		go a.bringUp.GrantAgentAccess(ctx, snap)
	}
	// Drain requests run with the agent's credential: a worker's own
	// node's identity may cordon its Node, read the DaemonSets whose pods
	// a drain leaves, and evict its pods (TestWorkerDrainRequestWithItsNodeIdentity).
	go a.drains.Run(ctx, snap, node)
	if a.opts.ConfigPath != "" {
		go formation.RemoveBundlesOnceJoined(ctx, snap, formation.JoinBundlesDir(a.opts.ConfigPath), a.log)
	}
	if a.opts.AppLogs.Dir != "" {
		a.startAppLogs(ctx, snap, node)
	}
	// The consoles of the VM apps running here, for the device's
	// remote-console service, opened with this node's own identity.
	go a.serveConsoles(ctx, snap, node, nodeIdentity)
	if a.opts.Apps.AppsDir == "" {
		return
	}
	opts := a.opts.Apps
	opts.NodeName, opts.NodeUUID = node, cmp.Or(opts.NodeUUID, nodeUUID)
	opts.Log = a.log.With("component", "apps")
	opts.Leader = leader.State
	opts.NodeIdentity = nodeIdentity
	// The guard probes the lost nodes from this node's network (its
	// namespace in tests), checking their proofs with the cluster's key.
	opts.LifeKey = lifeKey
	opts.FenceWatch = fence
	if opts.ProbeDial == nil {
		opts.ProbeDial = a.dialer()
	}
	appsPart, err := apps.New(opts, snap)
	if err != nil {
		a.log.Error("apps agent", "err", err)
		return
	}
	a.mu.Lock()
	a.apps = appsPart
	a.mu.Unlock()
	a.writers.Go(func() {
		if err := appsPart.Run(ctx); err != nil {
			a.log.Error("apps agent stopped", "err", err)
		}
	})
}

// runExternal runs the apps part against a cluster the agent did not form.
func (a *Agent) runExternal(ctx context.Context) error {
	if a.opts.NodeName == "" {
		return errors.New("--no-bootstrap needs --node-name")
	}
	cfg := a.opts.RESTConfig
	if cfg == nil {
		var err error
		if cfg, err = kube.LoadRESTConfig(a.opts.Kubeconfig, ""); err != nil {
			return err
		}
	}
	snap, err := bringup.AgentSnapshot(cfg, a.log)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.state = State{Node: a.opts.NodeName, Phase: PhaseExternal, Since: time.Now()}
	a.mu.Unlock()
	snap.Start(ctx)
	key := a.externalLifeKey()
	if a.opts.StatusAddr != "" {
		srv, err := a.serveExternalStatus(snap, key)
		if err != nil {
			return err
		}
		// Closed before Run returns: an agent stopped is silent there.
		defer srv.Close()
	}
	a.startClusterWork(ctx, snap, a.opts.NodeName, "", "", key)
	<-ctx.Done()
	return nil
}

// nodeIdentity asks the API server who this agent is, until it answers or
// ctx ends (false): true when the agent acts with a node's own identity
// (a worker's credential), which writes no cluster-wide state. The answer
// comes from the credential, not from this node's config.
func (a *Agent) nodeIdentity(ctx context.Context, snap *kube.Snapshot) (nodeIdentity, ok bool) {
	ok = a.retry(ctx, func() bool {
		user, err := access.WhoAmI(ctx, snap.Clients().Core)
		if err != nil {
			a.log.Debug("identity not known yet", "err", err)
			return false
		}
		_, nodeIdentity = access.NodeOfIdentity(user)
		a.log.Info("cluster identity", "user", user.Username, "node identity", nodeIdentity)
		return true
	})
	return nodeIdentity, ok
}

// startAppLogs collects the logs of the apps running on this node
// (--app-logs-dir). A directory that cannot be opened (a full or failing
// disk) is tried again, 10 s doubling to 5 min: the collector never gives
// up for good.
func (a *Agent) startAppLogs(ctx context.Context, snap *kube.Snapshot, node string) {
	opts := a.opts.AppLogs
	opts.Node = node
	opts.Log = a.log.With("component", "app-logs")
	a.writers.Go(func() {
		wait := 10 * time.Second
		for {
			collector, err := applogs.New(opts, snap.Clients().Core, snap)
			if err == nil {
				if err := collector.Run(ctx); err != nil {
					a.log.Error("app logs stopped", "err", err)
				}
				return
			}
			opts.Log.Error("app logs: the directory cannot be opened; trying again", "in", wait, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Minute)
		}
	})
}

// grantConsolesWhileLeading keeps the nodes' VM console grants
// (access.ConsoleGrants) from the cache's changes while this node leads,
// retrying a failed write after a while; it forgets them when it stops
// leading, so that it reads them afresh if it leads again.
func grantConsolesWhileLeading(ctx context.Context, snap *kube.Snapshot, leads func() apps.LeaderState, grants *access.ConsoleGrants) {
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	// Leadership is this agent's own state, not the cache's: looked at
	// every few seconds (no API request), so that a new leader grants
	// without waiting for a change.
	leadership := time.NewTicker(5 * time.Second)
	defer leadership.Stop()
	for {
		switch {
		case !leads().IsLeader:
			grants.Forget()
		case !snap.Synced():
		case !snap.WatchesVMIs():
			// No VMI watched (KubeVirt came after the cache started): an
			// empty list is not the cluster's, and would take back every
			// grant. The agent's restart watches them.
		default:
			// Writes only what changed (nothing, on a quiet site).
			if err := grants.Sync(ctx, snap.VMIs()); err != nil {
				grants.Log.Warn("VM console grants not kept: a node may not open its own VMs' consoles, or still open one gone", "err", err)
				retry.Reset(30 * time.Second)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-retry.C:
		case <-leadership.C:
		}
	}
}
