package change

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"

	"github.com/sitecon/sitecon/kube/safety"
)

// Cordon marks a node unschedulable (or schedulable again: uncordon).
func Cordon(ctx context.Context, cs kubernetes.Interface, node string, unschedulable bool) (changed bool, err error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, fmt.Errorf("%s: %w", node, safety.ErrUnknownNode)
	}
	if err != nil {
		return false, err
	}
	h := drain.NewCordonHelper(n)
	if !h.UpdateIfRequired(unschedulable) {
		return false, nil
	}
	err, patchErr := h.PatchOrReplaceWithContext(ctx, cs, false)
	return true, errors.Join(err, patchErr)
}
