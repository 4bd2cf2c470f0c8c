package agent

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/kube"
)

// clusterLink is this node's link to its cluster once k3s runs: it
// connects the snapshot when the kubeconfig exists, hands it to whoever
// starts the work that needs the cluster, and follows this node's own Node
// object (is it a member, has it joined). It holds no pointer back into the
// Agent: what the Agent does on connecting is the connected callback.
type clusterLink struct {
	node       string
	kubeconfig string
	log        *slog.Logger
	connected  func(ctx context.Context, snap *kube.Snapshot)
	// running is the link's goroutine: connecting, then following the
	// seed until the bring-up ends.
	running sync.WaitGroup
	mu      sync.Mutex
	snap    *kube.Snapshot
}

// linkCluster links the bring-up of v to its cluster: once connected, the
// cluster work starts and the seed follower keeps k3s's config pointed at
// the cluster's current seed.
func (a *Agent) linkCluster(ctx context.Context, v *config.Validated, role k3s.Role, k3sWritten <-chan struct{}, removed func(evidence string)) *clusterLink {
	// `k3s agent` writes no admin kubeconfig: a worker reaches the cluster
	// with its node's own identity, which the servers grant only what a
	// worker's agent needs (grantAgentAccess).
	kubeconfig := k3s.AgentKubeconfig(a.opts.Kubeconfig, role, a.opts.K3sPaths, kube.K3sKubeconfig)
	m := &clusterLink{node: v.NodeName, kubeconfig: kubeconfig, log: a.log}
	m.connected = func(ctx context.Context, snap *kube.Snapshot) {
		a.startClusterWork(ctx, snap, v.NodeName, v.NodeUUID, role, a.lifeKey(v.ClusterID, v.Token))
		// The cluster record lists the servers only: a worker's Node
		// deleted by hand (k3s registers it again) is no removal.
		if role != k3s.RoleAgent {
			m.running.Add(1)
			go func() {
				defer m.running.Done()
				m.watchRemoval(ctx, snap, v.ClusterID, removed)
			}()
		}
		select {
		case <-k3sWritten:
			a.followSeed(ctx, snap, v)
		case <-ctx.Done():
		}
	}
	m.running.Add(1)
	go func() {
		defer m.running.Done()
		m.connect(ctx)
	}()
	return m
}

// wait returns once the link's goroutine has ended (its context ended):
// the seed follower rewrites k3s's config, and a bring-up that returns
// before its follower stopped would leave two writers of those files.
func (m *clusterLink) wait() { m.running.Wait() }

// connect starts the snapshot once the kubeconfig exists: k3s writes its
// own only after it started.
func (m *clusterLink) connect(ctx context.Context) {
	for {
		if _, err := os.Stat(m.kubeconfig); err == nil {
			break
		}
		if !sleepCtx(ctx, time.Second) {
			return
		}
	}
	cfg, err := kube.LoadRESTConfig(m.kubeconfig, "")
	if err != nil {
		m.log.Error("kubeconfig", "err", err)
		return
	}
	snap, err := newAgentSnapshot(cfg, m.log)
	if err != nil {
		m.log.Error("snapshot", "err", err)
		return
	}
	snap.Start(ctx)
	m.mu.Lock()
	m.snap = snap
	m.mu.Unlock()
	m.connected(ctx, snap)
}

