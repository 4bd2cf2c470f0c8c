package apps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/workloads"
	"github.com/sitecon/sitecon/kube"
)

// renewBudget bounds one renewal pass (its reads and deletes).
const renewBudget = probeTimeout

// renewGiveUp is how long after the fence lifted the watch goes on
// trying to renew the pods it stopped (an API server that refuses the
// deletes all along): after that the kubelet's back-off ends it anyway.
const renewGiveUp = 5 * time.Minute

// renewStopped renews the pods the fence stopped (Renew) and returns
// those left to renew.
func (w *FenceWatch) renewStopped(ctx context.Context, uids []string, sinceLift time.Duration) []string {
	// Bounded: the fence's checks wait on it, and a link that drops again
	// right after the lift must not hold the next fence up.
	renewCtx, cancel := context.WithTimeout(ctx, renewBudget)
	done, err := w.Renew(renewCtx, uids)
	cancel()
	left := slices.DeleteFunc(slices.Clone(uids), func(uid string) bool { return slices.Contains(done, uid) })
	switch {
	case err != nil && sinceLift >= renewGiveUp:
		w.Log.Warn("the pods the fence stopped are left to the kubelet's crash back-off: their deletion kept failing", "pods", len(left), "err", err)
		return nil
	case err != nil:
		w.Log.Warn("renewing the pods the fence stopped (retried)", "pods", len(left), "err", err)
	}
	return left
}

// renewStoppedPods is the default Renew: through the cluster cache's
// clients, each app pod still bound to this node, not being deleted and
// with no container process is deleted, with its UID as precondition (a
// pod of the same name made since is not touched). Only once this node is
// Ready again, its unreachable taint gone: its kubelet then hears of the
// deletion and does not start the old container again after its back-off
// while the replacement starts elsewhere. A pod of no app is left to the
// kubelet (deleted, nothing would make it again).
func (w *FenceWatch) renewStoppedPods(ctx context.Context, uids []string) ([]string, error) {
	w.mu.Lock()
	snap := w.snap
	w.mu.Unlock()
	if snap == nil {
		return nil, errors.New("not connected to the cluster yet")
	}
	if n, ok := snap.Node(w.Node); !ok || !kube.NodeIsReady(n) || unreachableTaint(n) != nil {
		return nil, errors.New("waiting for this node to be Ready again (its kubelet in contact) before renewing the pods the fence stopped")
	}
	running, err := workloads.RunningPods(uids)
	if err != nil {
		return nil, fmt.Errorf("reading the pods' processes: %w", err)
	}
	byUID := map[string]*corev1.Pod{}
	for _, p := range snap.Data().Pods {
		if slices.Contains(uids, string(p.UID)) {
			byUID[string(p.UID)] = p
		}
	}
	var done []string
	var errs []error
	for _, uid := range uids {
		p := byUID[uid]
		if p == nil || p.Spec.NodeName != w.Node || p.DeletionTimestamp != nil || running[uid] || p.Labels[kube.LabelAppUUID] == "" {
			done = append(done, uid)
			continue
		}
		err := snap.Clients().Core.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(uid)})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("delete pod %s: %w", p.Name, err))
			continue
		}
		done = append(done, uid)
		w.Log.Info("fence lifted: the pod it stopped is deleted, to start afresh rather than after the kubelet's crash back-off", "pod", p.Name, "app", p.Labels[kube.LabelAppName])
	}
	return done, errors.Join(errs...)
}
