package apps

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sitecon/sitecon/kube"
)

// Which workloads a node removes: only ones it laid out itself, that are
// not desired any more, for an app that left the config, that its config
// deactivates (wherever the config designates it now: the new designated
// node lays nothing out for it, so the node that laid it out is the one
// that removes it), or that it still places; never a layout from a newer
// config than its own; nothing at all while a config file cannot be read.
func TestOrphanWorkloads(t *testing.T) {
	const (
		gone  = "d0000000-0000-4000-8000-000000000001"
		moved = "d0000000-0000-4000-8000-000000000002"
		kept  = "d0000000-0000-4000-8000-000000000003"
		off   = "d0000000-0000-4000-8000-000000000004"
		// offMoved was deactivated and designated to node B in one change.
		offMoved = "d0000000-0000-4000-8000-000000000005"
		// offNewer: deactivated here, but its layout is from a newer config.
		offNewer = "d0000000-0000-4000-8000-000000000006"
	)
	placed := func(gvr Layout, name, uuid, dnid string) placedObject {
		obj := &unstructured.Unstructured{}
		obj.SetKind("Deployment")
		obj.SetName(name)
		obj.SetNamespace(kube.AppNamespace)
		obj.SetLabels(map[string]string{kube.LabelAppUUID: uuid})
		obj.SetAnnotations(map[string]string{AnnotationDNId: dnid})
		return placedObject{GVR: gvr.GVR, Object: obj}
	}
	deployment := Layout{GVR: GVRDeployment}
	keptApp := testApp()
	keptApp.UUID, keptApp.DisplayName, keptApp.VolumeRefs = kept, "kept", nil
	keptLayout := layoutOf(t, keptApp, nodeA, "node-a")
	vmApp := keptApp
	vmApp.Kind = KindVM
	vmLayout := layoutOf(t, vmApp, nodeA, "node-a")

	set := AppSet{Apps: map[string]AppConfig{moved: {UUID: moved, Activate: true}, kept: keptApp, off: {UUID: off},
		offMoved: {UUID: offMoved, Version: 3}, offNewer: {UUID: offNewer, Version: 3}}}
	decisions := map[string]AppDecision{moved: {Place: false}, kept: {Place: true}, off: {Place: true}, offMoved: {Place: false}, offNewer: {Place: false}}
	newer := placed(deployment, "off-newer", offNewer, nodeA)
	newer.Object.SetAnnotations(map[string]string{AnnotationDNId: nodeA, AnnotationConfigVersion: "4"})
	workloads := []placedObject{
		placed(deployment, "gone", gone, nodeA),
		placed(deployment, "gone-by-b", gone, nodeB),
		placed(deployment, "moved", moved, nodeA),
		placed(deployment, WorkloadName(keptApp), kept, nodeA),
		placed(deployment, "off", off, nodeA),
		placed(deployment, "off-moved", offMoved, nodeA),
		newer,
	}
	// On node B, the new designated node of offMoved: it lays nothing out
	// for a deactivated app, and the layout is node A's to remove.
	onB := []placedObject{placed(deployment, "off-moved", offMoved, nodeA)}
	if orphans, _ := orphanWorkloads(onB, map[string]Layout{}, set, map[string]AppDecision{offMoved: {Place: true}}, nodeB, true); len(orphans) != 0 {
		t.Fatalf("node B removes node A's layout: %v", orphans)
	}
	for name, tc := range map[string]struct {
		set     AppSet
		desired map[string]Layout
		removed []string // "name: why"
		held    bool
		// starting: the agent has not read the config for the absence
		// grace yet.
		starting bool
	}{
		"the app left the config, or is no longer placed here": {set: set, desired: map[string]Layout{keptLayout.key(): keptLayout},
			removed: []string{"gone: its app left the config", "off: its app is deactivated", "off-moved: its app is deactivated"}},
		// Just started: a file absent for a moment has no last good
		// version to hold it; only an app that left the config waits.
		"the agent just started: an app missing from the config keeps its workload for the grace": {set: set, desired: map[string]Layout{keptLayout.key(): keptLayout},
			starting: true, removed: []string{"off: its app is deactivated", "off-moved: its app is deactivated"}},
		"a file cannot be read: nothing removed": {set: AppSet{Apps: set.Apps, Unknown: []string{"/persist/apps/apps/x.json"}},
			desired: map[string]Layout{keptLayout.key(): keptLayout}, held: true},
		// An active app placed here that this pass could not lay out (a
		// volume it names has no config yet, its designated node is not in
		// the node cache): what runs stays, its state says why.
		"the app cannot be laid out this pass: its workload stays": {set: set, desired: map[string]Layout{},
			removed: []string{"gone: its app left the config", "off: its app is deactivated", "off-moved: its app is deactivated"}},
		"the app changed kind: its old workload removed": {set: set, desired: map[string]Layout{vmLayout.key(): vmLayout},
			removed: []string{"gone: its app left the config", WorkloadName(keptApp) + ": its app is laid out under another name or kind now", "off: its app is deactivated", "off-moved: its app is deactivated"}},
	} {
		t.Run(name, func(t *testing.T) {
			orphans, held := orphanWorkloads(workloads, tc.desired, tc.set, decisions, nodeA, !tc.starting)
			var got []string
			for _, o := range orphans {
				got = append(got, o.Object.GetName()+": "+o.why)
			}
			if held != tc.held || !slices.Equal(got, tc.removed) {
				t.Fatalf("removed %q held %v, want %q held %v", got, held, tc.removed, tc.held)
			}
		})
	}
}
