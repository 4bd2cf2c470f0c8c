package apps

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sitecon/sitecon/kube"
)

// handover is a workload this node laid out for an active app another
// node places now, and the config stamps (configStamps) of the config
// this node holds now, to record on it.
type handover struct {
	placedObject
	stamps map[string]string
}

// handovers chooses the workloads whose config stamps this node brings to
// the config it holds now: the ones it laid out (its UUID in their DNId
// annotation) for an app still active in its config that another node
// places now, stamped with another config than this node's. Their stamps
// are what the placing node weighs when the two configs tie on version
// (configWinsTie): left as they were, a config this node has given up
// could win over the placing node's for good, though both nodes now hold
// the same. A layout from a newer config than this node's keeps its
// stamps; an app deactivated or gone is the orphan remover's.
//
// The same for the claims it writes (writesClaimsOf: its own, or on the
// stats leader a worker's, which a worker cannot write) of a volume whose
// config now designates another node.
func handovers(workloads, claims []placedObject, set AppSet, decisions map[string]AppDecision, myUUID string, writesClaimsOf func(dnid string) bool) []handover {
	var out []handover
	add := func(p placedObject, stamps map[string]string) {
		ann := p.Object.GetAnnotations()
		same := ann[AnnotationConfigVersion] == stamps[AnnotationConfigVersion]
		for _, k := range []string{AnnotationConfigDNId, AnnotationConfigHash} {
			same = same && ann[k] == stamps[k]
		}
		if !same {
			out = append(out, handover{placedObject: p, stamps: stamps})
		}
	}
	for _, p := range workloads {
		if p.Object.GetAnnotations()[AnnotationDNId] != myUUID {
			continue
		}
		uuid := p.Object.GetLabels()[kube.LabelAppUUID]
		app, ok := set.Apps[uuid]
		if !ok || !app.Activate || decisions[uuid].Place || ConfigVersion(p.Object) > app.Version {
			continue
		}
		add(p, configStamps(app))
	}
	for _, p := range claims {
		dnid := p.Object.GetAnnotations()[AnnotationDNId]
		if dnid == "" || !writesClaimsOf(dnid) {
			continue
		}
		v, ok := set.Volumes[p.Object.GetLabels()[LabelVolumeUUID]]
		if !ok || strings.EqualFold(v.DesignatedNodeID, dnid) {
			continue
		}
		add(p, volumeStamps(v))
	}
	return out
}

// handOver records on each of this pass's handovers the config this node
// holds now, and only those annotations.
func (fx placeEffects) handOver(ctx context.Context, workloads, claims []placedObject, set AppSet, decisions map[string]AppDecision, myUUID string, writesClaimsOf func(dnid string) bool, now time.Time) {
	for _, h := range handovers(workloads, claims, set, decisions, myUUID, writesClaimsOf) {
		obj := h.Object
		ann := map[string]any{}
		for k, v := range h.stamps {
			ann[k] = v
		}
		if _, ok := h.stamps[AnnotationConfigVersion]; !ok {
			ann[AnnotationConfigVersion] = nil // unversioned now
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"uid": obj.GetUID(), "annotations": ann}})
		// The UID in the patch makes it fail on another object of the name.
		_, err := fx.dyn.Resource(h.GVR).Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		if err != nil {
			fx.metrics.APIErrors.Inc()
			fx.log.Error("record the config held on a layout another node places", "object", obj.GetName(), "err", err)
			continue
		}
		app := obj.GetLabels()[kube.LabelAppName]
		msg := fmt.Sprintf("%s: %s %s is laid out by another node now; recorded on it the config this node holds (%s)",
			app, strings.ToLower(obj.GetKind()), obj.GetName(), describeConfig(h.stamps))
		fx.log.Info("layout handed over", "object", obj.GetName(), "config", maps.Clone(h.stamps))
		fx.timeline.Add(TimelineEvent{Time: now, Kind: EventPlacement, App: app, Node: fx.node, Message: msg})
	}
}
