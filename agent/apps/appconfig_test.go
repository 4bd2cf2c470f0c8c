package apps

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Issue 13 item 1: KubeVirt refuses a VMI without memory, so a VM app
// config without resources.memory is refused where it is read, naming the
// field, instead of being laid out as a VMI the API server turns away.
func TestVMAppNeedsMemory(t *testing.T) {
	vm := `{"uuid":"` + appID + `","displayname":"hmi","activate":true,"kind":"vm",
	 "image":"registry.local/hmi:1","designated_node_id":"` + nodeA + `","resources":{"cpu":"1"}}`
	dir := t.TempDir()
	path := filepath.Join(dir, "apps", "hmi.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(vm), 0o644); err != nil {
		t.Fatal(err)
	}
	files := ReadAppFiles(dir)
	if len(files.Apps) != 0 || !strings.Contains(files.Errors[path], "resources.memory: missing: a VM app needs its guest memory") {
		t.Fatalf("a VM app without memory: apps %v, errors %q", files.Apps, files.Errors)
	}

	withMemory := strings.Replace(vm, `{"cpu":"1"}`, `{"cpu":"1","memory":"2Gi"}`, 1)
	if app, err := ParseAppConfig([]byte(withMemory)); err != nil || app.Resources.Memory != "2Gi" {
		t.Fatalf("a VM app with memory: %+v, %v", app, err)
	}
	// A container's memory stays optional: Kubernetes runs a pod without
	// requests.
	container := strings.Replace(vm, `"kind":"vm"`, `"kind":"container"`, 1)
	if _, err := ParseAppConfig([]byte(container)); err != nil {
		t.Fatalf("a container app without memory: %v", err)
	}
}

// A file that a readable directory no longer lists is held for the grace
// with its last good version: `rm *.json; cp ...` (a tool swapping the
// files) must not remove an app for one read. Past the grace the absence
// is an intent and the app leaves the config; a file that came back, or
// another file now defining the same UUID, ends the hold at once.
func TestHoldAbsentFiles(t *testing.T) {
	const grace = 30 * time.Second
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	app := testApp()
	vol := VolumeConfig{UUID: volID, Name: "plc-data", DesignatedNodeID: nodeA, Size: "1Gi", ReplicaCount: 3}
	lastGood := AppFiles{Apps: map[string]AppConfig{"/d/apps/plc.json": app}, Volumes: map[string]VolumeConfig{"/d/volumes/data.json": vol}}
	empty := func() AppFiles {
		return AppFiles{Apps: map[string]AppConfig{}, Volumes: map[string]VolumeConfig{}, Errors: map[string]string{}, Unreadable: map[string]string{}}
	}
	renamed := empty()
	renamed.Apps["/d/apps/plc-v2.json"] = app
	renamed.Volumes["/d/volumes/data.json"] = vol
	back := empty()
	back.Apps["/d/apps/plc.json"] = app
	back.Volumes["/d/volumes/data.json"] = vol
	unreadable := empty()
	unreadable.Unreadable["/d/apps"] = "no such file or directory"
	for name, tc := range map[string]struct {
		read      AppFiles
		since     map[string]time.Time // absent since, before this read
		now       time.Time
		apps      int
		volumes   int
		held      []string // paths reported held
		next      time.Duration
		stillSeen []string // paths whose absence is remembered after
	}{
		"both files gone for one read: held, nothing leaves": {read: empty(), now: t0, apps: 1, volumes: 1,
			held: []string{"/d/apps/plc.json", "/d/volumes/data.json"}, next: grace, stillSeen: []string{"/d/apps/plc.json", "/d/volumes/data.json"}},
		"still gone within the grace: held": {read: empty(), since: map[string]time.Time{"/d/apps/plc.json": t0, "/d/volumes/data.json": t0},
			now: t0.Add(20 * time.Second), apps: 1, volumes: 1, held: []string{"/d/apps/plc.json", "/d/volumes/data.json"}, next: 10 * time.Second,
			stillSeen: []string{"/d/apps/plc.json", "/d/volumes/data.json"}},
		"gone past the grace: removed": {read: empty(), since: map[string]time.Time{"/d/apps/plc.json": t0, "/d/volumes/data.json": t0},
			now: t0.Add(grace)},
		"back within the grace: as if never gone": {read: back, since: map[string]time.Time{"/d/apps/plc.json": t0},
			now: t0.Add(time.Second), apps: 1, volumes: 1},
		"renamed (the same UUID in another file): not held": {read: renamed, now: t0, apps: 1, volumes: 1},
		// An unreadable directory is unknown, held by MergeAppFiles for as
		// long as it lasts; its files are not absent.
		"the directory cannot be read: not an absence": {read: unreadable, now: t0, apps: 1, volumes: 1,
			held: []string{"/d/volumes/data.json"}, next: grace, stillSeen: []string{"/d/volumes/data.json"}},
	} {
		t.Run(name, func(t *testing.T) {
			read, since, next := HoldAbsentFiles(tc.read, lastGood, tc.since, tc.now, grace)
			set, _ := MergeAppFiles(read, lastGood)
			var held []string
			for path, msg := range set.Errors {
				if strings.Contains(msg, "absent") {
					held = append(held, path)
				}
			}
			slices.Sort(held)
			seen := slices.Sorted(maps.Keys(since))
			if len(set.Apps) != tc.apps || len(set.Volumes) != tc.volumes || !slices.Equal(held, tc.held) || next != tc.next || !slices.Equal(seen, tc.stillSeen) {
				t.Fatalf("apps %d volumes %d held %v next %s absent %v; want %d, %d, %v, %s, %v (errors %v)",
					len(set.Apps), len(set.Volumes), held, next, seen, tc.apps, tc.volumes, tc.held, tc.next, tc.stillSeen, set.Errors)
			}
			if len(set.Unknown) != 0 && name != "the directory cannot be read: not an absence" {
				t.Fatalf("a held absence is not unknown (removals of other apps go on): %v", set.Unknown)
			}
		})
	}
}
