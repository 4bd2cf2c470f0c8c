package apps

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
)

// applyRetry is how long a write the API server refused waits before it is
// tried again, its error standing for its app meanwhile.
const applyRetry = 5 * time.Second

// layoutWriter writes the desired layouts over what is live, one object at
// a time: decideLayout says what to do from the live object and what the
// writer remembers of it, write does it. Its memory is kept by layout key
// and bounded by what is desired (sightings: by what is live).
type layoutWriter struct {
	placeEffects
	// window is how long another node's layout from a disagreeing config
	// stands (Options.ConflictWindow).
	window time.Duration
	// failed are the applies the API server refused, retried after
	// applyRetry.
	failed map[string]applyFailure
	// stale are the layouts held back because a newer config laid them
	// out: reported once each.
	stale map[string]bool
	// seen is when this node first saw each workload as it stands: the
	// start of another node's layout's window.
	seen map[string]layoutSighting
	// conflicts are the layouts held back for a conflicting config: the
	// sighting reported, so each is reported once.
	conflicts map[string]string
	// lostTies are the layouts held back for good because another node's
	// config wins the tie (configWinsTie): by whom, and when this node
	// last saw that layout live.
	lostTies map[string]lostTie
	// takeovers are the deleted objects whose takeover mark was read,
	// by UID: the mark is a sighting of the winner's layout once, not a
	// hold that starts again every pass while the object stays gone.
	takeovers map[string]types.UID
}

// lostTie is a tie this node's config lost: the winner's layout, last seen
// at, by the node that laid it out.
type lostTie struct {
	by string
	at time.Time
}

func newLayoutWriter(fx placeEffects, window time.Duration) *layoutWriter {
	return &layoutWriter{placeEffects: fx, window: window,
		failed: map[string]applyFailure{}, stale: map[string]bool{}, seen: map[string]layoutSighting{}, conflicts: map[string]string{},
		lostTies: map[string]lostTie{}, takeovers: map[string]types.UID{}}
}

// applyFailure is a layout the API server refused: retried after
// applyRetry, its error standing for its app meanwhile.
type applyFailure struct {
	at       time.Time
	app, msg string
}

// layoutSighting is one write of a layout (LayoutSighting) and when this
// node first saw it.
type layoutSighting struct {
	id string
	at time.Time
}

// layoutMemory is what the writer remembers of one object, as
// decideLayout reads it.
type layoutMemory struct {
	// seen is when this node first saw the live object as it stands.
	seen time.Time
	// failed is the last apply refused, if any.
	failed *applyFailure
	// conflict is the sighting a conflict hold was reported for; "": none held.
	conflict string
	// staleReported: the stale-config hold was reported.
	staleReported bool
	// lostTie: this node's config lost the tie to the layout last seen
	// live at lostTie.at (zero: no tie lost).
	lostTie lostTie
}

// layoutDo is what the writer does with one desired object.
type layoutDo int

const (
	// layoutInSync: the live object carries the desired spec hash; an
	// unchanged layout is never written again.
	layoutInSync layoutDo = iota
	// layoutHoldStale: another node laid it out from a newer config.
	layoutHoldStale
	// layoutHoldConflict: another node laid it out recently from a config
	// that disagrees with this node's; held until the window lapses.
	layoutHoldConflict
	// layoutMovePinnedVM: a running VMI's spec cannot change, so a pinned
	// VM moves by being deleted and laid out afresh on its new node.
	layoutMovePinnedVM
	// layoutRetryLater: the last apply was refused less than applyRetry ago.
	layoutRetryLater
	// layoutApply: write it.
	layoutApply
)

var layoutDoNames = [...]string{"in-sync", "hold-stale", "hold-conflict", "move-pinned-vm", "retry-later", "apply"}

func (d layoutDo) String() string { return layoutDoNames[d] }