// followSeed keeps k3s's config pointed at the cluster's current seed
// (later restarts must join through it) until ctx ends. It and the
// bring-up are the two writers of k3s's config, one at a time: the
// bring-up writes it once before starting k3s, and the follower starts
// only after that write (linkCluster); the bring-up waits for it before
// returning, so a follower never writes over the next bring-up's files.
func (a *Agent) followSeed(ctx context.Context, snap *kube.Snapshot, v *config.Validated) {
	follower := &formation.SeedFollower{Config: v, Paths: a.opts.K3sPaths,
		RecordPath: a.records().SeedRecordFile(), Log: a.log.With("component", "seed"),
		OnRender: func(ip netip.Addr) {
			a.mu.Lock()
			a.state.SeedAddress = ip.String()
			a.mu.Unlock()
		}}
	follower.Run(ctx, snap)
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
	nodeIdentity, ok := a.nodeIdentity(ctx, snap)
	if !ok {
		return
	}
	leader := &apps.StatsLeader{Client: snap.Clients().Core, Identity: node, Durations: a.opts.LeaderDurations,
		Log: a.log.With("component", "stats-leader"), ReleaseOnCancel: true}
	a.mu.Lock()
	a.leader = leader
	a.mu.Unlock()
	// Every server publishes what its own member sees, not the stats
	// leader alone: a server cut off from the quorum cannot write, so what
	// is published comes from the side that holds it.
	if a.opts.Etcd.Endpoint != "" && role != k3s.RoleAgent && !nodeIdentity {
		publisher := &kube.EtcdPublisher{Access: a.opts.Etcd, Node: node, Client: snap.Clients().Core,
			Log: a.log.With("component", "etcd-members")}
		go publisher.Run(ctx)
	}
	if nodeIdentity {
		go leader.Follow(ctx, snap)
	} else {
		go func() { _ = leader.Run(ctx) }()
	}
	// A bring-up grants once its node has joined (bringUp); an agent run
	// with a server's credential against a cluster it did not form
	// (--no-bootstrap: sitebox's) grants as a joined server does, so the
	// workers' agents beside it can reach the cluster.
	if role == "" && !nodeIdentity {
		go a.grantAgentAccess(ctx, snap)
	}
	if a.opts.ConfigPath != "" {
		go formation.RemoveBundlesOnceJoined(ctx, snap, formation.JoinBundlesDir(a.opts.ConfigPath), a.log)
	}
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
	go func() {
		if err := appsPart.Run(ctx); err != nil {
			a.log.Error("apps agent stopped", "err", err)
		}
	}()
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
	snap, err := newAgentSnapshot(cfg, a.log)
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

func (m *clusterLink) ownNode() (*corev1.Node, bool) {
	m.mu.Lock()
	snap := m.snap
	m.mu.Unlock()
	if snap == nil || !snap.Health().Connected {
		return nil, false
	}
	return snap.Node(m.node)
}

// membership says whether this node's live Node object has control-plane
// (or master) and etcd roles; known is false while the cluster cannot be
// read (not connected, not synced), and then member is false too. A
// connected snapshot without this node's Node knows: not a member.
func (m *clusterLink) membership() (member, known bool) {
	m.mu.Lock()
	snap := m.snap
	m.mu.Unlock()
	if snap == nil || !snap.Synced() || !snap.Health().Connected {
		return false, false
	}
	n, ok := snap.Node(m.node)
	if !ok {
		return false, true
	}
	return kube.IsEtcdMember(n) && kube.IsServer(n), true
}

// waitJoined calls joined once this node's Node object is Ready.
func (m *clusterLink) waitJoined(ctx context.Context, joined func()) {
	for {
		m.mu.Lock()
		snap := m.snap
		m.mu.Unlock()
		if snap != nil {
			changes, unsubscribe := snap.Subscribe()
			defer unsubscribe()
			for {
				if n, ok := m.ownNode(); ok && kube.NodeIsReady(n) {
					joined()
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-changes:
				}
			}
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return
		}
	}
}

// recordCluster makes sure the cluster's sitecon-cluster ConfigMap exists
// and names this node: seed changes and node removal work through it. It
// retries until the API answers; a ConfigMap of another cluster is reported
// and left alone.
func (a *Agent) recordCluster(ctx context.Context, snap *kube.Snapshot, v *config.Validated) {
	rec := kube.ClusterRecord{Name: v.ClusterName, ID: v.ClusterID, JoinServerIP: v.JoinIP.String()}
	if v.IsSeed {
		rec.SeedNode = v.NodeName
	}
	a.retry(ctx, func() bool {
		err := kube.EnsureClusterConfigMap(ctx, snap.Clients().Core, rec, v.NodeName)
		switch {
		case err == nil:
			a.log.Info("cluster record in place", "configmap", kube.ClusterConfigMapName)
		case errors.Is(err, kube.ErrForeignClusterRecord):
			a.log.Error("cluster record", "err", err)
		default:
			a.log.Debug("cluster record not written yet", "err", err)
			return false
		}
		return true
	})
}

// grantAgentAccess lets the agents of worker nodes reach the cluster with
// their nodes' own identities, and no further than their nodes: the
// servers (with k3s's admin kubeconfig) grant the node identities the
// agent's rules and put the node policy in force.
func (a *Agent) grantAgentAccess(ctx context.Context, snap *kube.Snapshot) {
	warned := false
	a.retry(ctx, func() bool {
		err := kube.EnsureAgentAccess(ctx, snap.Clients().Core)
		switch {
		case errors.Is(err, kube.ErrNodePolicy) && !warned:
			// Said once, loudly: the grant stands, the confinement not.
			warned = true
			a.log.Warn("workers' agents reach the cluster, but their writes are not confined to their own nodes", "err", err)
			return false
		case err != nil:
			a.log.Debug("agent access for workers not granted yet", "err", err)
			return false
		}
		a.log.Info("agent access for worker nodes in place", "clusterrole", kube.AgentRoleName, "group", kube.NodesGroup, "policy", kube.NodePolicyName)
		return true
	})
}

// nodeIdentity asks the API server who this agent is, until it answers or
// ctx ends (false): true when the agent acts with a node's own identity
// (a worker's credential), which writes no cluster-wide state. The answer
// comes from the credential, not from this node's config.
func (a *Agent) nodeIdentity(ctx context.Context, snap *kube.Snapshot) (nodeIdentity, ok bool) {
	ok = a.retry(ctx, func() bool {
		user, err := kube.WhoAmI(ctx, snap.Clients().Core)
		if err != nil {
			a.log.Debug("identity not known yet", "err", err)
			return false
		}
		_, nodeIdentity = kube.NodeOfIdentity(user)
		a.log.Info("cluster identity", "user", user.Username, "node identity", nodeIdentity)
		return true
	})
	return nodeIdentity, ok
}

// newAgentSnapshot is the agent's view of the cluster. The agent writes
// Events but never reads them: it does not watch them (a busy site's
// Events would be most of what it holds).
func newAgentSnapshot(cfg *rest.Config, log *slog.Logger) (*kube.Snapshot, error) {
	return kube.NewSnapshot(cfg, log.With("component", "snapshot"), kube.WithoutEvents())
}
