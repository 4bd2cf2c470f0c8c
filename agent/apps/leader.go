package apps

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/sitecon/sitecon/kube"
)

// LeaderDurations are the stats-leader election's timings. The defaults suit
// edge links: a lease survives a few seconds of a congested or flapping LAN,
// and a dead leader is replaced within about half a minute.
type LeaderDurations struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultLeaderDurations are the timings used unless configured.
var DefaultLeaderDurations = LeaderDurations{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// StatsLeader elects, among the nodes' agents, the one that publishes
// cluster-wide stats: client-go leader election on the Lease
// eve-kube-stats-leader in eve-kube-app, identity = node name.
type StatsLeader struct {
	Client    kubernetes.Interface
	Identity  string
	Durations LeaderDurations
	Log       *slog.Logger
	// ReleaseOnCancel gives the lease up on a clean shutdown so another node
	// takes over at once instead of after the lease expires.
	ReleaseOnCancel bool
	// OnStarted and OnStopped are called when this node gains and loses
	// the leadership.
	OnStarted, OnStopped func()

	mu       sync.Mutex
	leading  bool
	observed string
}

// LeaderState is what the agent publishes about the election.
type LeaderState struct {
	Identity string `json:"identity"`
	Leader   string `json:"leader"`
	IsLeader bool   `json:"isLeader"`
}

// State reports this node's view of the election.
func (s *StatsLeader) State() LeaderState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return LeaderState{Identity: s.Identity, Leader: s.observed, IsLeader: s.leading}
}

// Run takes part in the election until ctx ends. A lost API server or a lost
// lease ends a term; it then stands again, so one node is always trying.
func (s *StatsLeader) Run(ctx context.Context) error {
	d := s.Durations
	if d == (LeaderDurations{}) {
		d = DefaultLeaderDurations
	}
	log := s.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: kube.StatsLeaderLeaseName, Namespace: kube.AppNamespace},
		Client:     s.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: s.Identity},
	}
	for ctx.Err() == nil {
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   d.LeaseDuration,
			RenewDeadline:   d.RenewDeadline,
			RetryPeriod:     d.RetryPeriod,
			ReleaseOnCancel: s.ReleaseOnCancel,
			Name:            kube.StatsLeaderLeaseName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					s.mu.Lock()
					s.leading = true
					s.mu.Unlock()
					log.Info("stats leader: this node leads", "identity", s.Identity)
					if s.OnStarted != nil {
						s.OnStarted()
					}
				},
				OnStoppedLeading: func() {
					s.mu.Lock()
					was := s.leading
					s.leading = false
					s.mu.Unlock()
					if was {
						log.Info("stats leader: this node stopped leading", "identity", s.Identity)
						if s.OnStopped != nil {
							s.OnStopped()
						}
					}
				},
				OnNewLeader: func(identity string) {
					s.mu.Lock()
					s.observed = identity
					s.mu.Unlock()
					log.Info("stats leader", "leader", identity)
				},
			},
		})
		if err != nil {
			return fmt.Errorf("stats leader election: %w", err)
		}
		elector.Run(ctx)
	}
	return nil
}

// Follow keeps this node's view of the election without standing in it,
// from the Lease as the snapshot holds it, until ctx ends: an agent whose
// identity may not hold the Lease (a worker's, kube.EnsureAgentAccess)
// follows the servers' election instead. It never leads.
func (s *StatsLeader) Follow(ctx context.Context, snap *kube.Snapshot) {
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	for {
		holder := ""
		for _, l := range snap.Data().Leases {
			if l.Name == kube.StatsLeaderLeaseName && l.Namespace == kube.AppNamespace && l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
		}
		s.mu.Lock()
		s.observed = holder
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
	}
}
