package apps

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
)

// layoutOf is app laid out with effective DNId layer on node name, without
// volumes.
func layoutOf(t *testing.T, app AppConfig, layer, name string) Layout {
	t.Helper()
	app.VolumeRefs = nil
	l, err := LayoutApp(app, layer, name, nil, PlacementOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// liveAs is l as the API server holds it after node name applied it at at.
func liveAs(l Layout, name string, at time.Time) *unstructured.Unstructured {
	obj := l.Object.DeepCopy()
	StampLayout(obj, name, at)
	obj.SetUID(types.UID("uid-" + name))
	return obj
}

// What the writer does with one desired object, from the live object and
// what it remembers of it: never rewrite what is in sync; hold for a newer
// config, or for another node's fresh layout from a disagreeing config
// until the window passes (reporting each once); move a pinned VM by
// deleting it; retry a refused apply only after applyRetry.
func TestDecideLayout(t *testing.T) {
	const window = 5 * time.Minute
	seen := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	container := testApp()
	want := layoutOf(t, container, nodeA, "node-a")
	// node-b laid the app out from its own config, which designates node-b.
	theirs := container
	theirs.DesignatedNodeID = nodeB
	byB := liveAs(layoutOf(t, theirs, nodeB, "node-b"), "node-b", seen)
	// A newer version of the config reached node-b first.
	newer, older := container, container
	newer.Version, older.Version = 5, 4
	newerByB := liveAs(layoutOf(t, newer, nodeA, "node-a"), "node-b", seen)
	wantOlder := layoutOf(t, older, nodeA, "node-a")
	// A pinned VM and an auto VM, moved by an override from node-a to node-b.
	pinned := testApp()
	pinned.Kind, pinned.Affinity = KindVM, AffinityRequired
	autoVM := pinned
	autoVM.Affinity = AffinityPreferred
	failed := func(ago time.Duration) *applyFailure {
		return &applyFailure{at: seen.Add(-ago), app: appID, msg: "apply plc-gateway-5b0f7c1e: refused"}
	}

	for name, tc := range map[string]struct {
		live *unstructured.Unstructured
		want Layout
		mem  layoutMemory
		now  time.Time
		act  layoutAction
	}{
		"nothing live: apply": {want: want, now: seen, act: layoutAction{do: layoutApply}},
		"in sync: not rewritten, whatever is remembered": {live: liveAs(want, "node-a", seen.Add(-time.Hour)), want: want,
			mem: layoutMemory{failed: failed(time.Second), staleReported: true, conflict: "x"}, now: seen,
			act: layoutAction{do: layoutInSync}},
		"another node's fresh layout from a disagreeing config: held, reported": {live: byB, want: want,
			mem: layoutMemory{seen: seen}, now: seen.Add(time.Minute),
			act: layoutAction{do: layoutHoldConflict, app: appID, report: true, wait: window - time.Minute}},
		"the same sighting already reported: held quietly": {live: byB, want: want,
			mem: layoutMemory{seen: seen, conflict: LayoutSighting(byB)}, now: seen.Add(time.Minute),
			act: layoutAction{do: layoutHoldConflict, app: appID, wait: window - time.Minute}},
		"a new write by the other node: reported again": {live: byB, want: want,
			mem: layoutMemory{seen: seen, conflict: "an earlier sighting"}, now: seen.Add(time.Minute),
			act: layoutAction{do: layoutHoldConflict, app: appID, report: true, wait: window - time.Minute}},
		"the window passed: written over, saying so": {live: byB, want: want,
			mem: layoutMemory{seen: seen, conflict: LayoutSighting(byB)}, now: seen.Add(window),
			act: layoutAction{do: layoutApply, takeover: true, moved: true}},
		"a conflict held, the object gone since: written, nothing taken over": {want: want,
			mem: layoutMemory{conflict: LayoutSighting(byB)}, now: seen.Add(time.Minute),
			act: layoutAction{do: layoutApply}},
		"a newer config laid it out: held, reported": {live: newerByB, want: wantOlder,
			mem: layoutMemory{seen: seen}, now: seen.Add(time.Hour),
			act: layoutAction{do: layoutHoldStale, app: appID, report: true}},
		"a newer config laid it out, reported before: held quietly": {live: newerByB, want: wantOlder,
			mem: layoutMemory{seen: seen, staleReported: true}, now: seen.Add(time.Hour),
			act: layoutAction{do: layoutHoldStale, app: appID}},
		"refused 2 s ago: retried later, its error standing": {want: want, mem: layoutMemory{failed: failed(2 * time.Second)}, now: seen,
			act: layoutAction{do: layoutRetryLater, app: appID, wait: 3 * time.Second}},
		"refused 5 s ago: applied again": {want: want, mem: layoutMemory{failed: failed(5 * time.Second)}, now: seen,
			act: layoutAction{do: layoutApply}},
		"a pinned VM moved: deleted to start afresh, a refused apply no matter": {
			live: liveAs(layoutOf(t, pinned, nodeA, "node-a"), "node-a", seen), want: layoutOf(t, pinned, nodeB, "node-b"),
			mem: layoutMemory{seen: seen, failed: failed(time.Second)}, now: seen,
			act: layoutAction{do: layoutMovePinnedVM, moved: true}},
		"an auto VM moved: applied, marked moved": {
			live: liveAs(layoutOf(t, autoVM, nodeA, "node-a"), "node-a", seen), want: layoutOf(t, autoVM, nodeB, "node-b"),
			mem: layoutMemory{seen: seen}, now: seen,
			act: layoutAction{do: layoutApply, moved: true}},
	} {
		t.Run(name, func(t *testing.T) {
			got := decideLayout(tc.live, tc.want, tc.mem, tc.now, window)
			why := got.why
			if tc.act.do == layoutRetryLater {
				if why != tc.mem.failed.msg {
					t.Fatalf("the refused apply's error does not stand: %q", why)
				}
			} else if (why != "") != (tc.act.do == layoutHoldConflict || tc.act.do == layoutHoldStale) {
				t.Fatalf("%s with reason %q", got.do, why)
			}
			got.why = ""
			if got != tc.act {
				t.Fatalf("decideLayout = %+v (%s)\nwant          %+v (%s)", got, got.do, tc.act, tc.act.do)
			}
		})
	}
}

// The writer's memory across passes: another node's conflicting layout is
// held and reported once, for the window from when this node first saw it
// (a new write by that node starts the window again), then written over
// and the hold forgotten; a stale config is reported once; what is no
// longer desired is forgotten.
func TestLayoutWriterMemory(t *testing.T) {
	const window = 5 * time.Minute
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	w := newLayoutWriter(placeEffects{}, window)
	want := layoutOf(t, testApp(), nodeA, "node-a")
	key := want.key()
	theirs := testApp()
	theirs.DesignatedNodeID = nodeB
	byB := liveAs(layoutOf(t, theirs, nodeB, "node-b"), "node-b", t0.Add(-time.Hour))
	desired := map[string]Layout{key: want}
	pass := func(now time.Time, live *unstructured.Unstructured) layoutAction {
		var workloads []placedObject
		if live != nil {
			workloads = append(workloads, placedObject{GVR: want.GVR, Object: live})
		}
		w.observe(desired, workloads, now)
		return w.decide(key, live, nil, want, now)
	}
	expect := func(act layoutAction, do layoutDo, report, takeover bool) {
		t.Helper()
		if act.do != do || act.report != report || act.takeover != takeover {
			t.Fatalf("%+v (%s), want %s report %v takeover %v", act, act.do, do, report, takeover)
		}
	}

	expect(pass(t0, byB), layoutHoldConflict, true, false)
	act := pass(t0.Add(4*time.Minute), byB)
	expect(act, layoutHoldConflict, false, false)
	if act.wait != time.Minute {
		t.Fatalf("the hold lapses in %s, want the window from the first sighting (1m0s left)", act.wait)
	}
	// node-b writes again: a new sighting, a new window, reported again.
	byBAgain := liveAs(layoutOf(t, theirs, nodeB, "node-b"), "node-b", t0)
	if act = pass(t0.Add(4*time.Minute+time.Second), byBAgain); act.do != layoutHoldConflict || !act.report || act.wait != window {
		t.Fatalf("a new write by the other node: %+v, want a hold reported for a full window", act)
	}
	expect(pass(t0.Add(9*time.Minute), byBAgain), layoutHoldConflict, false, false)
	expect(pass(t0.Add(9*time.Minute+time.Second), byBAgain), layoutApply, false, true)
	if _, held := w.conflicts[key]; held {
		t.Fatal("the hold is remembered after the takeover")
	}

	// A newer config elsewhere: reported once, then forgotten once the app
	// is no longer desired here.
	newer := testApp()
	newer.Version = 9
	newerByB := liveAs(layoutOf(t, newer, nodeA, "node-a"), "node-b", t0)
	expect(pass(t0.Add(10*time.Minute), newerByB), layoutHoldStale, true, false)
	expect(pass(t0.Add(11*time.Minute), newerByB), layoutHoldStale, false, false)
	w.failed[key] = applyFailure{at: t0, msg: "refused"}
	w.observe(map[string]Layout{}, nil, t0.Add(12*time.Minute))
	if len(w.stale) != 0 || len(w.failed) != 0 || len(w.conflicts) != 0 || len(w.seen) != 0 {
		t.Fatalf("memory of what is no longer desired nor live: stale %v failed %v conflicts %v seen %v", w.stale, w.failed, w.conflicts, w.seen)
	}

	// In sync: a failure and a stale hold are over.
	w.failed[key], w.stale[key] = applyFailure{at: t0, msg: "refused"}, true
	expect(pass(t0.Add(13*time.Minute), liveAs(want, "node-a", t0)), layoutInSync, false, false)
	if len(w.stale) != 0 || len(w.failed) != 0 {
		t.Fatalf("in sync, still remembered: stale %v failed %v", w.stale, w.failed)
	}
}

// A replica set moved to node-b restarts its app's VMIs elsewhere, and
// only those: not another app's, not one on node-b, not one going already.
func TestVMIsAwayFrom(t *testing.T) {
	vmi := func(name, uuid, node string, deleting bool) *kvv1.VirtualMachineInstance {
		v := &kvv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kube.LabelAppUUID: uuid}},
			Status: kvv1.VirtualMachineInstanceStatus{NodeName: node}}
		if deleting {
			v.DeletionTimestamp = &metav1.Time{}
		}
		return v
	}
	vmis := []*kvv1.VirtualMachineInstance{
		vmi("on-a", appID, "node-a", false),
		vmi("on-b", appID, "node-b", false),
		vmi("going", appID, "node-c", true),
		vmi("unscheduled", appID, "", false),
		vmi("other-app", "another-uuid", "node-a", false),
	}
	var got []string
	for _, v := range vmisAwayFrom(vmis, appID, "node-b") {
		got = append(got, v.Name)
	}
	if !slices.Equal(got, []string{"on-a", "unscheduled"}) {
		t.Fatalf("restarted %v, want [on-a unscheduled]", got)
	}
}

