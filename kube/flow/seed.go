package flow

import (
	"context"
	"fmt"
	"slices"
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
	// Already: node is the seed now (its address is the join address):
	// nothing to change.
	Already bool
}

// SeedAlready says that node is the seed already, at address.
func SeedAlready(node, address string) string {
	if address == "" {
		return node + " is the seed already: nothing to do"
	}
	return fmt.Sprintf("%s is the seed already (join_server_ip %s): nothing to do", node, address)
}

// PlanSeed checks that node may become the seed (Ready, an etcd member);
// a refusal is recorded and returned as a *Refused.
func PlanSeed(r Recorder, snap *kube.Snapshot, node string) (*Seed, error) {
	rec := r.Open("seed", node)
	if !snap.Synced() {
		return nil, rec.Refuse(NotRead)
	}
	d := snap.Data()
	st := kube.Derive(d, time.Now())
	s := &Seed{Action: Action{Record: rec}, Node: node, From: st.Cluster.SeedAddress}
	// As the nodes screen marks the seed: its address is the join address.
	// Nothing to change then, Ready or not: said before any check.
	if s.Already = slices.ContainsFunc(st.Nodes, func(n kube.NodeStatus) bool { return n.Name == node && n.Seed }); s.Already {
		return s, nil
	}
	if err := safety.SeedCheck(kube.NodeFacts(d.Nodes), node); err != nil {
		return nil, rec.Refuse(err.Error())
	}
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