// layoutAction is decideLayout's verdict on one object.
type layoutAction struct {
	do layoutDo
	// why stands as the app's error: the hold's reason, or the refused
	// apply's error while it waits.
	why string
	// app is the UUID of the app why stands for; "" for a claim or a
	// storage class, which have no app state to carry it.
	app string
	// report: a hold not reported yet (a new conflicting sighting, or a
	// stale config met for the first time).
	report bool
	// takeover: a conflict was held until now; the write ends it, and that
	// is said as loudly as the hold was.
	takeover bool
	// moved: the effective DNId changed (a manual migration).
	moved bool
	// wait is when to look again: the conflict window's end, or the retry.
	wait time.Duration
	// lostTie: held for good, another node's live layout is from a config
	// that wins the tie.
	lostTie bool
}

// decideLayout says what to do with the desired layout want given the live
// object (nil: none) and what the writer remembers of it, at now. Another
// node's layout from a newer config, or a recent one from a config that
// disagrees with this node's, is held (DecideLayoutWrite): writing over it
// would have the two nodes overwrite each other, restarting the app each
// time.
func decideLayout(live *unstructured.Unstructured, want Layout, mem layoutMemory, now time.Time, window time.Duration) layoutAction {
	if live != nil && live.GetAnnotations()[AnnotationSpecHash] == want.Hash() {
		return layoutAction{do: layoutInSync}
	}
	app := want.Object.GetLabels()[kube.LabelAppUUID]
	verdict := LayoutWrite{}
	if live != nil { // a nil *Unstructured is not a nil metav1.Object
		verdict = DecideLayoutWrite(live, want.Object, mem.seen, now, window)
	} else if until := mem.lostTie.at.Add(window); !mem.lostTie.at.IsZero() && now.Before(until) {
		// The winner's layout just went: a pinned VM it moves is deleted
		// and made again, and this node laying the app out in the gap
		// would start the takeovers over. Gone for the window, it is gone.
		return layoutAction{do: layoutHoldConflict, app: app, wait: until.Sub(now), report: mem.conflict != "gone",
			why: fmt.Sprintf("conflict: the layout by %s, whose config wins the tie (%s), is gone; not laying this app out before %s in case it is being made again",
				mem.lostTie.by, tieRule, until.Format(time.TimeOnly))}
	}
	if verdict.Conflict {
		act := layoutAction{do: layoutHoldConflict, why: verdict.Hold, app: app, report: mem.conflict != LayoutSighting(live)}
		if act.lostTie = verdict.Until.IsZero(); !act.lostTie {
			// A losing config's hold has no end to wait for: a change of
			// the layout or of the config wakes the writer.
			act.wait = verdict.Until.Sub(now)
		}
		return act
	}
	if verdict.Hold != "" {
		return layoutAction{do: layoutHoldStale, why: verdict.Hold, app: app, report: !mem.staleReported}
	}
	act := layoutAction{do: layoutApply,
		// With the object gone there is nothing taken over: the hold just ends.
		takeover: mem.conflict != "" && live != nil,
		moved:    live != nil && live.GetAnnotations()[AnnotationDNId] != want.Object.GetAnnotations()[AnnotationDNId],
	}
	switch {
	case act.moved && want.GVR == GVRVMI:
		act.do = layoutMovePinnedVM
	case mem.failed != nil && now.Sub(mem.failed.at) < applyRetry:
		act.do, act.why, act.app, act.wait = layoutRetryLater, mem.failed.msg, mem.failed.app, applyRetry-now.Sub(mem.failed.at)
	}
	return act
}

// observe starts a pass: what is no longer desired has no failure or hold
// to remember, and the workloads live now are sighted.
func (w *layoutWriter) observe(desired map[string]Layout, workloads []placedObject, now time.Time) {
	notDesired := func(key string) bool { _, ok := desired[key]; return !ok }
	maps.DeleteFunc(w.failed, func(key string, _ applyFailure) bool { return notDesired(key) })
	maps.DeleteFunc(w.stale, func(key string, _ bool) bool { return notDesired(key) })
	maps.DeleteFunc(w.conflicts, func(key string, _ string) bool { return notDesired(key) })
	maps.DeleteFunc(w.lostTies, func(key string, _ lostTie) bool { return notDesired(key) })
	maps.DeleteFunc(w.takeovers, func(key string, _ types.UID) bool { return notDesired(key) })
	w.noteSightings(workloads, desired, now)
}