// A claim two nodes' configs disagree on is held for the window from its
// first sighting, like a workload, then written over: the pass lists only
// workloads as live objects, and a desired claim's sighting must survive
// that.
func TestLayoutWriterClaimConflictLapses(t *testing.T) {
	const window = 5 * time.Minute
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	claim := func(dnid string) Layout {
		l, err := LayoutVolume(VolumeConfig{UUID: volID, Name: "plc-data", DesignatedNodeID: dnid, Size: "1Gi", ReplicaCount: 3})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	want := claim(nodeA)
	byB := liveAs(claim(nodeB), "node-b", t0.Add(-time.Hour))
	w := newLayoutWriter(placeEffects{}, window)
	desired := map[string]Layout{want.key(): want}
	pass := func(now time.Time) layoutAction {
		w.observe(desired, nil, now) // claims are not workloads
		return w.decide(want.key(), byB, nil, want, now)
	}
	if act := pass(t0); act.do != layoutHoldConflict || !act.report {
		t.Fatalf("first sighting: %+v, want a conflict hold, reported", act)
	}
	if act := pass(t0.Add(4 * time.Minute)); act.do != layoutHoldConflict || act.report || act.wait != time.Minute {
		t.Fatalf("4m in: %+v, want the hold, quiet, lapsing in 1m0s", act)
	}
	if act := pass(t0.Add(window + time.Second)); act.do != layoutApply || !act.takeover {
		t.Fatalf("past the window: %+v, want this node's claim written over node-b's, said as a takeover", act)
	}
}

// A node whose config lost the tie holds for good while the winner's
// layout stands, and also through the gap when it goes: a pinned VM the
// winner takes over is deleted and made again, and a loser laying the app
// out in between would start the takeovers over. Gone for the window
// from when it was last seen, it is gone: the loser lays the app out.
func TestLayoutWriterLostTieWaitsOutTheGap(t *testing.T) {
	const window = 5 * time.Minute
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	w := newLayoutWriter(placeEffects{}, window)
	pinned := testApp()
	pinned.Kind, pinned.Affinity, pinned.Resources.Memory = KindVM, AffinityRequired, "1Gi"
	want := layoutOf(t, pinned, nodeA, "node-a")
	key := want.key()
	// The winner's config designates a node whose UUID sorts before node-a's.
	const first = "00000000-0000-4000-8000-000000000001"
	theirs := pinned
	theirs.DesignatedNodeID = first
	byWinner := liveAs(layoutOf(t, theirs, first, "node-0"), "node-0", t0)
	pass := func(now time.Time, live *unstructured.Unstructured) layoutAction {
		var workloads []placedObject
		if live != nil {
			workloads = append(workloads, placedObject{GVR: want.GVR, Object: live})
		}
		w.observe(map[string]Layout{key: want}, workloads, now)
		return w.decide(key, live, nil, want, now)
	}
	if act := pass(t0, byWinner); act.do != layoutHoldConflict || !act.report || act.wait != 0 {
		t.Fatalf("the winner's layout: %+v, want a hold for good, reported", act)
	}
	if act := pass(t0.Add(time.Hour), byWinner); act.do != layoutHoldConflict || act.report {
		t.Fatalf("an hour on: %+v, want the hold, quietly", act)
	}
	gone := t0.Add(time.Hour + time.Second)
	act := pass(gone, nil)
	if act.do != layoutHoldConflict || !act.report || act.wait != window-time.Second || !strings.Contains(act.why, "node-0") {
		t.Fatalf("the winner's layout gone a second: %+v, want a hold until the window from its last sighting, reported, naming node-0", act)
	}
	if act := pass(gone.Add(time.Minute), nil); act.do != layoutHoldConflict || act.report {
		t.Fatalf("still gone: %+v, want the hold, quietly", act)
	}
	// Back within the window (made again): held for good again.
	if act := pass(gone.Add(2*time.Minute), liveAs(layoutOf(t, theirs, first, "node-0"), "node-0", gone)); act.do != layoutHoldConflict || act.wait != 0 {
		t.Fatalf("the winner's layout back: %+v, want the hold for good", act)
	}
	// Gone for a whole window: this node lays the app out.
	last := gone.Add(2 * time.Minute)
	pass(last.Add(time.Second), nil)
	if act := pass(last.Add(window), nil); act.do != layoutApply {
		t.Fatalf("gone for the window: %+v, want the layout written", act)
	}
}

// The loser of a tie may never see the winner's layout of a pinned VM
// live: the winner deletes the loser's VMI to make its own, and the
// delete and the create can reach the loser in one burst or the create
// after the loser's next pass. The winner's mark on the deleted VMI
// (AnnotationTakeover) is that sighting: the loser holds through the gap
// as if it had seen the winner's layout go. A delete with no such mark,
// or a mark of a config this node's wins over, is no reason to wait.
func TestLayoutWriterLostTieSeenOnlyInTheDelete(t *testing.T) {
	const window = 5 * time.Minute
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	pinned := testApp()
	pinned.Kind, pinned.Affinity, pinned.Resources.Memory = KindVM, AffinityRequired, "1Gi"
	want := layoutOf(t, pinned, nodeA, "node-a")
	key := want.key()
	const first, last = "00000000-0000-4000-8000-000000000001", "ffffffff-0000-4000-8000-000000000001"
	mine := liveAs(want, "node-a", t0)
	markedBy := func(designated, node string) *unstructured.Unstructured {
		theirs := pinned
		theirs.DesignatedNodeID = designated
		obj := mine.DeepCopy()
		ann := obj.GetAnnotations()
		ann[AnnotationTakeover] = takeoverMark(layoutOf(t, theirs, designated, node).Object, node)
		obj.SetAnnotations(ann)
		return obj
	}
	for _, c := range []struct {
		name    string
		deleted *unstructured.Unstructured
		hold    bool
	}{
		{"taken over for a config that wins the tie", markedBy(first, "node-0"), true},
		{"deleted with no mark (by hand)", mine, false},
		{"taken over for a config this node's wins over", markedBy(last, "node-z"), false},
		{"no last state kept", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newLayoutWriter(placeEffects{}, window)
			pass := func(now time.Time, live, deleted *unstructured.Unstructured) layoutAction {
				var workloads []placedObject
				if live != nil {
					workloads = append(workloads, placedObject{GVR: want.GVR, Object: live})
				}
				w.observe(map[string]Layout{key: want}, workloads, now)
				return w.decide(key, live, deleted, want, now)
			}
			if act := pass(t0, mine, nil); act.do != layoutInSync {
				t.Fatalf("its own layout: %+v, want in sync", act)
			}
			gone := t0.Add(time.Second)
			act := pass(gone, nil, c.deleted)
			if !c.hold {
				if act.do != layoutApply {
					t.Fatalf("gone: %+v, want the layout written at once", act)
				}
				return
			}
			if act.do != layoutHoldConflict || !act.report || act.wait != window || !strings.Contains(act.why, "node-0") {
				t.Fatalf("gone, marked: %+v, want a hold for the window, reported, naming node-0", act)
			}
			if act := pass(gone.Add(time.Minute), nil, c.deleted); act.do != layoutHoldConflict || act.report || act.wait != window-time.Minute {
				t.Fatalf("still gone a minute on: %+v, want the hold, quietly, to the same end", act)
			}
			if act := pass(gone.Add(window), nil, c.deleted); act.do != layoutApply {
				t.Fatalf("gone for the window: %+v, want the layout written", act)
			}
		})
	}
}

