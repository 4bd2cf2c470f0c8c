package change

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/safety"
)

// RemovalStoppedError is a remove or replace stopped after its drain and
// before the node was deleted: the cluster changed during the drain (a
// server lost, a copy gone) so that deleting the node now would not be
// the removal confirmed. The drain's cordon and evictions stand; nothing
// further was changed.
type RemovalStoppedError struct {
	Node    string
	Reasons []string
}

func (e *RemovalStoppedError) Error() string {
	return fmt.Sprintf("%s is drained but was not removed: the cluster changed during the drain: %s; nothing further was changed: %s stays in the cluster and in etcd, cordoned (sitecon uncordon %s takes it back; remove it again once the cluster has recovered)",
		e.Node, strings.Join(e.Reasons, "; "), e.Node, e.Node)
}

// RemoveAsConfirmed deletes confirmed.Node, just drained for a remove or
// replace, only if a preflight taken now from the API server still agrees
// with the one confirmed (safety.Reconfirm), and the node is still not the seed;
// otherwise it returns a *RemovalStoppedError and deletes nothing. The
// drain took up to its timeout (minutes, behind disruption budgets): a
// server lost meanwhile would turn the removal into the loss of quorum,
// and a replica failed meanwhile into the loss of the last copy.
func RemoveAsConfirmed(ctx context.Context, clients *kube.Clients, d kube.Data, confirmed safety.Preflight) error {
	node := confirmed.Node
	fresh, err := freshDrainData(ctx, clients, d)
	if err == nil {
		fresh, err = freshClusterRecord(ctx, clients, fresh)
	}
	var now safety.Preflight
	if err == nil {
		now, err = CheckDrain(ctx, clients, fresh, node, DrainOptions{Purpose: confirmed.Purpose, LocalNode: confirmed.LocalNode})
	}
	if err != nil {
		// Unknown is not "still fine".
		return &RemovalStoppedError{Node: node, Reasons: []string{"the re-check before deleting it failed: " + err.Error()}}
	}
	reasons := safety.Reconfirm(confirmed, now)
	if why := kube.SeedRemovalRefusal(fresh, node); why != "" {
		reasons = append(reasons, why)
	}
	if len(reasons) > 0 {
		return &RemovalStoppedError{Node: node, Reasons: reasons}
	}
	return RemoveNode(ctx, clients.Core, node)
}

// RemoveNode deletes a drained node's Node object (k3s then drops its etcd
// member) and takes it off the cluster's node list. It judges nothing:
// after a drain, RemoveAsConfirmed re-checks first.
func RemoveNode(ctx context.Context, cs kubernetes.Interface, node string) error {
	if err := cs.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s: %w", node, safety.ErrUnknownNode)
		}
		return err
	}
	return kube.RemoveFromNodeList(ctx, cs, node)
}
