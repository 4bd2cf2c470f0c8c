package apps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sitecon/sitecon/kube"
)

// The two timers of a failover, the lost node's fence bound and the
// leader's force-delete timer, are each node's own --failover-timeout.
// Each agent publishes its own on its Node (kube.AnnotationFence), and the
// leader lets a lost node's pods go only when that node fences with the
// leader's own timeout: a node started with a longer one would fence after
// the force-delete, one run --no-fence (or with no agent at all) never.

// fenceUncertain says why a leader timing with leaderTimeout cannot count
// on node having fenced before its force-delete ("" when it can): the
// node's agent never said how it fences, says it does not, or fences with
// another timeout.
func fenceUncertain(node *corev1.Node, leaderTimeout time.Duration) string {
	if node == nil {
		return "its Node is not known"
	}
	s, problem := kube.NodeFenceSettings(node)
	switch {
	case problem != "":
		return problem
	case !s.Fencing:
		return fmt.Sprintf("node %s's agent runs without fencing (--no-fence): its containers may run on", node.Name)
	case s.FailoverTimeout != leaderTimeout:
		return fmt.Sprintf("node %s fences with --failover-timeout %s, not this leader's %s: it may fence after the force-delete", node.Name, s.FailoverTimeout, leaderTimeout)
	}
	return ""
}

// confirmOffAdvice is what the technician can do about a held failover.
func confirmOffAdvice(node string) string {
	return fmt.Sprintf("power the device off, or, once it is off, confirm it: kubectl taint node %s node.kubernetes.io/out-of-service=nodeshutdown:NoExecute", node)
}

// FenceSettingsRecord is where the fence watch keeps what its Node says
// (FenceWatch): WillPublish before the Node is made to say more, NodeSays
// with what it says.
type FenceSettingsRecord interface {
	WillPublish(want string) bool
	NodeSays(v string)
}

var errNotRecorded = errors.New("the fence record could not be written first")

// PublishFenceSettings keeps node's kube.AnnotationFence equal to s, from
// the cluster cache's changes (no polling): written when the Node lacks it
// or says otherwise, retried at the next change or after a minute. record
// (if not nil) is told before the Node is made to say more, and what it
// says, as read or as written: the fence watch fences by that while it is
// stricter than s (FenceWatch.NodeSays).
func PublishFenceSettings(ctx context.Context, snap *kube.Snapshot, node string, s kube.FenceSettings, record FenceSettingsRecord, log *slog.Logger) {
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	want := s.String()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{kube.AnnotationFence: want}}})
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		if n, ok := snap.Node(node); ok {
			says := n.Annotations[kube.AnnotationFence]
			if says != want {
				var written *corev1.Node
				err := errNotRecorded
				if record == nil || record.WillPublish(want) {
					written, err = snap.Clients().Core.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "sitecon-agent"})
				}
				if err != nil {
					log.Warn("fence settings not published on this node's Node: the leader holds the failover of its pods", "settings", want, "err", err)
					retry.Reset(time.Minute)
				} else {
					says = written.Annotations[kube.AnnotationFence]
					log.Info("fence settings published", "settings", want)
				}
			}
			if record != nil {
				record.NodeSays(says)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-retry.C:
		}
	}
}