// Which takeover marks say another node's layout, which this node's must
// not be written over, is coming: a config that wins the tie does; this
// node's own, one config on both nodes, one this node's wins over, a newer
// config of this node's, no mark or a mark that does not read do not.
func TestTakeoverWinsTie(t *testing.T) {
	pinned := testApp()
	pinned.Kind, pinned.Affinity, pinned.Resources.Memory = KindVM, AffinityRequired, "1Gi"
	want := layoutOf(t, pinned, nodeA, "node-a").Object
	const first, last = "00000000-0000-4000-8000-000000000001", "ffffffff-0000-4000-8000-000000000001"
	markFor := func(app AppConfig, layer, node string) map[string]string {
		return map[string]string{AnnotationTakeover: takeoverMark(layoutOf(t, app, layer, node).Object, node)}
	}
	designating := func(uuid string) AppConfig { a := pinned; a.DesignatedNodeID = uuid; return a }
	older := designating(first)
	newerMine := pinned
	newerMine.Version = pinned.Version + 1
	wantNewer := layoutOf(t, newerMine, nodeA, "node-a").Object
	for _, c := range []struct {
		name string
		ann  map[string]string
		want metav1.Object
		by   string
		wins bool
	}{
		{"a config that wins the tie", markFor(designating(first), first, "node-0"), want, "node-0", true},
		{"this node's own layout", markFor(pinned, nodeA, "node-a"), want, "node-a", false},
		{"one config, moved by an override", markFor(pinned, first, "node-0"), want, "node-0", false},
		{"a config this node's wins over", markFor(designating(last), last, "node-z"), want, "node-z", false},
		{"this node holds a newer config", markFor(older, first, "node-0"), wantNewer, "node-0", false},
		{"no mark", map[string]string{AnnotationDNId: first}, want, "", false},
		{"a mark that does not read", map[string]string{AnnotationTakeover: "{"}, want, "", false},
	} {
		deleted := &metav1.ObjectMeta{Annotations: c.ann}
		by, wins := takeoverWinsTie(deleted, c.want)
		if wins != c.wins || (wins && by != c.by) {
			t.Errorf("%s: takeoverWinsTie = %q, %v; want %q, %v", c.name, by, wins, c.by, c.wins)
		}
	}
}

