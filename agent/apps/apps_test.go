package apps

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
)

const (
	nodeA = "11111111-1111-4111-8111-111111111111"
	nodeB = "22222222-2222-4222-8222-222222222222"
	appID = "5b0f7c1e-2d3a-4b5c-8d9e-0f1a2b3c4d03"
	volID = "9a7e0000-0000-4000-8000-000000000001"
)

func testApp() AppConfig {
	return AppConfig{UUID: appID, DisplayName: "plc-gateway", Activate: true, Kind: KindContainer,
		Image: "registry.local/plc-gateway:1.4", DesignatedNodeID: nodeA, Affinity: AffinityPreferred, VolumeRefs: []string{volID}}
}

func TestParseAppConfig(t *testing.T) {
	good := `{"uuid":"` + appID + `","displayname":"plc-gateway","activate":true,"kind":"container",
	 "image":"registry.local/plc-gateway:1.4","designated_node_id":"` + nodeA + `",
	 "affinity":"preferred","node_select_labels":{"site.io/line":"2"},"volume_refs":["` + volID + `"],
	 "resources":{"cpu":"500m","memory":"256Mi"}}`
	app, err := ParseAppConfig([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if app.Pinned() || app.Resources.CPU != "500m" || app.NodeSelectLabels["site.io/line"] != "2" {
		t.Fatalf("parsed %+v", app)
	}
	for name, tc := range map[string]struct{ edit, want string }{
		"unknown field":  {`"activate":true`, `unknown field`},
		"bad kind":       {`"kind":"container"`, `kind: "pod"`},
		"bad affinity":   {`"affinity":"preferred"`, `affinity: "soft"`},
		"bad dnid":       {`"designated_node_id":"` + nodeA + `"`, `designated_node_id: "node-a" is not a node UUID`},
		"bad quantity":   {`"cpu":"500m"`, `resources.cpu: "half"`},
		"bad label":      {`"site.io/line":"2"`, `node_select_labels: key "bad key!"`},
		"bad volume ref": {`"volume_refs":["` + volID + `"]`, `volume_refs: "vol1"`},
	} {
		t.Run(name, func(t *testing.T) {
			repl := map[string]string{
				"unknown field": `"activate":true,"colour":"blue"`, "bad kind": `"kind":"pod"`,
				"bad affinity": `"affinity":"soft"`, "bad dnid": `"designated_node_id":"node-a"`,
				"bad quantity": `"cpu":"half"`, "bad label": `"bad key!":"2"`, "bad volume ref": `"volume_refs":["vol1"]`,
			}[name]
			_, err := ParseAppConfig([]byte(strings.Replace(good, tc.edit, repl, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestMergeAppFilesKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		path := filepath.Join(dir, "apps", name)
		_ = os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The agent makes both directories; a missing one is unknown.
	if err := os.MkdirAll(filepath.Join(dir, "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
	a := testApp()
	a.VolumeRefs = nil
	data, _ := json.Marshal(a)
	write("plc.json", string(data))
	set, good := MergeAppFiles(ReadAppFiles(dir), AppFiles{})
	if len(set.Apps) != 1 || len(set.Errors) != 0 {
		t.Fatalf("first read: %+v", set)
	}
	write("plc.json", `{"uuid": broken`)
	set, good = MergeAppFiles(ReadAppFiles(dir), good)
	if set.Apps[appID].DisplayName != "plc-gateway" {
		t.Fatalf("a broken file lost its app's last good version: %+v", set)
	}
	if msg := set.Errors[filepath.Join(dir, "apps", "plc.json")]; msg == "" {
		t.Fatalf("no per-file error: %+v", set.Errors)
	}
	if len(set.Unknown) != 0 {
		t.Fatalf("a broken file with a last good version is not unknown: %v", set.Unknown)
	}
	// After a restart there is no last good version: what the file held is
	// unknown, which holds every removal.
	restarted, _ := MergeAppFiles(ReadAppFiles(dir), AppFiles{})
	if len(restarted.Apps) != 0 || !slices.Equal(restarted.Unknown, []string{filepath.Join(dir, "apps", "plc.json")}) {
		t.Fatalf("after a restart: apps %v, unknown %v", restarted.Apps, restarted.Unknown)
	}
	write("copy.json", string(data))
	set, _ = MergeAppFiles(ReadAppFiles(dir), good)
	if !strings.Contains(set.Errors[filepath.Join(dir, "apps", "plc.json")], "already defined") {
		t.Fatalf("duplicate UUID not reported: %+v", set.Errors)
	}
}

// An override holds while the config still names the node it moved the app
// from, or while this node's config is older than the one it was made
// against; only a newer config version voids and clears it. A config of the
// same version (or unversioned) naming another node voids it here but may
// not clear it: that node cannot tell whose config is the newer.
func TestEffectiveDNId(t *testing.T) {
	const nodeC = "33333333-3333-4333-8333-333333333333"
	for name, tc := range map[string]struct {
		version   uint64
		o         *PlacementOverride
		want      string
		active    bool
		wantStale bool
	}{
		"no override":    {0, nil, nodeA, false, false},
		"override holds": {0, &PlacementOverride{NodeUUID: nodeB, ConfigDNId: nodeA}, nodeB, true, false},
		"holds across a version that kept the designated node": {3, &PlacementOverride{NodeUUID: nodeB, ConfigDNId: nodeA, ConfigVersion: 2}, nodeB, true, false},
		"a newer config named another node: void and cleared":  {3, &PlacementOverride{NodeUUID: nodeB, ConfigDNId: nodeC, ConfigVersion: 2}, nodeA, false, true},
		"an override from before versions, a versioned config": {1, &PlacementOverride{NodeUUID: nodeB, ConfigDNId: nodeC}, nodeA, false, true},
		"this node's config is older than the override's":      {1, &PlacementOverride{NodeUUID: nodeB, ConfigDNId: nodeC, ConfigVersion: 2}, nodeB, true, false},
		"same version, another node named: void, kept":         {2, &PlacementOverride{NodeUUID: nodeB, ConfigDNId: nodeC, ConfigVersion: 2}, nodeA, false, false},
		"unversioned, another node named: void, kept":          {0, &PlacementOverride{NodeUUID: nodeB, ConfigDNId: nodeC}, nodeA, false, false},
	} {
		t.Run(name, func(t *testing.T) {
			app := testApp()
			app.Version = tc.version
			got, active, stale := EffectiveDNId(app, tc.o)
			if got != tc.want || (active != nil) != tc.active || stale != tc.wantStale {
				t.Fatalf("got %s active=%v stale=%v, want %s active=%v stale=%v", got, active != nil, stale, tc.want, tc.active, tc.wantStale)
			}
		})
	}
}

func TestDecideApp(t *testing.T) {
	live := func(sched, running string) AppObservation {
		return AppObservation{Synced: true, Connected: true, Exists: sched != "", ScheduledNode: sched, RunningNode: running}
	}
	for name, tc := range map[string]struct {
		thisUUID, thisNode string
		activate           bool
		obs                AppObservation
		want               AppDecision
	}{
		"dnid, nothing yet": {nodeA, "node-a", true, live("", ""),
			AppDecision{Activate: true, Place: true, IsDNIdNode: true, KubeStatus: KubeNotInCluster}},
		"dnid, running here": {nodeA, "node-a", true, live("node-a", "node-a"),
			AppDecision{Activate: true, Place: true, IsDNIdNode: true, ScheduledOnThisNode: true, ClusterAppRunning: true, KubeStatus: KubeRunning}},
		"dnid, running elsewhere": {nodeA, "node-a", true, live("node-b", "node-b"),
			AppDecision{Activate: false, Place: true, IsDNIdNode: true, KubeStatus: KubeRunning}},
		"dnid, user deactivated": {nodeA, "node-a", false, live("node-a", "node-a"),
			AppDecision{Activate: false, Place: true, IsDNIdNode: true, ScheduledOnThisNode: true, ClusterAppRunning: true, KubeStatus: KubeRunning}},
		"other node, scheduled here (moved)": {nodeB, "node-b", true, live("node-b", "node-b"),
			AppDecision{Activate: true, ScheduledOnThisNode: true, ClusterAppRunning: true, KubeStatus: KubeRunning}},
		"other node, scheduled here, not running yet": {nodeB, "node-b", true, live("node-b", ""),
			AppDecision{Activate: true, ScheduledOnThisNode: true, KubeStatus: KubeNotRunning}},
		"other node, elsewhere": {nodeB, "node-b", true, live("node-a", "node-a"),
			AppDecision{KubeStatus: KubeRunning}},
		"not synced":      {nodeA, "node-a", true, AppObservation{}, AppDecision{Activate: true, Place: true, IsDNIdNode: true, KubeStatus: KubeUnknown}},
		"api unreachable": {nodeA, "node-a", true, AppObservation{Synced: true}, AppDecision{Activate: true, Place: true, IsDNIdNode: true, KubeStatus: KubeAPIUnreachable}},
	} {
		t.Run(name, func(t *testing.T) {
			app := testApp()
			app.Activate = tc.activate
			if got := DecideApp(app, nodeA, tc.thisUUID, tc.thisNode, tc.obs); got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// Only the designated node creates a volume; every node publishes the same
// Longhorn view of it, and whether it holds a healthy replica itself.
func TestVolumeStates(t *testing.T) {
	vol := VolumeConfig{UUID: volID, Name: "historian-data", DesignatedNodeID: strings.ToUpper(nodeA), Size: "1Gi", ReplicaCount: 2}
	unprovisioned := VolumeConfig{UUID: "9a7e0000-0000-4000-8000-000000000002", Name: "spool", DesignatedNodeID: nodeB, ReplicaCount: 3}
	volumes := map[string]VolumeConfig{vol.UUID: vol, unprovisioned.UUID: unprovisioned}
	lv := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-1"}}
	lv.Status.KubernetesStatus.Namespace, lv.Status.KubernetesStatus.PVCName = kube.AppNamespace, ClaimName(vol)
	lv.Status.State, lv.Status.Robustness = lhv1beta2.VolumeStateAttached, lhv1beta2.VolumeRobustnessDegraded
	replica := func(node string, state lhv1beta2.InstanceState) *lhv1beta2.Replica {
		r := &lhv1beta2.Replica{Spec: lhv1beta2.ReplicaSpec{InstanceSpec: lhv1beta2.InstanceSpec{VolumeName: "pvc-1", NodeID: node}, HealthyAt: "x"}}
		r.Status.CurrentState = state
		return r
	}
	d := kube.Data{Volumes: []*lhv1beta2.Volume{lv}, Replicas: []*lhv1beta2.Replica{
		replica("node-a", lhv1beta2.InstanceStateRunning), replica("node-b", lhv1beta2.InstanceStateError)}}
	nodeByUUID := map[string]string{nodeA: "node-a", nodeB: "node-b"}

	onA := VolumeStates(volumes, nodeA, "node-a", nodeByUUID, d)
	onB := VolumeStates(volumes, nodeB, "node-b", nodeByUUID, d)
	if len(onA) != 2 || len(onB) != 2 {
		t.Fatalf("every configured volume is published: %d and %d", len(onA), len(onB))
	}
	byUUID := func(vs []VolumeState, uuid string) VolumeState {
		for _, v := range vs {
			if v.UUID == uuid {
				return v
			}
		}
		t.Fatalf("%s not published", uuid)
		return VolumeState{}
	}
	a, b := byUUID(onA, volID), byUUID(onB, volID)
	if !a.IsDNIdNode || a.Replicated || b.IsDNIdNode || !b.Replicated || a.DNIdNode != "node-a" || b.DNIdNode != "node-a" {
		t.Fatalf("gating: on node-a %+v, on node-b %+v", a, b)
	}
	if a.LonghornVolume != "pvc-1" || a.Robustness != "degraded" || a.State != "attached" || b.Robustness != "degraded" || a.Claim != b.Claim {
		t.Fatalf("Longhorn's view differs or is missing: %+v / %+v", a, b)
	}
	if !a.HealthyReplicaHere || b.HealthyReplicaHere {
		t.Fatalf("node-a holds the healthy replica, node-b a failed one: %v / %v", a.HealthyReplicaHere, b.HealthyReplicaHere)
	}
	if u := byUUID(onB, unprovisioned.UUID); !u.IsDNIdNode || u.LonghornVolume != "" || u.Robustness != "" {
		t.Fatalf("a claim Longhorn has not provisioned yet has no Longhorn view: %+v", u)
	}
}

func TestPinnedLost(t *testing.T) {
	lostAt := time.Date(2026, 11, 22, 3, 4, 5, 0, time.UTC)
	node := func(name string, ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(lostAt)}}}}
	}
	nodes := map[string]*corev1.Node{"node-a": node("node-a", corev1.ConditionTrue), "node-b": node("node-b", corev1.ConditionUnknown)}
	pinned := testApp()
	pinned.Affinity = AffinityRequired
	for name, tc := range map[string]struct {
		app            AppConfig
		node, dnidNode string
		want           *LostApp
	}{
		"runs on a lost node":             {app: pinned, node: "node-b", dnidNode: "node-b", want: &LostApp{Node: "node-b", Since: lostAt}},
		"evicted, replacement Pending":    {app: pinned, node: "", dnidNode: "node-b", want: &LostApp{Node: "node-b", Since: lostAt}},
		"runs on a Ready node":            {app: pinned, node: "node-a", dnidNode: "node-b"},
		"designated node Ready, unplaced": {app: pinned, node: "", dnidNode: "node-a"},
		"designated node unknown":         {app: pinned, node: "", dnidNode: ""},
		"auto apps move, never lost":      {app: testApp(), node: "node-b", dnidNode: "node-b"},
	} {
		t.Run(name, func(t *testing.T) {
			got := PinnedLost(tc.app, tc.node, tc.dnidNode, nodes)
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Fatalf("PinnedLost = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestObserveAppsIgnoresTerminatingPods(t *testing.T) {
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plc-1", Namespace: kube.AppNamespace, Labels: map[string]string{kube.LabelAppUUID: appID}},
		Spec: corev1.PodSpec{NodeName: "node-c"}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	dying := running.DeepCopy()
	dying.Name, dying.Spec.NodeName, dying.DeletionTimestamp = "plc-0", "node-b", &metav1.Time{Time: time.Now()}
	vmi := &kvv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "hmi-x", Namespace: kube.AppNamespace, Labels: map[string]string{kube.LabelAppUUID: nodeB}},
		Status: kvv1.VirtualMachineInstanceStatus{Phase: kvv1.Running, NodeName: "node-a"}}
	obs := ObserveApps(kube.Data{Pods: []*corev1.Pod{dying, running}, VMIs: []*kvv1.VirtualMachineInstance{vmi}, Health: kube.Health{Connected: true}})
	if o := obs[appID]; o.RunningNode != "node-c" || o.ScheduledNode != "node-c" || len(o.Stuck) != 1 {
		t.Fatalf("container app: %+v", o)
	}
	if o := obs[nodeB]; o.RunningNode != "node-a" || o.VMIName != "hmi-x" {
		t.Fatalf("vm app: %+v", o)
	}
}

// A node holding an older version of an app's config never overwrites
// what a newer one laid out; unversioned configs are never held back.
func TestStaleConfig(t *testing.T) {
	vols := map[string]VolumeConfig{volID: {UUID: volID, Name: "plc-data", DesignatedNodeID: nodeA, Size: "1Gi", ReplicaCount: 3}}
	layout := func(version uint64, dnid, node string) Layout {
		app := testApp()
		app.Version, app.DesignatedNodeID = version, dnid
		l, err := LayoutApp(app, dnid, node, vols, PlacementOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	v1OnA, v2OnB := layout(1, nodeA, "node-a"), layout(2, nodeB, "node-b")
	if ConfigVersion(v2OnB.Object) != 2 || ConfigVersion(layout(0, nodeA, "node-a").Object) != 0 {
		t.Fatal("the layout does not carry its config version")
	}
	for name, tc := range map[string]struct {
		live, want Layout
		held       bool
	}{
		"older config over a newer layout":  {live: v2OnB, want: v1OnA, held: true},
		"newer config over an older layout": {live: v1OnA, want: v2OnB},
		"same version":                      {live: v2OnB, want: layout(2, nodeB, "node-b")},
		"unversioned over unversioned":      {live: layout(0, nodeB, "node-b"), want: layout(0, nodeA, "node-a")},
		"unversioned over versioned":        {live: v1OnA, want: layout(0, nodeB, "node-b"), held: true},
	} {
		t.Run(name, func(t *testing.T) {
			why := StaleConfig(tc.live.Object, tc.want.Object)
			if (why != "") != tc.held {
				t.Fatalf("StaleConfig = %q, held want %v", why, tc.held)
			}
		})
	}
	if why := StaleConfig(v2OnB.Object, v1OnA.Object); !strings.Contains(why, "version 1") || !strings.Contains(why, "version 2 is laid out") {
		t.Fatalf("the reason should name both versions: %q", why)
	}
}

func TestLayoutApp(t *testing.T) {
	vols := map[string]VolumeConfig{volID: {UUID: volID, Name: "plc-data", DesignatedNodeID: nodeA, Size: "1Gi", ReplicaCount: 3}}
	auto, err := LayoutApp(testApp(), nodeA, "node-a", vols, PlacementOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if auto.GVR != GVRDeployment || auto.Name() != "plc-gateway-5b0f7c1e" {
		t.Fatalf("auto container: %v %s", auto.GVR, auto.Name())
	}
	affinity := nested(t, auto.Object, "spec", "template", "spec", "affinity", "nodeAffinity")
	if _, ok := affinity["preferredDuringSchedulingIgnoredDuringExecution"]; !ok {
		t.Fatalf("auto app does not prefer its node: %v", affinity)
	}
	tolerations, _, _ := unstructured.NestedSlice(auto.Object.Object, "spec", "template", "spec", "tolerations")
	if len(tolerations) != 2 || tolerations[0].(map[string]any)["tolerationSeconds"] != int64(DefaultMoveAfter/time.Second) {
		t.Fatalf("auto app tolerations: %v", tolerations)
	}
	// An auto app no volume holds is never evicted: nothing would hold
	// its replacement while the old copy may run (MovedByTheFailoverAlone).
	bare := testApp()
	bare.VolumeRefs = nil
	noVolume, err := LayoutApp(bare, nodeA, "node-a", vols, PlacementOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tolerations, _, _ = unstructured.NestedSlice(noVolume.Object.Object, "spec", "template", "spec", "tolerations")
	if len(tolerations) != 2 {
		t.Fatalf("auto app without a volume: tolerations %v, want the two taints", tolerations)
	}
	for _, tol := range tolerations {
		if secs, set := tol.(map[string]any)["tolerationSeconds"]; set {
			t.Errorf("auto app without a volume tolerates a lost node for %v s only: its replacement would start beside the old copy", secs)
		}
	}
	again, _ := LayoutApp(testApp(), nodeA, "node-a", vols, PlacementOptions{})
	if again.Hash() != auto.Hash() || auto.Hash() == "" {
		t.Fatal("the same app hashes differently: every pass would write")
	}
	moved, _ := LayoutApp(testApp(), nodeB, "node-b", vols, PlacementOptions{})
	if moved.Hash() == auto.Hash() {
		t.Fatal("a new DNId does not change the hash: the move would never be applied")
	}

	pinned := testApp()
	pinned.Kind, pinned.Affinity, pinned.NodeSelectLabels = KindVM, AffinityRequired, map[string]string{"gpu": "yes"}
	vmi, err := LayoutApp(pinned, nodeA, "node-a", vols, PlacementOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vmi.GVR != GVRVMI {
		t.Fatalf("pinned VM laid out as %v", vmi.GVR)
	}
	terms, _, _ := unstructured.NestedSlice(vmi.Object.Object, "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
	exprs := terms[0].(map[string]any)["matchExpressions"].([]any)
	if len(exprs) != 2 || exprs[0].(map[string]any)["key"] != corev1.LabelHostname || exprs[1].(map[string]any)["key"] != "gpu" {
		t.Fatalf("pinned VM must require its node and the node-select labels: %v", exprs)
	}
	if _, found, _ := unstructured.NestedSlice(vmi.Object.Object, "spec", "tolerations"); found {
		t.Fatal("pinned apps keep the cluster's default tolerations")
	}
	pinned.Affinity, pinned.EnableVNC, pinned.VNCDisplay = AffinityPreferred, true, 2
	rs, _ := LayoutApp(pinned, nodeA, "node-a", vols, PlacementOptions{MoveAfter: 5 * time.Second})
	if rs.GVR != GVRVMIRS {
		t.Fatalf("auto VM laid out as %v", rs.GVR)
	}
	if port, _, _ := unstructured.NestedString(rs.Object.Object, "spec", "template", "metadata", "annotations", kube.AnnotationVNCPort); port != "5902" {
		t.Fatalf("the VMIs do not carry the VNC port: %q", port)
	}
	if rs.Object.GetAnnotations()[AnnotationDNId] != nodeA {
		t.Fatal("the workload lost its DNId annotation")
	}
	if _, err := LayoutApp(testApp(), nodeA, "node-a", nil, PlacementOptions{}); err == nil || !strings.Contains(err.Error(), "no config") {
		t.Fatalf("missing volume config: %v", err)
	}
}

func nested(t *testing.T, obj *unstructured.Unstructured, path ...string) map[string]any {
	t.Helper()
	m, found, err := unstructured.NestedMap(obj.Object, path...)
	if err != nil || !found {
		t.Fatalf("%v not found: %v", path, err)
	}
	return m
}

func TestMetricsServed(t *testing.T) {
	m := NewMetrics()
	m.Migrations.Inc()
	m.Apps.WithLabelValues(string(KubeRunning)).Set(3)
	srv, addr, err := m.Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"sitecon_migrations_detected_total 1", `sitecon_apps{kube_status="running"} 3`, "sitecon_detection_latency_seconds_bucket", "sitecon_stats_leader 0"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// Two files with one UUID: the first path has it, the later one is an
// error, even when the read itself had no errors at all.
func TestMergeAppFilesDuplicateUUID(t *testing.T) {
	app := testApp()
	vol := VolumeConfig{UUID: app.UUID, Name: "clash", DesignatedNodeID: nodeA}
	read := AppFiles{Apps: map[string]AppConfig{"apps/a.json": app, "apps/b.json": app}, Volumes: map[string]VolumeConfig{"volumes/c.json": vol}}
	set, _ := MergeAppFiles(read, AppFiles{})
	if len(set.Apps) != 1 || len(set.Volumes) != 0 {
		t.Fatalf("one UUID, one config: %d apps, %d volumes", len(set.Apps), len(set.Volumes))
	}
	if !strings.Contains(set.Errors["apps/b.json"], "already defined in apps/a.json") || !strings.Contains(set.Errors["volumes/c.json"], "already defined in apps/a.json") {
		t.Fatalf("errors: %v", set.Errors)
	}
}

// A directory that cannot be read (moved away, a partition remounting, a
// permission) is unknown, not empty: every app and volume last read from it
// stays, removals are held and the directory is reported. Only a file
// removed from a readable directory removes its app.
func TestMergeAppFilesUnreadableDirectoryHolds(t *testing.T) {
	dir := t.TempDir()
	a := testApp()
	vol := VolumeConfig{UUID: volID, Name: "plc-data", DesignatedNodeID: nodeA, Size: "1Gi", ReplicaCount: 3}
	for path, v := range map[string]any{filepath.Join(dir, "apps", "plc.json"): a, filepath.Join(dir, "volumes", "data.json"): vol} {
		data, _ := json.Marshal(v)
		if err := config.WriteFileAtomic(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, good := MergeAppFiles(ReadAppFiles(dir), AppFiles{})
	if len(set.Apps) != 1 || len(set.Volumes) != 1 || len(set.Unknown) != 0 {
		t.Fatalf("first read: %+v", set)
	}
	for _, sub := range []string{"apps", "volumes"} {
		t.Run(sub+" moved away", func(t *testing.T) {
			if err := os.Rename(filepath.Join(dir, sub), filepath.Join(dir, sub+".away")); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := os.Rename(filepath.Join(dir, sub+".away"), filepath.Join(dir, sub)); err != nil {
					t.Error(err)
				}
			}()
			held, _ := MergeAppFiles(ReadAppFiles(dir), good)
			if len(held.Apps) != 1 || len(held.Volumes) != 1 {
				t.Fatalf("a missing %s directory dropped configs: apps %v volumes %v", sub, held.Apps, held.Volumes)
			}
			missing := filepath.Join(dir, sub)
			if !slices.Contains(held.Unknown, missing) || !strings.Contains(held.Errors[missing], "cannot be read") {
				t.Fatalf("the missing directory is not reported unknown: unknown %v errors %v", held.Unknown, held.Errors)
			}
		})
	}
	// The same after a restart with the directory gone: nothing is known, so
	// nothing may be removed.
	if err := os.Rename(filepath.Join(dir, "apps"), filepath.Join(dir, "apps.away")); err != nil {
		t.Fatal(err)
	}
	restarted, _ := MergeAppFiles(ReadAppFiles(dir), AppFiles{})
	if !slices.Contains(restarted.Unknown, filepath.Join(dir, "apps")) {
		t.Fatalf("after a restart with apps/ missing, removals are not held: %v", restarted.Unknown)
	}
	// A file removed from a readable directory is an explicit removal.
	if err := os.Rename(filepath.Join(dir, "apps.away"), filepath.Join(dir, "apps")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "apps", "plc.json")); err != nil {
		t.Fatal(err)
	}
	removed, _ := MergeAppFiles(ReadAppFiles(dir), good)
	if len(removed.Apps) != 0 || len(removed.Unknown) != 0 {
		t.Fatalf("a file removed from a readable directory: apps %v unknown %v", removed.Apps, removed.Unknown)
	}
}

// An on-site override is re-checked where it is acted on: the target must be
// a node of the cluster with the app's labels, and, until the app runs
// there, Ready and not cordoned.
func TestCheckOverride(t *testing.T) {
	app := testApp()
	app.NodeSelectLabels = map[string]string{"site.io/line": "2"}
	o := &PlacementOverride{Node: "node-b", NodeUUID: nodeB, ConfigDNId: nodeA}
	node := func(labels map[string]string, ready corev1.ConditionStatus, cordoned bool) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b", Labels: labels},
			Spec:   corev1.NodeSpec{Unschedulable: cordoned},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	}
	line2 := map[string]string{"site.io/line": "2"}
	for name, tc := range map[string]struct {
		target  *corev1.Node
		running string
		want    string
	}{
		"a good target":                         {target: node(line2, corev1.ConditionTrue, false)},
		"no such node":                          {target: nil, want: "no node of the cluster has UUID " + nodeB},
		"the app's label missing":               {target: node(nil, corev1.ConditionTrue, false), want: "lacks the app's label site.io/line=2"},
		"the app's label with another value":    {target: node(map[string]string{"site.io/line": "3"}, corev1.ConditionTrue, false), want: "lacks the app's label"},
		"not Ready":                             {target: node(line2, corev1.ConditionUnknown, false), want: "not Ready"},
		"cordoned":                              {target: node(line2, corev1.ConditionTrue, true), want: "cordoned"},
		"not Ready, but the app already moved":  {target: node(line2, corev1.ConditionUnknown, false), running: "node-b"},
		"labels are checked even once it moved": {target: node(nil, corev1.ConditionTrue, false), running: "node-b", want: "lacks the app's label"},
	} {
		t.Run(name, func(t *testing.T) {
			got := CheckOverride(app, o, tc.target, tc.running)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("CheckOverride = %q, want %q", got, tc.want)
			}
		})
	}
}
