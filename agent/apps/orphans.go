package apps

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
)

// orphan is a workload this node laid out that no longer has a place, and
// why.
type orphan struct {
	placedObject
	why string
}

// orphanWorkloads chooses the workloads to remove: the ones this node laid
// out (its UUID in their DNId annotation) that the config no longer wants:
// the app left the config, was deactivated (whichever node the config
// designates now), or is laid out as another kind now. An active app
// another node laid out, or now places, is that node's business, never
// this one's: the node that places it writes over this node's layout. An active app placed here that this pass could not lay
// out at all (a volume it names has no config yet, its designated node is
// not in the node cache) keeps what runs: that is a source not read, not
// an intent, and the app's state carries the error. held: while a file
// cannot be read and has no good version (set.Unknown), an app missing
// from the config may be in that file, so nothing is removed until it
// reads. absenceKnown: the config has been read for the file absence
// grace; before that (the agent just started, with no last good version
// of a file that may be absent for a moment) an app missing from the
// config keeps its workload.
func orphanWorkloads(workloads []placedObject, desired map[string]Layout, set AppSet, decisions map[string]AppDecision, myUUID string, absenceKnown bool) (orphans []orphan, held bool) {
	if len(set.Unknown) > 0 {
		return nil, true
	}
	laidOut := map[string]bool{} // app UUIDs with a desired layout this pass
	for _, l := range desired {
		if uuid := l.Object.GetLabels()[kube.LabelAppUUID]; uuid != "" {
			laidOut[uuid] = true
		}
	}
	for _, p := range workloads {
		if p.Object.GetAnnotations()[AnnotationDNId] != myUUID {
			continue
		}
		if _, ok := desired[p.key()]; ok {
			continue
		}
		uuid := p.Object.GetLabels()[kube.LabelAppUUID]
		app, inConfig := set.Apps[uuid]
		why := "its app left the config"
		switch {
		case !inConfig && !absenceKnown:
			continue
		case !inConfig:
		case !app.Activate && ConfigVersion(p.Object) > app.Version:
			// Laid out from a newer config than this node holds: the
			// deactivation may be what the controller undid since.
			continue
		case !app.Activate:
			// Wherever the config designates it now: a deactivated app is
			// laid out by no node, so no other node writes over this
			// layout, and the node that laid it out is the one that
			// removes it (an app deactivated and moved in one change
			// would otherwise be nobody's).
			why = "its app is deactivated"
		case !decisions[uuid].Place:
			continue
		case laidOut[uuid]:
			why = "its app is laid out under another name or kind now"
		default:
			continue
		}
		orphans = append(orphans, orphan{placedObject: p, why: why})
	}
	return orphans, false
}

// orphanRemover removes the workloads orphanWorkloads chooses; its memory
// is whether removals were held last pass, so a hold is reported once.
type orphanRemover struct {
	placeEffects
	held bool
}

// remove removes this pass's orphans, or reports removals held.
func (r *orphanRemover) remove(ctx context.Context, workloads []placedObject, desired map[string]Layout, set AppSet, decisions map[string]AppDecision, myUUID string, absenceKnown bool, now time.Time) {
	orphans, held := orphanWorkloads(workloads, desired, set, decisions, myUUID, absenceKnown)
	if held && !r.held {
		r.timeline.Add(TimelineEvent{Time: now, Kind: EventConfig, Node: r.node, Warning: true,
			Message: "removals held: " + strings.Join(set.Unknown, ", ") + " cannot be read; nothing is removed until it reads"})
		r.log.Warn("removals held: config cannot be read", "unknown", set.Unknown)
	}
	r.held = held
	for _, o := range orphans {
		obj := o.Object
		if err := r.deleteExact(ctx, o.GVR, obj.GetNamespace(), obj.GetName(), obj.GetUID()); err != nil {
			r.log.Error("remove workload", "object", obj.GetName(), "err", err)
			continue
		}
		msg := fmt.Sprintf("removed %s %s: %s", strings.ToLower(obj.GetKind()), obj.GetName(), o.why)
		// A removal stops an app: it is never silent.
		r.log.Info("removed workload", "kind", obj.GetKind(), "object", obj.GetName(), "reason", o.why)
		r.timeline.Add(TimelineEvent{Time: now, Kind: EventPlacement, App: obj.GetLabels()[kube.LabelAppName], Node: r.node, Message: msg})
		r.recorder.Event(obj, corev1.EventTypeNormal, "Removed", msg)
	}
}