// A hold reported while the object is gone (the winner's layout of a
// pinned VM being made again) has no object to put a Kubernetes Event on:
// it is said on the timeline and in the log, and the agent does not crash
// handing the recorder a nil object.
func TestLayoutWriterReportsAHoldWithNothingLive(t *testing.T) {
	timeline := NewTimeline(10)
	recorder := record.NewBroadcaster().NewRecorder(scheme.Scheme, corev1.EventSource{Component: "sitecon"})
	w := newLayoutWriter(placeEffects{node: "node-a", timeline: timeline, recorder: recorder, log: slog.New(slog.DiscardHandler), metrics: NewMetrics()}, time.Minute)
	want := layoutOf(t, testApp(), nodeA, "node-a")
	act := layoutAction{do: layoutHoldConflict, report: true, app: appID, why: "conflict: the layout by node-0, whose config wins the tie, is gone", wait: time.Minute}
	wait, failed := w.carryOut(t.Context(), want.key(), want, nil, act, nil, nil, time.Now())
	if wait != time.Minute || failed != nil {
		t.Errorf("carryOut = %s, %v; want the hold's wait", wait, failed)
	}
	if evs := timeline.Events(); len(evs) != 1 || !strings.Contains(evs[0].Message, "node-0") {
		t.Errorf("timeline %+v, want the hold said once", evs)
	}
}
