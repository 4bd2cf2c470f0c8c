package apps

import (
	"strings"
	"testing"

	"github.com/sitecon/sitecon/kube"
)

// The record names each active app's effective node (none while that node
// is not in the cluster), leaves out a deactivated app (the node that laid
// it out removes it), names every node by its UUID, and each claim's apps.
func TestDesignationsFrom(t *testing.T) {
	vol := VolumeConfig{UUID: "v0000000-0000-4000-8000-000000000001", Name: "data"}
	set := AppSet{
		Apps: map[string]AppConfig{
			"a1": {UUID: "a1", Activate: true, VolumeRefs: []string{vol.UUID}},
			"a2": {UUID: "a2", Activate: true},
			"a3": {UUID: "a3", Activate: false, VolumeRefs: []string{vol.UUID}},
		},
		Volumes: map[string]VolumeConfig{vol.UUID: vol},
	}
	states := []PublishedApp{{UUID: "a1", DNIdNode: "node-c"}, {UUID: "a2", DNIdNode: ""}, {UUID: "a3", DNIdNode: "node-a"}}
	d := designationsFrom(set, states, map[string]string{"u-a": "node-a", "u-c": "node-c"})
	data := d.Data()
	for key, want := range map[string]string{
		"app.a1": "node-c", "app.a2": kube.NoNode, "node.u-a": "node-a", "node.u-c": "node-c",
		"claim." + ClaimName(vol): "a1 a3",
	} {
		if data[key] != want {
			t.Errorf("record %s = %q, want %q (all: %v)", key, data[key], want, data)
		}
	}
	if _, ok := data["app.a3"]; ok {
		t.Errorf("a deactivated app is recorded as laid out: %v", data)
	}
}

// A worker's agent writes only the workloads the record names it for: the
// others wait, each saying why; claims and classes are not its to hold.
func TestAwaitingRecordHoldsWhatTheRecordDoesNotName(t *testing.T) {
	mine := AppConfig{UUID: "a1000000-0000-4000-8000-000000000001", DisplayName: "mine", Activate: true, Kind: KindContainer, Image: "x:1", Affinity: AffinityRequired}
	moved := AppConfig{UUID: "a2000000-0000-4000-8000-000000000002", DisplayName: "moved", Activate: true, Kind: KindVM, Image: "x:1", Affinity: AffinityPreferred}
	desired := map[string]Layout{}
	for _, app := range []AppConfig{mine, moved} {
		l, err := LayoutApp(app, "u-c", "node-c", nil, PlacementOptions{})
		if err != nil {
			t.Fatal(err)
		}
		desired[l.key()] = l
	}
	class, _ := LayoutStorageClass(2)
	desired[class.key()] = class
	appErr := map[string]string{}
	awaitingRecord(desired, map[string]string{"app." + mine.UUID: "node-c", "app." + moved.UUID: "node-a"}, "node-c", appErr)
	var kept []string
	for _, l := range desired {
		kept = append(kept, l.Name())
	}
	if len(desired) != 2 || appErr[mine.UUID] != "" || !strings.Contains(appErr[moved.UUID], kube.DesignationsConfigMapName) {
		t.Errorf("kept %v, errors %v: want mine and the class kept, moved held saying it waits on the record", kept, appErr)
	}
	appErr = map[string]string{}
	awaitingRecord(desired, nil, "node-c", appErr)
	if appErr[mine.UUID] == "" {
		t.Errorf("with no record a worker's app should wait: %v", appErr)
	}
}
