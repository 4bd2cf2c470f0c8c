package flow

import (
	"context"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
)

// ActionRemove is a node removal's action name, as recorded. A removal is
// a drain (NewDrain, with the drain's preflight judged for a remove) and,
// once drained, the node's deletion (remove); a replace's drain is
// recorded as ActionReplace (replace.go).
const ActionRemove = "remove-node"

// remove deletes the drained node from the cluster. The drain took
// minutes: quorum, the last copies and the seed are judged again, from the
// API server, before the node is deleted.
func (d *Drain) remove(ctx context.Context, snap *kube.Snapshot, progress func(string)) error {
	node := d.Preflight.Node
	progress("re-checking quorum, the volumes' copies and the seed before removing " + node)
	if err := change.RemoveAsConfirmed(ctx, snap.Clients(), snap.Data(), d.Preflight); err != nil {
		return err
	}
	progress(node + " removed from the cluster")
	if d.removed != nil {
		d.removed()
	}
	return nil
}
