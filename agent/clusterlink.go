package agent

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
)

// clusterLink is this node's link to its cluster once k3s runs: it connects
// the snapshot when a kubeconfig exists, starts the work that needs the
// cluster, and follows this node's own Node object (is it a member, has
// it joined).
type clusterLink struct {
	a        *Agent
	node     string
	nodeUUID string
	v        *config.Validated
	mu       sync.Mutex
	snap     *kube.Snapshot
}

func (a *Agent) linkCluster(ctx context.Context, v *config.Validated) *clusterLink {
	m := &clusterLink{a: a, node: v.NodeName, nodeUUID: v.NodeUUID, v: v}
	go m.connect(ctx)
	return m
}

// connect starts the snapshot once a kubeconfig exists: k3s writes its own
// only after it started.
func (m *clusterLink) connect(ctx context.Context) {
	path := m.a.opts.Kubeconfig
	if path == "" {
		path = kube.K3sKubeconfig
		// `k3s agent` writes no admin kubeconfig: a worker reaches the
		// cluster as k3s's own controllers do (the servers grant that
		// identity the agent's rules, grantAgentAccess).
		if DecideRole(m.v) == RoleAgent {
			path = K3sControllerKubeconfig(m.a.opts.K3sPaths)
		}
	}
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		if !sleepCtx(ctx, time.Second) {
			return
		}
	}
	cfg, err := kube.LoadRESTConfig(path, "")
	if err != nil {
		m.a.log.Error("kubeconfig", "err", err)
		return
	}
	snap, err := newAgentSnapshot(cfg, m.a.log)
	if err != nil {
		m.a.log.Error("snapshot", "err", err)
		return
	}
	snap.Start(ctx)
	m.mu.Lock()
	m.snap = snap
	m.mu.Unlock()
	m.a.startClusterWork(ctx, snap, m.node, m.nodeUUID)
	// Later restarts must join through the cluster's current seed.
	follower := &SeedFollower{Config: m.v, Paths: m.a.opts.K3sPaths,
		RecordPath: SeedRecordFile(m.a.opts.ConfigPath), Log: m.a.log.With("component", "seed"),
		OnRender: func(ip netip.Addr) {
			m.a.mu.Lock()
			m.a.state.SeedAddress = ip.String()
			m.a.mu.Unlock()
		}}
	go follower.Run(ctx, snap)
}

// startClusterWork starts what needs the cluster: the stats-leader election
// (every node stands), the publication of etcd's member list (servers)
// and the apps part.
func (a *Agent) startClusterWork(ctx context.Context, snap *kube.Snapshot, node, nodeUUID string) {
	leader := &apps.StatsLeader{Client: snap.Clients().Core, Identity: node, Durations: a.opts.LeaderDurations,
		Log: a.log.With("component", "stats-leader"), ReleaseOnCancel: true}
	a.mu.Lock()
	a.leader = leader
	applied := a.applied
	a.mu.Unlock()
	// Every server publishes what its own member sees, not the stats
	// leader alone: the leader may be a worker, which has no etcd client
	// certificates, and a server cut off from the quorum cannot write, so
	// what is published comes from the side that holds it.
	if a.opts.Etcd.Endpoint != "" && (applied == nil || DecideRole(applied) != RoleAgent) {
		publisher := &kube.EtcdPublisher{Access: a.opts.Etcd, Node: node, Client: snap.Clients().Core,
			Log: a.log.With("component", "etcd-members")}
		go publisher.Run(ctx)
	}
	go func() { _ = leader.Run(ctx) }()
	if a.opts.ConfigPath != "" {
		go RemoveBundlesOnceJoined(ctx, snap, JoinBundlesDir(a.opts.ConfigPath), a.log)
	}
	if a.opts.Apps.AppsDir == "" {
		return
	}
	opts := a.opts.Apps
	opts.NodeName, opts.NodeUUID = node, cmp.Or(opts.NodeUUID, nodeUUID)
	opts.Log = a.log.With("component", "apps")
	opts.Leader = leader.State
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
	a.startClusterWork(ctx, snap, a.opts.NodeName, "")
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

// isMember: this node's live Node object has control-plane (or master) and
// etcd roles. Unknown (API down, not synced) is not a member.
func (m *clusterLink) isMember() bool {
	n, ok := m.ownNode()
	if !ok {
		return false
	}
	return kube.IsEtcdMember(n) && kube.IsServer(n)
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

// grantAgentAccess lets the agents of worker nodes reach the cluster: a
// k3s agent has no admin kubeconfig, only its controller identity, which
// the servers (with k3s's admin kubeconfig) grant the agent's rules.
func (a *Agent) grantAgentAccess(ctx context.Context, snap *kube.Snapshot) {
	a.retry(ctx, func() bool {
		err := kube.EnsureAgentAccess(ctx, snap.Clients().Core)
		if err != nil {
			a.log.Debug("agent access for workers not granted yet", "err", err)
			return false
		}
		a.log.Info("agent access for worker nodes in place", "clusterrole", kube.AgentRoleName, "user", kube.K3sControllerUser)
		return true
	})
}

// newAgentSnapshot is the agent's view of the cluster. The agent writes
// Events but never reads them: it does not watch them (a busy site's
// Events would be most of what it holds).
func newAgentSnapshot(cfg *rest.Config, log *slog.Logger) (*kube.Snapshot, error) {
	return kube.NewSnapshot(cfg, log.With("component", "snapshot"), kube.WithoutEvents())
}

// RemoveBundlesOnceJoined removes each join bundle forming saved in dir
// once its node is a Ready member of the cluster: the bundle carries the
// cluster token and is not needed after the join. It looks on every change
// of the snapshot (no polling) until none is left or ctx ends.
func RemoveBundlesOnceJoined(ctx context.Context, snap *kube.Snapshot, dir string, log *slog.Logger) {
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	for {
		if snap.Synced() {
			// One lister lookup per saved bundle: no copy of the cluster.
			removed, left, err := RemoveJoinedBundles(dir, func(node string) bool {
				n, ok := snap.Node(node)
				return ok && kube.NodeIsReady(n)
			})
			for _, node := range removed {
				log.Info("removed the join bundle of a node that has joined", "node", node, "dir", dir)
			}
			switch {
			case err != nil:
				log.Warn("join bundles", "dir", dir, "err", err)
			case left == 0:
				// None saved on this node, or every node joined.
				if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
					log.Warn("join bundles", "dir", dir, "err", err)
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
	}
}