// decide is decideLayout over the writer's memory of key, and what the
// verdict means for that memory. deleted is the last state of the object
// under key when it is gone (nil: none kept).
func (w *layoutWriter) decide(key string, live, deleted *unstructured.Unstructured, want Layout, now time.Time) layoutAction {
	if live == nil {
		w.noteTakeover(key, deleted, want, now)
	}
	act := decideLayout(live, want, w.memory(key, live, now), now, w.window)
	w.remember(key, act, live, now)
	return act
}

// noteTakeover reads the takeover mark on deleted, the last state of the
// object under key, now gone: marked by a node whose config wins the tie
// over this node's, it is a sighting of that node's layout now, which this
// node may never see live before it would lay the app out in the gap.
func (w *layoutWriter) noteTakeover(key string, deleted *unstructured.Unstructured, want Layout, now time.Time) {
	if deleted == nil || w.takeovers[key] == deleted.GetUID() {
		return
	}
	w.takeovers[key] = deleted.GetUID()
	if by, lost := takeoverWinsTie(deleted, want.Object); lost {
		w.lostTies[key] = lostTie{by: by, at: now}
	}
}

// memory is what the writer remembers of the object under key, live as it
// stands now (nil: none).
func (w *layoutWriter) memory(key string, live *unstructured.Unstructured, now time.Time) layoutMemory {
	mem := layoutMemory{conflict: w.conflicts[key], staleReported: w.stale[key], lostTie: w.lostTies[key]}
	if f, ok := w.failed[key]; ok {
		mem.failed = &f
	}
	if live != nil {
		mem.seen = w.sighted(key, live, now)
	}
	return mem
}

// remember records what deciding act on key means for the memory: an
// object in sync has nothing failed or held left; a hold is reported once;
// a write (or a move) ends any hold. Apply outcomes are recorded by write.
func (w *layoutWriter) remember(key string, act layoutAction, live *unstructured.Unstructured, now time.Time) {
	switch act.do {
	case layoutInSync:
		delete(w.failed, key)
		delete(w.stale, key)
	case layoutHoldConflict:
		if act.report {
			w.conflicts[key] = "gone"
			if live != nil {
				w.conflicts[key] = LayoutSighting(live)
			}
		}
		if act.lostTie {
			w.lostTies[key] = lostTie{by: cmp.Or(live.GetAnnotations()[AnnotationLaidOutBy], "another node"), at: now}
		}
	case layoutHoldStale:
		w.stale[key] = true
	default:
		delete(w.stale, key)
		delete(w.conflicts, key)
		delete(w.lostTies, key)
	}
	if act.do == layoutInSync {
		delete(w.lostTies, key)
	}
}

// write brings what is live to the desired layouts, in key order. hosts
// are the apps' DNId node names, vmis the cluster's VMIs (a replica set
// moved restarts the ones away from its new node). It returns the errors
// that stand for apps, by UUID, and when to look again (0: no need).
func (w *layoutWriter) write(ctx context.Context, placed *placedCache, desired map[string]Layout, hosts map[string]string, vmis []*kvv1.VirtualMachineInstance, now time.Time) (map[string]string, time.Duration) {
	w.observe(desired, placed.workloads(), now)
	placed.forgetDeleted(desired)
	appErr := map[string]string{}
	retry := time.Duration(0)
	for _, key := range slices.Sorted(maps.Keys(desired)) {
		l := desired[key]
		live := placed.live(l)
		var deleted *unstructured.Unstructured
		if live == nil {
			deleted = placed.lastDeleted(l)
		}
		act := w.decide(key, live, deleted, l, now)
		if act.why != "" && act.app != "" {
			appErr[act.app] = act.why
		}
		wait, failed := w.carryOut(ctx, key, l, live, act, hosts, vmis, now)
		if failed != nil && failed.app != "" {
			appErr[failed.app] = failed.msg
		}
		if wait > 0 && (retry == 0 || wait < retry) {
			retry = wait
		}
	}
	return appErr, retry
}

