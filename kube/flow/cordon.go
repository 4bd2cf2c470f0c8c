package flow

import (
	"context"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
)

// Cordon marks node unschedulable (cordon true) or schedulable again.
func Cordon(r Recorder, snap *kube.Snapshot, node string, cordon bool) *Action {
	name := CordonName(cordon)
	a := &Action{Record: r.Open(name, node)}
	a.Change = func(ctx context.Context, progress func(string)) error {
		changed, err := change.Cordon(ctx, snap.Clients().Core, node, cordon)
		if err == nil && !changed {
			progress(node + " was already " + name + "ed")
		}
		return err
	}
	return a
}

// CordonName is the action's name: cordon or uncordon.
func CordonName(cordon bool) string {
	if cordon {
		return "cordon"
	}
	return "uncordon"
}
