package apps

import (
	"slices"
	"testing"
	"time"
)

// Which layouts a node re-stamps with the config it holds now: only its
// own, of an app still active in its config that another node places now,
// stamped with another config. Its old stamps would otherwise stand for a
// config it has given up, and could win the tie (configWinsTie) over the
// placing node's config for good: a move by an unversioned config never
// taking effect.
func TestHandovers(t *testing.T) {
	app := testApp()
	app.VolumeRefs = nil
	old := app
	old.Image = "registry.local/plc-gateway:1.3"
	layout := func(a AppConfig, dnid string) placedObject {
		l, err := LayoutApp(a, dnid, "node-x", nil, PlacementOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return placedObject(l)
	}
	movedToB := app
	movedToB.DesignatedNodeID = nodeB
	newer := app
	newer.Version = 7
	for name, tc := range map[string]struct {
		live     placedObject
		config   AppConfig
		inConfig bool
		places   bool
		want     bool
	}{
		"moved to another node by an unversioned change: re-stamped": {live: layout(old, nodeA), config: movedToB, inConfig: true, want: true},
		"its stamps already say what this node holds":                {live: layout(movedToB, nodeA), config: movedToB, inConfig: true},
		"this node places it: the writer's business":                 {live: layout(old, nodeA), config: app, inConfig: true, places: true},
		"another node's layout":                                      {live: layout(old, nodeB), config: movedToB, inConfig: true},
		"deactivated: the orphan remover's": {live: layout(old, nodeA), config: func() AppConfig {
			a := movedToB
			a.Activate = false
			return a
		}(), inConfig: true},
		"gone from the config: the orphan remover's":      {live: layout(old, nodeA), config: movedToB},
		"laid out from a newer config than this node's":   {live: layout(newer, nodeA), config: movedToB, inConfig: true},
		"a versioned config moved it: re-stamped as well": {live: layout(old, nodeA), config: func() AppConfig { a := movedToB; a.Version = 8; return a }(), inConfig: true, want: true},
	} {
		t.Run(name, func(t *testing.T) {
			set := AppSet{Apps: map[string]AppConfig{}}
			if tc.inConfig {
				set.Apps[app.UUID] = tc.config
			}
			got := handovers([]placedObject{tc.live}, nil, set, map[string]AppDecision{app.UUID: {Place: tc.places}}, nodeA, ownClaims(nodeA))
			if (len(got) == 1) != tc.want {
				t.Fatalf("handovers: %d, want one: %v", len(got), tc.want)
			}
			if tc.want && !slices.Equal([]string{got[0].stamps[AnnotationConfigDNId], got[0].stamps[AnnotationConfigHash]},
				[]string{tc.config.DesignatedNodeID, configHash(tc.config)}) {
				t.Fatalf("stamps %v, want the config this node holds", got[0].stamps)
			}
		})
	}
	// A claim of a volume whose config designates another node now: the
	// same.
	vol := VolumeConfig{UUID: volID, Name: "plc-data", DesignatedNodeID: nodeA, Size: "1Gi", ReplicaCount: 3}
	claim, err := LayoutVolume(vol)
	if err != nil {
		t.Fatal(err)
	}
	claimOnA := placedObject(claim)
	volMoved := vol
	volMoved.DesignatedNodeID = nodeB
	for name, tc := range map[string]struct {
		v    VolumeConfig
		want bool
	}{
		"a volume moved to another node: re-stamped": {v: volMoved, want: true},
		"a volume still designating this node":       {v: vol},
	} {
		got := handovers(nil, []placedObject{claimOnA}, AppSet{Volumes: map[string]VolumeConfig{volID: tc.v}}, nil, nodeA, ownClaims(nodeA))
		if (len(got) == 1) != tc.want || (tc.want && got[0].stamps[AnnotationConfigHash] != configHash(volMoved)) {
			t.Fatalf("%s: handovers %v, want one: %v", name, got, tc.want)
		}
	}
	// A worker's claim (node-a a worker here): the worker cannot write it
	// (NodeRestriction), the stats leader writes and hands it over.
	for name, tc := range map[string]struct {
		writes func(string) bool
		want   bool
	}{
		"the worker itself, on its node's identity": {writes: func(string) bool { return false }},
		"the stats leader, a server":                {writes: ownClaims(nodeA), want: true},
	} {
		got := handovers(nil, []placedObject{claimOnA}, AppSet{Volumes: map[string]VolumeConfig{volID: volMoved}}, nil, "33333333-3333-4333-8333-333333333333", tc.writes)
		if (len(got) == 1) != tc.want {
			t.Errorf("a worker's moved claim handed over by %s: %v, want %v", name, got, tc.want)
		}
	}

	// Re-stamped, the placing node holding the same config writes at once:
	// the configs agree.
	restamped := layout(old, nodeA)
	ann := restamped.Object.GetAnnotations()
	for k, v := range configStamps(movedToB) {
		ann[k] = v
	}
	restamped.Object.SetAnnotations(ann)
	want, _ := LayoutApp(movedToB, nodeB, "node-b", nil, PlacementOptions{})
	if got := DecideLayoutWrite(layout(old, nodeA).Object, want.Object, testSeen, testSeen.Add(time.Second), DefaultConflictWindow); !got.Conflict {
		t.Fatalf("before the handover, node-b sees a conflict: %+v", got)
	}
	if got := DecideLayoutWrite(restamped.Object, want.Object, testSeen, testSeen.Add(time.Second), DefaultConflictWindow); got.Hold != "" {
		t.Fatalf("after the handover, node-b holds: %+v", got)
	}
}

var testSeen = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
