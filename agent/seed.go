package agent

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/sitecon/sitecon/kube"
)

// SeedFollower keeps this node's k3s config joining through the cluster's
// current seed: when join_server_ip in the sitecon-cluster ConfigMap changes
// (sitecon seed NODE), it re-renders the k3s config files. A running k3s is
// left alone: the files matter at its next start.
type SeedFollower struct {
	// Config is the config in effect (with a recorded seed change applied).
	Config *Validated
	Paths  K3sPaths
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
		return f.Config.JoinIP
	}
	return f.joinIP
}

// Run follows the ConfigMap through the snapshot until ctx ends.
func (f *SeedFollower) Run(ctx context.Context, snap *kube.Snapshot) {
	log := f.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	for {
		if ip, ok := clusterJoinIP(snap.Data()); ok && ip != f.JoinIP() && f.Config.Network.Contains(ip) {
			v := f.Config.WithJoinIP(ip)
			// A seed change never makes a node initialise a new cluster: a
			// new seed without etcd data would split the site. It joins
			// (and fails, visibly) instead.
			k := RenderK3s(v, f.Paths, true)
			err := f.record(ip)
			if err == nil {
				err = k.Write()
			}
			if err != nil {
				log.Error("re-render k3s config for the new seed", "seed", ip, "err", err)
			} else {
				f.mu.Lock()
				f.joinIP = ip
				f.mu.Unlock()
				log.Info("seed changed: k3s config re-rendered", "seed", ip, "role", k.Role)
				if f.OnRender != nil {
					f.OnRender(ip)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
	}
}

// record keeps the seed change on the device, or drops the record when the
// seed is back at the address the config names.
func (f *SeedFollower) record(ip netip.Addr) error {
	if f.RecordPath == "" {
		return nil
	}
	// The seed the node's own config names: the record's, if one is in
	// force; else the config in effect is the node's own.
	configIP := f.Config.JoinIP.String()
	if prev, ok, err := ReadSeedRecord(f.RecordPath); err == nil && ok {
		configIP = prev.ConfigJoinIP
	}
	if ip.String() == configIP {
		if err := os.Remove(f.RecordPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return WriteSeedRecord(f.RecordPath, SeedRecord{ClusterID: f.Config.ClusterID, ConfigJoinIP: configIP,
		JoinServerIP: ip.String(), At: time.Now().UTC()})
}

func clusterJoinIP(d kube.Data) (netip.Addr, bool) {
	for _, cm := range d.ConfigMaps {
		if cm.Name == kube.ClusterConfigMapName && cm.Namespace == kube.AppNamespace {
			ip, err := netip.ParseAddr(cm.Data[kube.ClusterKeyJoinServerIP])
			return ip, err == nil
		}
	}
	return netip.Addr{}, false
}
