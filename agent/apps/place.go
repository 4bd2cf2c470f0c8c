package apps

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	kvv1 "kubevirt.io/api/core/v1"
)

// place lays out the apps and volumes this node is the DNId of, one
// reconciler per concern, in this order: what is desired (desiredLayouts),
// writing it (layoutWriter), restarting the pinned VMs KubeVirt leaves
// failed (failedPinnedVMIs), removing what no longer has a place here
// (orphanRemover), recording on what another node places now the config
// this node holds (handovers). An agent with its node's identity writes
// only the workloads the record of designations names it for
// (awaitingRecord). What placement finds wrong lands in the app states. It
// returns when to retry a write held or refused (0: nothing to retry).
func (c *Controller) place(ctx context.Context, set AppSet, decisions map[string]AppDecision, states []PublishedApp, record map[string]string, myUUID string, writesClaimsOf func(dnid string) bool, nodeReady func(string) bool, vmis []*kvv1.VirtualMachineInstance, now time.Time) time.Duration {
	synced := c.placed.synced()
	c.pass.waitingForCache(!synced)
	if !synced || myUUID == "" {
		return 0
	}
	ports := passthroughView{served: c.placed.servesNADs(), holders: livePorts(c.placed.workloads())}
	desired, appErr, portRefused := desiredLayouts(set, decisions, states, myUUID, writesClaimsOf, c.opts.Placement, ports)
	if c.opts.NodeIdentity {
		awaitingRecord(desired, record, c.opts.NodeName, appErr)
	}
	c.notePortRefusals(set, portRefused, now)
	hosts := designatedNodes(states)
	writeErr, retry := c.writer.write(ctx, c.placed, desired, hosts, vmis, now)
	maps.Copy(appErr, writeErr)
	c.effects.restartPinnedVMIs(ctx, failedPinnedVMIs(desired, c.placed.live, hosts, nodeReady), now)
	// A file absent when the agent started has no last good version to
	// hold (HoldAbsentFiles): the absence grace runs from the first read.
	absenceKnown := true
	if wait := c.opts.FileAbsentGrace - now.Sub(c.firstRead); wait > 0 {
		absenceKnown = false
		if retry == 0 || wait < retry {
			retry = wait
		}
	}
	c.orphans.remove(ctx, c.placed.workloads(), desired, set, decisions, myUUID, absenceKnown, now)
	if absenceKnown {
		c.effects.removeNADs(ctx, nadsToRemove(c.placed.list(GVRNAD), desired, set, c.placed.workloads()), now)
	}
	var claims []placedObject
	for _, obj := range c.placed.list(GVRPVC) {
		claims = append(claims, placedObject{GVR: GVRPVC, Object: obj})
	}
	c.effects.handOver(ctx, c.placed.workloads(), claims, set, decisions, myUUID, writesClaimsOf, now)
	for i := range states {
		if msg, ok := appErr[states[i].UUID]; ok {
			states[i].Error = msg
		}
	}
	c.placementErrors = appErr
	return retry
}

// notePortRefusals puts an app refused a host port on the timeline (and
// in the log) once per reason, and forgets it when it clears or the app
// leaves the config.
func (c *Controller) notePortRefusals(set AppSet, refused map[string]string, now time.Time) {
	for uuid, why := range refused {
		if c.portRefused[uuid] == why {
			continue
		}
		c.portRefused[uuid] = why
		name := set.Apps[uuid].DisplayName
		c.log.Warn("host port refused", "app", name, "reason", why)
		c.timeline.Add(TimelineEvent{Time: now, Kind: EventRefusal, App: name, Node: c.opts.NodeName, Warning: true, Message: name + ": " + why})
	}
	maps.DeleteFunc(c.portRefused, func(uuid, _ string) bool { _, ok := refused[uuid]; return !ok })
}

// removeNADs deletes the attachments no app uses any more (nadsToRemove),
// each by its UID: one made again since is not the one decided on.
func (fx placeEffects) removeNADs(ctx context.Context, nads []*unstructured.Unstructured, now time.Time) {
	for _, n := range nads {
		if err := fx.deleteExact(ctx, GVRNAD, n.GetNamespace(), n.GetName(), n.GetUID()); err != nil {
			fx.log.Error("remove attachment", "object", n.GetName(), "err", err)
			continue
		}
		msg := fmt.Sprintf("removed network attachment %s: no app passes host port %s through any more", n.GetName(), n.GetLabels()[LabelHostPort])
		fx.log.Info("removed attachment", "object", n.GetName())
		fx.timeline.Add(TimelineEvent{Time: now, Kind: EventPlacement, Node: fx.node, Message: msg})
	}
}

// placeEffects is what the placement reconcilers act and report through,
// as this node: the API server, the timeline, Kubernetes Events, the log
// and the metrics. It holds no memory of its own.
type placeEffects struct {
	dyn      dynamic.Interface
	node     string
	timeline *Timeline
	recorder record.EventRecorder
	log      *slog.Logger
	metrics  *Metrics
}

// deleteExact deletes the namespaced object with that UID, and only it: a
// newer object under the same name is not the one decided on. One already
// gone is no error; any other error is counted.
func (fx placeEffects) deleteExact(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, uid types.UID) error {
	err := fx.dyn.Resource(gvr).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(uid)}})
	if err != nil && !apierrors.IsNotFound(err) {
		fx.metrics.APIErrors.Inc()
		return err
	}
	return nil
}