// carryOut does what act says for want over live: the API calls, the
// timeline, the Events. It returns when to look again (0: no need) and an
// apply the API server refused.
func (w *layoutWriter) carryOut(ctx context.Context, key string, want Layout, live *unstructured.Unstructured, act layoutAction, hosts map[string]string, vmis []*kvv1.VirtualMachineInstance, now time.Time) (time.Duration, *applyFailure) {
	appName := want.Object.GetLabels()[kube.LabelAppName]
	if act.takeover {
		msg := fmt.Sprintf("%s: writing this node's layout over %s's from a conflicting config", appName,
			cmp.Or(live.GetAnnotations()[AnnotationLaidOutBy], "another node"))
		w.log.Warn("layout conflict: taking over", "object", key)
		w.timeline.Add(TimelineEvent{Time: now, Kind: EventConflict, App: appName, Node: w.node, Warning: true, Message: msg})
		w.recorder.Event(live, corev1.EventTypeWarning, "LayoutConflictTakeover", w.node+": "+msg)
	}
	switch act.do {
	case layoutHoldConflict:
		if act.report {
			msg := fmt.Sprintf("%s: %s", appName, act.why)
			w.log.Warn("layout conflict: not writing", "object", key, "reason", act.why)
			w.timeline.Add(TimelineEvent{Time: now, Kind: EventConflict, App: appName, Node: w.node, Warning: true, Message: msg})
			// Held through the gap while the winner's layout is gone,
			// there is no object to put the Event on (a nil object
			// crashes the recorder).
			if live != nil {
				w.recorder.Event(live, corev1.EventTypeWarning, "LayoutConflict", w.node+": "+msg)
			}
		}
		return act.wait, nil
	case layoutHoldStale:
		if act.report {
			w.timeline.Add(TimelineEvent{Time: now, Kind: EventConfig, App: appName, Node: w.node, Warning: true,
				Message: fmt.Sprintf("%s: %s", appName, act.why)})
		}
	case layoutMovePinnedVM:
		if act.takeover {
			if err := w.markTakeover(ctx, want, live); err != nil {
				w.log.Error("mark the takeover", "object", key, "err", err)
				return applyRetry, nil
			}
		}
		if err := w.deleteExact(ctx, want.GVR, want.Namespace(), want.Name(), live.GetUID()); err != nil {
			return applyRetry, nil
		}
		w.timeline.Add(TimelineEvent{Time: now, Kind: EventPlacement, App: appName, Node: w.node,
			Message: fmt.Sprintf("moving pinned VM %s to %s: stopped it to start it there", appName, w.node)})
	case layoutRetryLater:
		return act.wait, nil
	case layoutApply:
		if f := w.apply(ctx, key, want, now); f != nil {
			return applyRetry, f
		}
		uuid := want.Object.GetLabels()[kube.LabelAppUUID]
		if act.moved && want.GVR == GVRVMIRS {
			// A replica set keeps its running VMIs whatever its template
			// says: restart the ones away from the new node.
			for _, vmi := range vmisAwayFrom(vmis, uuid, hosts[uuid]) {
				if err := w.deleteExact(ctx, GVRVMI, vmi.Namespace, vmi.Name, vmi.UID); err != nil {
					continue
				}
				w.timeline.Add(TimelineEvent{Time: now, Kind: EventPlacement, App: appName, Node: w.node,
					Message: fmt.Sprintf("moving VM %s from %s to %s: restarted it", appName, vmi.Status.NodeName, hosts[uuid])})
			}
		}
		if uuid != "" {
			w.timeline.Add(TimelineEvent{Time: now, Kind: EventPlacement, App: appName, Node: w.node,
				Message: fmt.Sprintf("laid out %s %s for %s", strings.ToLower(want.Object.GetKind()), want.Name(), appName)})
		}
	}
	return 0, nil
}

