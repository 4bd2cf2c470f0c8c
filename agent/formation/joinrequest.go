package formation

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
)

// JoinRequest is what a new node's join info is asked for with.
type JoinRequest struct {
	// Role is server, agent (EVE nodes) or edgeworker (a generic k3s host).
	Role, NodeName string
	// NodeUUID is an EVE node's device UUID.
	NodeUUID string
	// NodeIP is the new node's cluster address; empty: the first free one.
	NodeIP string
}

// ClusterView is what the cluster says that join info depends on: its
// Nodes and cluster record (the seed in effect), the addresses its nodes
// use, and its version. Data nil: the cluster could not be read; Used nil:
// the addresses in use are unknown, not free.
type ClusterView struct {
	Data          *kube.Data
	Used          []netip.Addr
	ServerVersion string
}

// ViewOf is the cluster as a synced snapshot holds it: no request. Not
// synced, nothing is known.
func ViewOf(d kube.Data, synced bool) ClusterView {
	if !synced {
		return ClusterView{}
	}
	v := ClusterView{Data: &d, Used: []netip.Addr{}}
	for _, n := range d.Nodes {
		if ip, err := netip.ParseAddr(kube.InternalIP(n)); err == nil {
			v.Used = append(v.Used, ip)
		}
	}
	return v
}

// ReadClusterView asks the cluster, briefly, which addresses its nodes use
// and its version, with its Nodes and cluster record for the seed in
// effect; the zero view when it cannot be asked.
func ReadClusterView(ctx context.Context, cfg *rest.Config) ClusterView {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 3 * time.Second // one-shot requests only
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return ClusterView{}
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return ClusterView{}
	}
	data := &kube.Data{}
	for i := range nodes.Items {
		data.Nodes = append(data.Nodes, &nodes.Items[i])
	}
	// The record is read too; without it (not found, forbidden) the seed
	// in effect is the one this node's files say.
	if cm, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.ClusterConfigMapName, metav1.GetOptions{}); err == nil {
		data.ConfigMaps = []*corev1.ConfigMap{cm}
	}
	v := ClusterView{Data: data, Used: []netip.Addr{}}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				v.Used = append(v.Used, ip)
			}
		}
	}
	if info, err := cs.Discovery().ServerVersion(); err == nil {
		v.ServerVersion = info.GitVersion
	}
	return v
}

// LoadClusterConfig reads and checks this node's cluster config (the
// interface need not exist here: only the addressing and token are used).
func LoadClusterConfig(path string) (*config.Validated, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	env := config.HostEnvironment()
	env.InterfaceExists = nil
	return config.Validate(cfg, env)
}

// ConfigInEffect is this node's config with the seed in effect as its join
// address, decided as the agent decides it: the config, the seed record in
// the agent's records, and the cluster's record checked against its Nodes
// when the cluster could be read (d nil: it could not). A bundle made from
// it sends the new node to the seed every member follows, not to the one
// this node's file was formed with.
func ConfigInEffect(path string, records Records, d *kube.Data) (*config.Validated, SeedDecision, error) {
	v, err := LoadClusterConfig(path)
	if err != nil {
		return nil, SeedDecision{}, err
	}
	in, err := LocalSeedInputs(records, v)
	if err != nil {
		// Unknown is not empty: the record may name the only live seed.
		return nil, SeedDecision{}, fmt.Errorf("this node's seed record cannot be read, so the seed in effect is unknown: %w", err)
	}
	if d != nil {
		in.Nodes = d.Nodes
		for _, cm := range d.ConfigMaps {
			if cm.Name == kube.ClusterConfigMapName && cm.Namespace == kube.AppNamespace {
				in.Cluster = cm.Data
			}
		}
	}
	seed := SeedInEffect(in)
	return seed.Config, seed, nil
}
