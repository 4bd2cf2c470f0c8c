package formation

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
)

// SeedSource is where the seed in effect comes from.
type SeedSource string

// Seed sources, from the weakest to the freshest.
const (
	SeedFromConfig  SeedSource = "config"
	SeedFromRecord  SeedSource = "seed record"
	SeedFromCluster SeedSource = "cluster"
)

// SeedInputs is everything the seed in effect is decided from. Each part may
// be missing: Record nil (no record on the device), Cluster nil (the cluster
// cannot be asked, e.g. at bring-up before k3s runs), Nodes nil (unknown).
type SeedInputs struct {
	// Config is the node's validated config as on disk (no seed applied).
	Config *config.Validated
	Record *SeedRecord
	// Cluster is the sitecon-cluster ConfigMap's data.
	Cluster map[string]string
	Nodes   []*corev1.Node
}

// SeedDecision is the seed in effect and why.
type SeedDecision struct {
	// Config is the node's config with the seed in effect as its join
	// address; IsSeed says this node is that seed.
	Config *config.Validated
	JoinIP netip.Addr
	Source SeedSource
	Why    string
	// RecordStale: the seed record no longer applies and may be removed.
	RecordStale bool
	// ClusterNote says why the cluster's record was not followed, if it
	// names another address.
	ClusterNote string
	// MayInitialise: the seed is the one the node's own config names, not a
	// seed learnt later. Only then may this node ever run cluster-init (and
	// only on its first boot, see InitCheck): a seed reached through a
	// seed change is a member with data, and one without would split the
	// site.
	MayInitialise bool
}

// SeedInEffect is the one decision of the join address: the node's config,
// then a seed record that still applies to it, then the cluster's own record
// when it is this cluster's and names the InternalIP of a Ready etcd-member
// Node. Neither the record nor the cluster ever changes what the node is: a
// worker stays a worker (an address naming a worker's own is refused), and a
// learnt seed never initialises.
func SeedInEffect(in SeedInputs) SeedDecision {
	v := in.Config
	d := SeedDecision{Config: v, JoinIP: v.JoinIP, Source: SeedFromConfig, MayInitialise: true,
		Why: fmt.Sprintf("join_server_ip %s in the node's config", v.JoinIP)}
	if in.Record != nil {
		moved, applied, stale := ApplySeedRecord(v, *in.Record)
		d.RecordStale = stale
		if applied {
			d.Config, d.JoinIP, d.Source, d.MayInitialise = moved, moved.JoinIP, SeedFromRecord, false
			d.Why = fmt.Sprintf("seed change to %s recorded on this device (config names %s)", moved.JoinIP, v.JoinIP)
		}
	}
	if in.Cluster == nil {
		return d
	}
	cs := kube.JudgeClusterSeed(in.Cluster, in.Nodes)
	if !cs.Present || cs.JoinIP == d.JoinIP {
		return d
	}
	note := ""
	switch {
	case cs.ID != "" && !strings.EqualFold(cs.ID, v.ClusterID):
		note = fmt.Sprintf("the cluster record is of cluster %s, not %s", cs.ID, v.ClusterID)
	case !cs.JoinIP.IsValid():
		note = cs.Reason
	case !v.Network.Contains(cs.JoinIP):
		note = fmt.Sprintf("%s is outside the cluster prefix %s", cs.JoinIP, v.Network)
	case in.Nodes == nil:
		note = "the cluster's nodes are not known, so " + cs.JoinIP.String() + " cannot be checked"
	case !cs.Accepted:
		note = cs.Reason
	case v.IsWorkerNode && cs.JoinIP == v.NodeIP:
		note = fmt.Sprintf("%s is this worker's own address: a worker is never the seed", cs.JoinIP)
	}
	if note != "" {
		d.ClusterNote = fmt.Sprintf("the cluster record names %s, not followed: %s", cs.JoinIP, note)
		return d
	}
	d.Config, d.JoinIP, d.Source, d.MayInitialise = v.WithJoinIP(cs.JoinIP), cs.JoinIP, SeedFromCluster, false
	d.Why = fmt.Sprintf("the cluster's seed is %s (%s, Ready etcd member)", cs.JoinIP, cs.Node)
	return d
}

// LocalSeedInputs are the seed-in-effect inputs a node has on its own disk:
// its config and the seed record in the agent's records. An unreadable
// record is returned as an error along with the inputs without it, for the
// caller to report: the config's seed is then the best the node knows.
func LocalSeedInputs(records Records, v *config.Validated) (SeedInputs, error) {
	in := SeedInputs{Config: v}
	rec, ok, err := ReadSeedRecord(records.SeedRecordFile())
	if ok {
		in.Record = &rec
	}
	return in, err
}