// markTakeover writes on live, the object of the node whose layout this
// node takes over, the mark (AnnotationTakeover) of the layout want that
// comes in its place, before live is deleted: the delete event carries it
// to that node, which may see nothing else of this node's layout before it
// would lay the app out in the gap. The patch names live's UID: a newer
// object under the name is not marked.
func (w *layoutWriter) markTakeover(ctx context.Context, want Layout, live *unstructured.Unstructured) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         live.GetUID(),
		"annotations": map[string]string{AnnotationTakeover: takeoverMark(want.Object, w.node)},
	}})
	if err != nil {
		return err
	}
	_, err = w.dyn.Resource(want.GVR).Namespace(want.Namespace()).Patch(ctx, want.Name(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil && !apierrors.IsNotFound(err) {
		w.metrics.APIErrors.Inc()
		return err
	}
	return nil
}

// apply stamps and server-side-applies l, and remembers the outcome under
// key: the failure it returns (nil: applied) is retried after applyRetry.
func (w *layoutWriter) apply(ctx context.Context, key string, l Layout, now time.Time) *applyFailure {
	StampLayout(l.Object, w.node, now)
	var err error
	if l.GVR == GVRStorageClass {
		_, err = w.dyn.Resource(l.GVR).Apply(ctx, l.Name(), l.Object, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	} else {
		_, err = w.dyn.Resource(l.GVR).Namespace(l.Namespace()).Apply(ctx, l.Name(), l.Object, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	}
	w.metrics.PlacementApplies.Inc()
	if err != nil {
		w.metrics.APIErrors.Inc()
		f := applyFailure{at: now, app: l.Object.GetLabels()[kube.LabelAppUUID], msg: fmt.Sprintf("apply %s: %v", l.Name(), err)}
		w.failed[key] = f
		w.log.Error("apply", "object", key, "err", err)
		return &f
	}
	delete(w.failed, key)
	w.log.Info("applied", "object", key)
	return nil
}

// vmisAwayFrom are the app's VMIs that run (or are scheduled) elsewhere
// than node and are not being deleted already.
func vmisAwayFrom(vmis []*kvv1.VirtualMachineInstance, uuid, node string) []*kvv1.VirtualMachineInstance {
	var out []*kvv1.VirtualMachineInstance
	for _, vmi := range vmis {
		if vmi.Labels[kube.LabelAppUUID] != uuid || vmi.DeletionTimestamp != nil || vmi.Status.NodeName == node {
			continue
		}
		out = append(out, vmi)
	}
	return out
}

// noteSightings records when this node first saw each workload as it
// stands now, on its own monotonic clock, and forgets the sightings of
// what is neither live nor desired. A desired object that is not a
// workload (a claim) is sighted when its layout is decided; its sighting
// is kept here, or its conflict hold would start afresh every pass and
// never lapse.
func (w *layoutWriter) noteSightings(workloads []placedObject, desired map[string]Layout, now time.Time) {
	present := map[string]bool{}
	for _, p := range workloads {
		key := p.key()
		present[key] = true
		w.sighted(key, p.Object, now)
	}
	maps.DeleteFunc(w.seen, func(key string, _ layoutSighting) bool {
		_, wanted := desired[key]
		return !present[key] && !wanted
	})
}

// sighted is when this node first saw obj as it stands, now if it just did.
func (w *layoutWriter) sighted(key string, obj metav1.Object, now time.Time) time.Time {
	id := LayoutSighting(obj)
	if s, ok := w.seen[key]; ok && s.id == id {
		return s.at
	}
	w.seen[key] = layoutSighting{id: id, at: now}
	return now
}
