package apps

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
)

// The failover reconciler: the stats leader judges the app pods stuck
// terminating on lost nodes (DecideFailover, failover.go) and carries out
// the verdicts: a force-delete, then the release of the volumes the
// evidence vouched for.

// failover judges app pods stuck terminating on lost nodes (leader only).
// It returns when the next verdict could change (0: none pending).
func (a *Agent) failover(ctx context.Context, set AppSet, observed map[string]AppObservation, nodes map[string]*corev1.Node, d kube.Data, states []AppState, now time.Time) time.Duration {
	next := time.Duration(0)
	soon := func(wait time.Duration) {
		if wait = max(wait, 10*time.Millisecond); next == 0 || wait < next {
			next = wait
		}
	}
	live := map[types.UID]bool{}
	probed := map[string]NodeLife{} // one probe per node per pass
	for uuid, o := range observed {
		app, ok := set.Apps[uuid]
		if !ok {
			continue
		}
		for _, pod := range o.Stuck {
			node := nodes[pod.Spec.NodeName]
			if unreachableTaint(node) == nil {
				// Its kubelet finishes it. If the node is lost again later,
				// the timer starts from that sighting.
				continue
			}
			live[pod.UID] = true
			sp := a.stuck[pod.UID]
			if sp == nil {
				sp = &stuckPod{firstSeen: now}
				a.stuck[pod.UID] = sp
			}
			in := FailoverInput{App: app, Pod: pod, Node: node, FirstSeen: sp.firstSeen, Now: now, Timeout: a.opts.FailoverTimeout}
			v := DecideFailover(in)
			if v.NeedEvidence {
				if wait := failoverRecheck - now.Sub(sp.checked); !sp.checked.IsZero() && wait > 0 {
					// A hold or refusal stands until the evidence is read
					// again; a delete never rests on an earlier read.
					v = sp.verdict
					soon(wait)
				} else {
					in.Evidence = a.failoverEvidence(ctx, pod, node, probed)
					v = DecideFailover(in)
					sp.checked, sp.verdict = time.Time{}, v
					if v.Action == FailoverHold || v.Action == FailoverRefuse {
						sp.checked = time.Now()
						soon(failoverRecheck)
					}
				}
			}
			switch v.Action {
			case FailoverWait:
				soon(sp.firstSeen.Add(a.opts.FailoverTimeout).Sub(now))
				continue
			case FailoverForceDelete:
				err := a.snap.Clients().Core.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
					GracePeriodSeconds: ptr.To[int64](0), Preconditions: &metav1.Preconditions{UID: ptr.To(pod.UID)}})
				if err != nil && !apierrors.IsNotFound(err) {
					a.opts.Metrics.APIErrors.Inc()
					a.log.Error("force delete", "pod", pod.Name, "err", err)
					soon(5 * time.Second)
					continue
				}
				// Then its volumes' VolumeAttachments on the lost node, on
				// the same evidence. In this order: while the pod exists
				// the attach/detach controller wants the volume on that
				// node, and would attach it there again.
				if _, ok := a.releases[pod.UID]; !ok {
					a.releases[pod.UID] = &pendingRelease{in: in, verdict: v, app: app.DisplayName}
				}
			}
			for i := range states {
				if states[i].UUID == uuid {
					states[i].Failover = v.Reason
				}
			}
			if sp.reported == v.Action && (v.Action != FailoverHold || sp.reportedLife == v.Life) {
				continue
			}
			if sp.reported != v.Action {
				a.opts.Metrics.FailoverActions.WithLabelValues(string(v.Action)).Inc()
			}
			sp.reported, sp.reportedLife = v.Action, v.Life
			kind, evType, reason := EventFailover, corev1.EventTypeNormal, "ForceDeleted"
			switch v.Action {
			case FailoverHold:
				kind, evType, reason = EventRefusal, corev1.EventTypeWarning, "FailoverHeld"
			case FailoverRefuse, FailoverPinned:
				kind, evType, reason = EventRefusal, corev1.EventTypeWarning, "FailoverRefused"
			}
			a.log.Info("failover", "app", app.DisplayName, "pod", pod.Name, "action", v.Action, "reason", v.Reason)
			a.timeline.Add(TimelineEvent{Time: now, Kind: kind, App: app.DisplayName, Node: pod.Spec.NodeName, Message: v.Reason, Warning: v.Action != FailoverForceDelete})
			a.recorder.Event(pod, evType, reason, v.Reason)
		}
	}
	// Bounded memory: a pod gone, finished by its kubelet or deleted here
	// leaves no record behind.
	maps.DeleteFunc(a.stuck, func(uid types.UID, _ *stuckPod) bool { return !live[uid] })
	for uid, r := range a.releases {
		if unreachableTaint(nodes[r.in.Pod.Spec.NodeName]) == nil {
			// The node is back (or gone from the cluster): its kubelet
			// reports the volumes unused and the controller detaches them.
			delete(a.releases, uid)
			continue
		}
		if err := a.releaseAttachments(ctx, r, now); err != nil {
			soon(5 * time.Second)
			continue
		}
		delete(a.releases, uid)
	}
	return next
}

