package bringup

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/access"
)

// clusterLink is this node's link to its cluster once k3s runs: it
// connects the snapshot when the kubeconfig exists, hands it to whoever
// starts the work that needs the cluster, and follows this node's own Node
// object (is it a member, has it joined). It holds no pointer back into the
// Runner: what the bring-up does on connecting is the connected callback.
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
func (r *Runner) linkCluster(ctx context.Context, v *config.Validated, role k3s.Role, k3sWritten <-chan struct{}, removed func(evidence string)) *clusterLink {
	// `k3s agent` writes no admin kubeconfig: a worker reaches the cluster
	// with its node's own identity, which the servers grant only what a
	// worker's agent needs (GrantAgentAccess).
	kubeconfig := k3s.AgentKubeconfig(r.opts.Kubeconfig, role, r.opts.K3sPaths, kube.K3sKubeconfig)
	m := &clusterLink{node: v.NodeName, kubeconfig: kubeconfig, log: r.log}
	m.connected = func(ctx context.Context, snap *kube.Snapshot) {
		r.host.StartClusterWork(ctx, snap, v.NodeName, v.NodeUUID, role, LifeKey(v.ClusterID, v.Token, r.opts.NodeWord, r.log))
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
			r.followSeed(ctx, snap, v)
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
	snap, err := AgentSnapshot(cfg, m.log)
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
func (r *Runner) followSeed(ctx context.Context, snap *kube.Snapshot, v *config.Validated) {
	follower := &formation.SeedFollower{Config: v, Paths: r.opts.K3sPaths,
		RecordPath: r.opts.Records.SeedRecordFile(), Log: r.log.With("component", "seed"),
		OnRender: func(ip netip.Addr) { r.host.SetSeedAddress(ip.String()) }}
	follower.Run(ctx, snap)
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
func (r *Runner) recordCluster(ctx context.Context, snap *kube.Snapshot, v *config.Validated) {
	rec := kube.ClusterRecord{Name: v.ClusterName, ID: v.ClusterID, JoinServerIP: v.JoinIP.String(), FailoverTimeout: r.opts.FailoverTimeout}
	if v.IsSeed {
		rec.SeedNode = v.NodeName
	}
	r.host.Retry(ctx, func() bool {
		err := kube.EnsureClusterConfigMap(ctx, snap.Clients().Core, rec, v.NodeName)
		switch {
		case err == nil:
			r.log.Info("cluster record in place", "configmap", kube.ClusterConfigMapName)
		case errors.Is(err, kube.ErrForeignClusterRecord):
			r.log.Error("cluster record", "err", err)
		default:
			r.log.Debug("cluster record not written yet", "err", err)
			return false
		}
		return true
	})
}

// GrantAgentAccess lets the agents of worker nodes reach the cluster with
// their nodes' own identities, and no further than their nodes: the
// servers (with k3s's admin kubeconfig) put the node policy in force and
// grant the node identities the agent's rules. A server grants once it
// joined (Run); the agent run with a server's credential against a cluster
// it did not form grants too. It grants again every AgentAccessRenewal:
// a policy or grant removed by hand is put back, and a grant another
// server took back (its API server without the policy API, mid-upgrade)
// returns once every server serves it.
func (r *Runner) GrantAgentAccess(ctx context.Context, snap *kube.Snapshot) {
	for said := false; ; said = true {
		r.grantAgentAccess(ctx, snap, said)
		select {
		case <-ctx.Done():
			return
		case <-time.After(AgentAccessRenewal):
		}
	}
}

// AgentAccessRenewal is how often a server puts the agents' grant and the
// node policies right: a few applies that change nothing when all is well.
const AgentAccessRenewal = 10 * time.Minute

// grantAgentAccessWarnAfter is how many failed tries in a row are worth a
// warning: one or two fail while the API server starts.
const grantAgentAccessWarnAfter = 5

// grantAgentAccess grants until it is done; said: a grant in place was
// logged already (the renewals are not).
func (r *Runner) grantAgentAccess(ctx context.Context, snap *kube.Snapshot, said bool) {
	warned, failed := false, 0
	r.host.Retry(ctx, func() bool {
		err := access.EnsureAgentAccess(ctx, snap.Clients().Core)
		switch {
		case errors.Is(err, access.ErrNodePolicy) && !warned:
			// Said once, loudly: without the confinement the nodes'
			// identities get the reads alone.
			warned = true
			r.log.Warn("this API server cannot confine the nodes' writes to their own nodes and apps: workers' agents read the cluster but lay out no app", "err", err)
			return false
		case err != nil:
			if failed++; failed == grantAgentAccessWarnAfter {
				r.log.Warn("agent access for workers still not granted: their agents cannot read the cluster or lay out their apps", "tries", failed, "err", err)
			} else {
				r.log.Debug("agent access for workers not granted yet", "err", err)
			}
			return false
		}
		if !said {
			r.log.Info("agent access for worker nodes in place", "clusterrole", kube.AgentRoleName, "group", access.NodesGroup, "policy", kube.NodePolicyName)
		}
		return true
	})
}

// AgentSnapshot is the agent's view of the cluster. The agent writes
// Events but never reads them: it does not watch them (a busy site's
// Events would be most of what it holds). It decides on the shown
// namespaces' pods only: the other pods' comings and goings wake none of
// its readers. It runs for the device's lifetime: its first sync's peak
// goes back to the system.
func AgentSnapshot(cfg *rest.Config, log *slog.Logger) (*kube.Snapshot, error) {
	return kube.NewSnapshot(cfg, log.With("component", "snapshot"), kube.WithoutEvents(), kube.CountedPodsWakeNobody(), kube.ReturnSyncPeak())
}
