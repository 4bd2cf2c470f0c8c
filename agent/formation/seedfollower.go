package formation

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/kube"
)

// SeedFollower keeps this node's k3s config joining through the cluster's
// seed in effect: when the sitecon-cluster ConfigMap moves the seed (sitecon
// seed NODE) to a Ready etcd member of this cluster (SeedInEffect), it
// re-renders the k3s config files and keeps the change in the seed record. A
// running k3s is left alone: the files matter at its next start.
type SeedFollower struct {
	// Config is the node's config as on disk; the seed record (RecordPath)
	// and the cluster's record are applied to it by SeedInEffect.
	Config *config.Validated
	Paths  k3s.Paths
	// RecordPath keeps the seed change on the device (SeedRecord); empty:
	// not kept.
	RecordPath string
	Log        *slog.Logger
	// OnRender is called after the files were rewritten (tests, state).
	OnRender func(joinIP netip.Addr)

	mu     sync.Mutex
	joinIP netip.Addr
}

// JoinIP is the seed address the rendered config joins through.
func (f *SeedFollower) JoinIP() netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.joinIP.IsValid() {
		return f.decide(nil, nil).JoinIP
	}
	return f.joinIP
}

// decide is the seed in effect with the cluster's record (nil: unknown).
func (f *SeedFollower) decide(cluster map[string]string, nodes []*corev1.Node) SeedDecision {
	in := SeedInputs{Config: f.Config, Cluster: cluster, Nodes: nodes}
	if f.RecordPath != "" {
		if rec, ok, err := ReadSeedRecord(f.RecordPath); err == nil && ok {
			in.Record = &rec
		}
	}
	return SeedInEffect(in)
}

// Run follows the ConfigMap through the snapshot until ctx ends.
func (f *SeedFollower) Run(ctx context.Context, snap *kube.Snapshot) {
	log := f.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	lastNote := ""
	for {
		data := snap.Data()
		if cm, ok := clusterData(data); ok {
			d := f.decide(cm, data.Nodes)
			if d.ClusterNote != "" && d.ClusterNote != lastNote {
				log.Warn("seed in the cluster record not followed", "why", d.ClusterNote)
			}
			lastNote = d.ClusterNote
			if d.Source == SeedFromCluster && d.JoinIP != f.JoinIP() {
				f.follow(d, log)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
	}
}

// follow re-renders the k3s config for the seed in effect d. A seed change
// never makes a node initialise a new cluster: a new seed without etcd data
// would split the site. It joins (and fails, visibly) instead.
func (f *SeedFollower) follow(d SeedDecision, log *slog.Logger) {
	ip := d.JoinIP
	// A node that follows the seed is a member: k3s's token pins the
	// cluster CA its own k3s holds, as its join did.
	k := k3s.Render(PinnedToken(d.Config, LocalCAPin(f.Paths, log)), f.Paths, true)
	err := f.record(ip)
	if err == nil {
		err = k.Write()
	}
	if err != nil {
		log.Error("re-render k3s config for the new seed", "seed", ip, "err", err)
		return
	}
	f.mu.Lock()
	f.joinIP = ip
	f.mu.Unlock()
	log.Info("seed changed: k3s config re-rendered", "seed", ip, "role", k.Role, "why", d.Why)
	if f.OnRender != nil {
		f.OnRender(ip)
	}
}

// record keeps the seed change on the device, or drops the record when the
// seed is back at the address the config names.
func (f *SeedFollower) record(ip netip.Addr) error {
	if f.RecordPath == "" {
		return nil
	}
	if ip == f.Config.JoinIP {
		if err := os.Remove(f.RecordPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return WriteSeedRecord(f.RecordPath, SeedRecord{ClusterID: f.Config.ClusterID, ConfigJoinIP: f.Config.JoinIP.String(),
		JoinServerIP: ip.String(), At: time.Now().UTC()})
}

// clusterData is the sitecon-cluster ConfigMap's data, if the snapshot has it.
func clusterData(d kube.Data) (map[string]string, bool) {
	for _, cm := range d.ConfigMaps {
		if cm.Name == kube.ClusterConfigMapName && cm.Namespace == kube.AppNamespace {
			if cm.Data == nil {
				return map[string]string{}, true
			}
			return cm.Data, true
		}
	}
	return nil, false
}