// pendingRelease is a force-delete whose VolumeAttachments on the lost node
// are still to be removed: the verdict and the evidence it rested on.
type pendingRelease struct {
	in      FailoverInput
	verdict FailoverVerdict
	app     string
}

// releaseAttachments deletes the VolumeAttachments that hold the
// force-deleted pod's volumes on its lost node (AttachmentsToRelease), read
// afresh from the API server, and records each in the timeline and as an
// Event on the pod. An error leaves the release to be tried again.
func (a *Agent) releaseAttachments(ctx context.Context, r *pendingRelease, now time.Time) error {
	client := a.snap.Clients().Core.StorageV1().VolumeAttachments()
	list, err := client.List(ctx, metav1.ListOptions{})
	if err != nil {
		a.opts.Metrics.APIErrors.Inc()
		a.log.Error("list volume attachments", "pod", r.in.Pod.Name, "err", err)
		return err
	}
	var errs []error
	node := r.in.Pod.Spec.NodeName
	for _, va := range AttachmentsToRelease(r.in, r.verdict, list.Items) {
		if va.DeletionTimestamp != nil {
			continue // being detached already
		}
		err := client.Delete(ctx, va.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(va.UID)}})
		if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			continue // gone, or another object of that name: not the one judged
		}
		if err != nil {
			a.opts.Metrics.APIErrors.Inc()
			a.log.Error("delete volume attachment", "attachment", va.Name, "err", err)
			errs = append(errs, err)
			continue
		}
		pv := ptr.Deref(va.Spec.Source.PersistentVolumeName, "")
		msg := fmt.Sprintf("released volume %s from lost node %s (deleted VolumeAttachment %s): up-to-date replica elsewhere, node silent; the attach/detach controller would hold it there 6 min after the force-delete",
			pv, node, va.Name)
		a.opts.Metrics.FailoverActions.WithLabelValues("release-attachment").Inc()
		a.log.Info("failover", "app", r.app, "pod", r.in.Pod.Name, "action", "release-attachment", "reason", msg)
		a.timeline.Add(TimelineEvent{Time: now, Kind: EventFailover, App: r.app, Node: node, Message: msg})
		a.recorder.Event(r.in.Pod, corev1.EventTypeNormal, "VolumeAttachmentDeleted", msg)
	}
	return errors.Join(errs...)
}

// failoverEvidence probes the lost node (once per pass) and, only when it
// is silent, reads the pod's claims afresh from the API server.
func (a *Agent) failoverEvidence(ctx context.Context, pod *corev1.Pod, node *corev1.Node, probed map[string]NodeLife) *FailoverEvidence {
	life, ok := probed[node.Name]
	if !ok {
		life = a.opts.NodeProbe(ctx, node)
		probed[node.Name] = life
	}
	ev := &FailoverEvidence{Alive: life.Alive, Probe: life.Detail, Life: life.Evidence}
	if !life.Alive {
		ev.Volumes = ReadFailoverEvidence(ctx, a.snap.Clients(), pod)
	}
	return ev
}
