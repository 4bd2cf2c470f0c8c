package flow

import (
	"context"
	"fmt"
	"time"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/safety"
)

// Seed is a change of the seed server every node joins through.
type Seed struct {
	Action
	Node string
	// From is the join address in effect before.
	From string
}

// PlanSeed checks that node may become the seed (Ready, an etcd member);
// a refusal is recorded and returned as a *Refused.
func PlanSeed(r Recorder, snap *kube.Snapshot, node string) (*Seed, error) {
	rec := r.Open("seed", node)
	if !snap.Synced() {
		return nil, rec.Refuse(NotRead)
	}
	d := snap.Data()
	if err := safety.SeedCheck(kube.NodeFacts(d.Nodes), node); err != nil {
		return nil, rec.Refuse(err.Error())
	}
	s := &Seed{Action: Action{Record: rec}, Node: node, From: kube.Derive(d, time.Now()).Cluster.SeedAddress}
	s.Change = func(ctx context.Context, progress func(string)) error {
		ip, err := change.SetSeed(ctx, snap.Clients().Core, d, node)
		if err != nil {
			return err
		}
		s.SetDetail(fmt.Sprintf("join_server_ip %s → %s", s.From, ip))
		progress(fmt.Sprintf("%s is the seed: join_server_ip %s", node, ip))
		return nil
	}
	return s, nil
}
