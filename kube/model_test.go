package kube

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube/kubetest"
)

func TestDeriveNodes(t *testing.T) {
	d := Data{
		Nodes: []*corev1.Node{
			kubetest.Node("node-b", "10.244.244.2", corev1.ConditionUnknown, kubetest.T0.Add(-time.Minute), kubetest.ServerLabels),
			kubetest.Node("node-a", "10.244.244.1", corev1.ConditionTrue, kubetest.T0.Add(-time.Hour), kubetest.ServerLabels),
			kubetest.Node("worker", "10.244.244.5", corev1.ConditionFalse, kubetest.T0, nil),
		},
		Pods: []*corev1.Pod{
			kubetest.Pod("kube-system", "coredns", "node-a", corev1.PodRunning, true),
			kubetest.Pod("kube-system", "done", "node-a", corev1.PodSucceeded, false),
			kubetest.Pod("default", "x", "node-b", corev1.PodRunning, true),
		},
		ConfigMaps: []*corev1.ConfigMap{{
			ObjectMeta: metav1.ObjectMeta{Namespace: AppNamespace, Name: ClusterConfigMapName},
			Data:       map[string]string{ClusterKeyName: "site1", ClusterKeyID: "7f3e2a10", ClusterKeyJoinServerIP: "10.244.244.1", ClusterKeyVIPAddress: "10.244.244.14"},
		}},
		Leases: []*coordinationv1.Lease{{
			ObjectMeta: metav1.ObjectMeta{Namespace: VIPLeaseNamespace, Name: VIPLeaseName},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a"), AcquireTime: &metav1.MicroTime{Time: kubetest.T0.Add(-time.Hour)}},
		}},
	}
	d.Nodes[2].Spec.Unschedulable = true
	st := Derive(d, kubetest.T0)

	if st.NodesReady != 1 || st.NodesTotal != 3 {
		t.Errorf("ready %d/%d, want 1/3", st.NodesReady, st.NodesTotal)
	}
	want := []struct {
		name, status string
		ready, seed  bool
		schedulable  bool
		roles        string
		pods         int
		since        time.Time
	}{
		{"node-a", NodeReady, true, true, true, "[control-plane etcd master]", 1, kubetest.T0.Add(-time.Hour)},
		{"node-b", NodeUnknown, false, false, true, "[control-plane etcd master]", 1, kubetest.T0.Add(-time.Minute)},
		{"worker", NodeNotReady, false, false, false, "[agent]", 0, kubetest.T0},
	}
	for i, w := range want {
		n := st.Nodes[i]
		if n.Name != w.name || n.Status != w.status || n.Ready != w.ready || n.Seed != w.seed ||
			n.Schedulable != w.schedulable || fmt.Sprint(n.Roles) != w.roles || n.Pods != w.pods || !n.Since.Equal(w.since) {
			t.Errorf("node %d = %+v, want %+v", i, n, w)
		}
	}
	if st.Nodes[1].Reason == "" {
		t.Errorf("an Unknown node should carry the condition's message")
	}
	if st.Cluster != (ClusterIdentity{Name: "site1", UUID: "7f3e2a10", SeedAddress: "10.244.244.1", SeedNode: "node-a"}) {
		t.Errorf("cluster = %+v", st.Cluster)
	}
	if st.VIP.Address != "10.244.244.14" || st.VIP.Owner != "node-a" || st.VIP.Since == nil || !st.VIP.Since.Equal(kubetest.T0.Add(-time.Hour)) {
		t.Errorf("vip = %+v", st.VIP)
	}
	if st.Resources.MemoryCapacity != 3*8<<30 || st.Resources.MemoryAllocatable != 3*7<<30 {
		t.Errorf("memory = %+v", st.Resources)
	}
}

func TestDeriveNoClusterConfigMapOrLease(t *testing.T) {
	st := Derive(Data{Nodes: []*corev1.Node{kubetest.Node("n", "1.2.3.4", corev1.ConditionTrue, kubetest.T0, nil)}}, kubetest.T0)
	if st.Cluster != (ClusterIdentity{}) || st.VIP.Owner != "" || st.VIP.Since != nil || st.Nodes[0].Seed {
		t.Errorf("without formation data nothing should be invented: cluster %+v vip %+v", st.Cluster, st.VIP)
	}
}

func TestNamespaceHealth(t *testing.T) {
	terminating := kubetest.Pod("kube-system", "old", "node-a", corev1.PodRunning, true)
	terminating.DeletionTimestamp = &metav1.Time{Time: kubetest.T0}
	pods := []*corev1.Pod{
		kubetest.Pod("kube-system", "a", "node-a", corev1.PodRunning, true),
		kubetest.Pod("kube-system", "b", "node-a", corev1.PodPending, false),
		kubetest.Pod("kube-system", "c", "node-a", corev1.PodFailed, false),
		kubetest.Pod("kube-system", "job", "node-a", corev1.PodSucceeded, false),
		terminating,
		kubetest.Pod("longhorn-system", "m", "node-b", corev1.PodRunning, false),
		kubetest.Pod("elsewhere", "z", "node-a", corev1.PodRunning, true),
	}
	got := namespaceHealth(pods)
	want := map[string]NamespaceHealth{
		"kube-system":     {Name: "kube-system", Ready: 1, NotReady: 2, Failed: 1},
		"longhorn-system": {Name: "longhorn-system", NotReady: 1},
		"kubevirt":        {Name: "kubevirt"},
		"cdi":             {Name: "cdi"},
		AppNamespace:      {Name: AppNamespace},
	}
	if len(got) != len(Namespaces) {
		t.Fatalf("got %d namespaces, want %d", len(got), len(Namespaces))
	}
	for i, ns := range got {
		if ns.Name != Namespaces[i] || ns != want[ns.Name] {
			t.Errorf("%s = %+v, want %+v", Namespaces[i], ns, want[ns.Name])
		}
	}
}

func TestReplicaState(t *testing.T) {
	cases := []struct {
		failedAt, healthyAt string
		state               lhv1beta2.InstanceState
		want                string
	}{
		{"", "2026-11-22T03:00:00Z", lhv1beta2.InstanceStateRunning, ReplicaHealthy},
		{"", "", lhv1beta2.InstanceStateRunning, ReplicaRebuilding},
		{"2026-11-22T03:00:00Z", "2026-11-22T02:00:00Z", lhv1beta2.InstanceStateRunning, ReplicaFailed},
		{"", "2026-11-22T03:00:00Z", lhv1beta2.InstanceStateError, ReplicaFailed},
		{"", "2026-11-22T03:00:00Z", lhv1beta2.InstanceStateStopped, ReplicaStopped},
	}
	for _, c := range cases {
		if got := ReplicaState(kubetest.Replica("r", "v", "n", c.failedAt, c.healthyAt, c.state)); got != c.want {
			t.Errorf("failedAt=%q healthyAt=%q state=%s: got %s, want %s", c.failedAt, c.healthyAt, c.state, got, c.want)
		}
	}
}

func TestDeriveVolumes(t *testing.T) {
	vol := func(name string, robustness lhv1beta2.VolumeRobustness, lastDegraded string) *lhv1beta2.Volume {
		v := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: name}}
		v.Spec.Size, v.Spec.NumberOfReplicas = 10<<30, 3
		v.Status.State, v.Status.Robustness, v.Status.LastDegradedAt = lhv1beta2.VolumeStateAttached, robustness, lastDegraded
		return v
	}
	tracked := kubetest.T0.Add(-10 * time.Minute)
	d := Data{
		HasLonghorn: true,
		Volumes: []*lhv1beta2.Volume{
			vol("vol-tracked", lhv1beta2.VolumeRobustnessHealthy, ""),
			vol("vol-degraded", lhv1beta2.VolumeRobustnessDegraded, "2026-11-15T03:00:00Z"),
			vol("vol-new", lhv1beta2.VolumeRobustnessHealthy, ""),
			vol("vol-blank", "", ""),
		},
		Replicas: []*lhv1beta2.Replica{
			kubetest.Replica("r3", "vol-degraded", "node-c", "", "", lhv1beta2.InstanceStateRunning), // rebuilding
			kubetest.Replica("r1", "vol-degraded", "node-a", "", "x", lhv1beta2.InstanceStateRunning),
			kubetest.Replica("r2", "vol-degraded", "node-b", "2026-11-15T03:00:00Z", "x", lhv1beta2.InstanceStateError),
		},
		Engines: []*lhv1beta2.Engine{{Status: lhv1beta2.EngineStatus{
			CurrentReplicaAddressMap: map[string]string{"r1": "tcp://10.42.0.5:10000", "r3": "tcp://10.42.2.5:10000"},
			RebuildStatus:            map[string]*lhv1beta2.RebuildStatus{"tcp://10.42.2.5:10000": {IsRebuilding: true, Progress: 42}},
		}}},
		Robustness: map[string]RobustnessMark{
			"vol-tracked": {Robustness: lhv1beta2.VolumeRobustnessHealthy, Since: Since{Time: tracked, Exact: true}},
			// The cache moved on before the handler recorded it.
			"vol-new": {Robustness: lhv1beta2.VolumeRobustnessDegraded, Since: Since{Time: tracked, Exact: true}},
		},
	}
	st := Derive(d, kubetest.T0)
	byName := map[string]VolumeStatus{}
	for _, v := range st.Volumes {
		byName[v.Name] = v
	}
	if v := byName["vol-tracked"]; !v.Since.Equal(tracked) || !v.SinceExact {
		t.Errorf("tracked transition lost: %+v", v)
	}
	// Degraded for a week is not degraded for a minute: lastDegradedAt counts.
	if v := byName["vol-degraded"]; !v.Since.Equal(time.Date(2026, 11, 15, 3, 0, 0, 0, time.UTC)) || !v.SinceExact {
		t.Errorf("degraded since = %s exact %v, want lastDegradedAt", v.Since, v.SinceExact)
	}
	if v := byName["vol-new"]; !v.Since.Equal(kubetest.T0) || !v.SinceExact {
		t.Errorf("a transition not yet recorded is happening now: %+v", v)
	}
	untracked := Derive(Data{Volumes: []*lhv1beta2.Volume{vol("vol-x", lhv1beta2.VolumeRobustnessHealthy, "")}}, kubetest.T0).Volumes[0]
	if !untracked.Since.Equal(kubetest.T0) || untracked.SinceExact {
		t.Errorf("an untracked healthy volume's since must be a lower bound: %+v", untracked)
	}
	if v := byName["vol-blank"]; v.Robustness != "unknown" {
		t.Errorf("empty robustness = %q, want unknown", v.Robustness)
	}
	reps := byName["vol-degraded"].Replicas
	if len(reps) != 3 || reps[0].Node != "node-a" || reps[1].State != ReplicaFailed || reps[2].Node != "node-c" {
		t.Errorf("replicas = %+v, want sorted by node with node-b failed", reps)
	}
	// The engine reports the rebuild by replica address.
	if reps[2].State != ReplicaRebuilding || reps[2].Progress != 42 || reps[0].Progress != -1 {
		t.Errorf("rebuild progress = %+v, want node-c rebuilding at 42%% and none for healthy node-a", reps)
	}
	if st.Volumes[0].Name != "vol-blank" || st.Resources.VolumeSize != 4*10<<30 {
		t.Errorf("volumes unsorted or sizes not added: %+v", st.Resources)
	}
}

func TestDeriveApps(t *testing.T) {
	launcher := kubetest.Pod(AppNamespace, "virt-launcher-hmi-abcde", "node-a", corev1.PodRunning, true)
	container := kubetest.Pod(AppNamespace, "plc-gateway-7d9f-x2", "node-b", corev1.PodRunning, true)
	container.Labels = map[string]string{LabelAppName: "plc-gateway", LabelAppUUID: "5b0f"}
	gone := kubetest.Pod(AppNamespace, "plc-gateway-7d9f-old", "node-c", corev1.PodRunning, true)
	gone.Labels = container.Labels
	gone.DeletionTimestamp = &metav1.Time{Time: kubetest.T0}
	vmi := &kvv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: AppNamespace, Name: "hmi-xyz", Labels: map[string]string{LabelAppName: "hmi"}}}
	vmi.Status.Phase, vmi.Status.NodeName = kvv1.Running, "node-a"
	d := Data{
		Pods: []*corev1.Pod{launcher, container, gone, kubetest.Pod("kube-system", "coredns", "node-a", corev1.PodRunning, true)},
		VMIs: []*kvv1.VirtualMachineInstance{vmi},
	}
	apps := Derive(d, kubetest.T0).Apps
	want := []AppStatus{
		{Name: "hmi", Namespace: AppNamespace, Kind: AppKindVM, Node: "node-a", Phase: "Running", Ready: true, Object: "hmi-xyz"},
		// One row per app: the live pod is where it runs, the old one
		// still terminating is a note on it.
		{Name: "plc-gateway", UUID: "5b0f", Namespace: AppNamespace, Kind: AppKindContainer, Node: "node-b", Phase: "Running", Ready: true, Object: "plc-gateway-7d9f-x2",
			Terminating: []AppObject{{Object: "plc-gateway-7d9f-old", Node: "node-c"}}},
	}
	if len(apps) != len(want) {
		t.Fatalf("apps = %+v, want %d (launcher pods are reported through their VMI, a terminating pod on its app)", apps, len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(apps[i], want[i]) {
			t.Errorf("app %d = %+v, want %+v", i, apps[i], want[i])
		}
	}
}

func TestNodeRoles(t *testing.T) {
	cases := []struct {
		labels map[string]string
		want   string
		server bool
	}{
		{kubetest.ServerLabels, "[control-plane etcd master]", true},
		{map[string]string{LabelEdgeworker: "true"}, "[edgeworker]", false},
		{map[string]string{"node-role.kubernetes.io/master": "true"}, "[master]", true},
		{nil, "[agent]", false},
	}
	for _, c := range cases {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: c.labels}}
		if got := fmt.Sprint(NodeRoles(n)); got != c.want || IsServer(n) != c.server {
			t.Errorf("labels %v: roles %s server %v, want %s %v", c.labels, got, IsServer(n), c.want, c.server)
		}
	}
}

func BenchmarkDerive(b *testing.B) {
	d := Data{HasLonghorn: true}
	for i := range 3 {
		d.Nodes = append(d.Nodes, kubetest.Node(fmt.Sprintf("node-%d", i), fmt.Sprintf("10.0.0.%d", i), corev1.ConditionTrue, kubetest.T0, kubetest.ServerLabels))
	}
	for i := range 1000 {
		d.Pods = append(d.Pods, kubetest.Pod(Namespaces[i%len(Namespaces)], fmt.Sprintf("p%d", i), fmt.Sprintf("node-%d", i%3), corev1.PodRunning, i%7 != 0))
	}
	for i := range 200 {
		v := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("vol-%d", i)}}
		v.Status.Robustness = lhv1beta2.VolumeRobustnessHealthy
		d.Volumes = append(d.Volumes, v)
		for j := range 3 {
			d.Replicas = append(d.Replicas, kubetest.Replica(fmt.Sprintf("r-%d-%d", i, j), v.Name, fmt.Sprintf("node-%d", j), "", "x", lhv1beta2.InstanceStateRunning))
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		Derive(d, kubetest.T0)
	}
}

func TestKubeletSkew(t *testing.T) {
	cases := []struct {
		kubelet, server string
		problem         string
	}{
		{"v1.34.4+k3s1", "v1.34.4+k3s1", ""},
		{"v1.31.2+k3s1", "v1.34.4+k3s1", ""}, // three behind: allowed
		{"v1.30.9", "v1.34.4+k3s1", "4 minor versions behind"},
		{"v1.35.0", "v1.34.4", "newer than the API server"},
		{"kwok-v0.8.0", "v1.34.4", ""}, // unknown: not a finding
		{"v1.34.0", "", ""},
	}
	for _, c := range cases {
		got := KubeletSkew(c.kubelet, c.server)
		if (c.problem == "") != (got == "") || !strings.Contains(got, c.problem) {
			t.Errorf("KubeletSkew(%s, %s) = %q, want %q", c.kubelet, c.server, got, c.problem)
		}
	}
	// The node fixture's kubelet is v1.34.4+k3s1: newer than a v1.30 server.
	if skew := Derive(Data{ServerVersion: "v1.30.0", Nodes: []*corev1.Node{kubetest.Node("edge", "x", corev1.ConditionTrue, kubetest.T0, nil)}}, kubetest.T0).Nodes[0].VersionSkew; skew == "" {
		t.Errorf("a v1.34 kubelet under a v1.30 API server: want a skew problem, got none")
	}
	if skew := Derive(Data{ServerVersion: "v1.34.4+k3s1", Nodes: []*corev1.Node{kubetest.Node("edge", "x", corev1.ConditionTrue, kubetest.T0, nil)}}, kubetest.T0).Nodes[0].VersionSkew; skew != "" {
		t.Errorf("same version: %q", skew)
	}
}

// An app on a node that is not Ready is not known to run, whatever its
// pod last said (issue 22): one rule, in the model, for every reader.
func TestDeriveAppOnLostNode(t *testing.T) {
	onLost := kubetest.Pod(AppNamespace, "plc-1", "node-b", corev1.PodRunning, false)
	onLost.Labels = map[string]string{LabelAppName: "plc"}
	leaving := kubetest.Pod(AppNamespace, "hmi-old", "node-b", corev1.PodRunning, false)
	leaving.Labels = map[string]string{LabelAppName: "hmi"}
	leaving.DeletionTimestamp = &metav1.Time{Time: kubetest.T0}
	live := kubetest.Pod(AppNamespace, "hmi-new", "node-a", corev1.PodRunning, true)
	live.Labels = leaving.Labels
	notReady := kubetest.Pod(AppNamespace, "historian-1", "node-c", corev1.PodRunning, false)
	notReady.Labels = map[string]string{LabelAppName: "historian"}
	d := Data{
		Nodes: []*corev1.Node{kubetest.Node("node-a", "10.0.0.1", corev1.ConditionTrue, kubetest.T0, nil), kubetest.Node("node-b", "10.0.0.2", corev1.ConditionUnknown, kubetest.T0, nil),
			kubetest.Node("node-c", "10.0.0.3", corev1.ConditionFalse, kubetest.T0, nil)},
		Pods: []*corev1.Pod{onLost, leaving, live, notReady},
	}
	got := map[string]AppStatus{}
	for _, a := range Derive(d, kubetest.T0).Apps {
		got[a.Name] = a
	}
	if a := got["plc"]; !a.NodeLost || a.Ready || a.Phase != AppPhaseUnknown || a.ReportedPhase != "Running" || a.PhaseText() != "Unknown (node-b lost)" {
		t.Errorf("app on Unknown node-b = %+v (%q), want Unknown (node-b lost)", a, a.PhaseText())
	}
	if a := got["historian"]; !a.NodeLost || a.PhaseText() != "Unknown (node-c lost)" {
		t.Errorf("app on NotReady node-c = %+v, want Unknown (node-c lost)", a)
	}
	if a := got["hmi"]; a.NodeLost || !a.Ready || a.Node != "node-a" || len(a.Terminating) != 1 {
		t.Errorf("app replaced on node-a = %+v, want running there with the old pod on node-b a note", a)
	}
}

// Staleness is the model's: set from the snapshot's health, with the
// data's age from the last contact.
func TestDeriveStale(t *testing.T) {
	for _, c := range []struct {
		name   string
		health Health
		want   *Staleness
	}{
		{"live", Health{Connected: true, Since: kubetest.T0, LastContact: kubetest.T0}, nil},
		{"never asked", Health{}, nil},
		{"down after contact", Health{Since: kubetest.T0, LastContact: kubetest.T0.Add(-10 * time.Second), LastError: "refused"},
			&Staleness{Since: kubetest.T0, AsOf: kubetest.T0.Add(-10 * time.Second), Reason: "refused"}},
		{"never reached", Health{Since: kubetest.T0, LastError: "refused"}, &Staleness{Since: kubetest.T0, AsOf: kubetest.T0, Reason: "refused"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Derive(Data{Health: c.health}, kubetest.T0.Add(time.Minute)).Stale; !reflect.DeepEqual(got, c.want) {
				t.Errorf("Stale = %+v, want %+v", got, c.want)
			}
		})
	}
}

// A node's detail (its conditions, taints, since when it is cordoned, its
// pods leaving) and the scheduler's reason an app's pod, or a VM's
// launcher pod, is not placed are in the status: the console's details
// and alerts read them there.
func TestDeriveNodeDetailAndUnscheduled(t *testing.T) {
	cordoned := kubetest.Node("node-c", "10.244.244.3", corev1.ConditionTrue, kubetest.T0.Add(-time.Hour), kubetest.ServerLabels)
	cordoned.Spec.Unschedulable = true
	cordoned.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule, TimeAdded: &metav1.Time{Time: kubetest.T0.Add(-2 * time.Hour)}}}
	cordoned.Status.Conditions = append(cordoned.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"})
	leaving := kubetest.Pod("default", "web", "node-c", corev1.PodRunning, true)
	leaving.DeletionTimestamp = &metav1.Time{Time: kubetest.T0}
	notPlaced := corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
		Message: "0/3 nodes are available: 3 kubetest.Node(s) didn't match Pod's node affinity/selector.", LastTransitionTime: metav1.NewTime(kubetest.T0.Add(-time.Minute))}
	container := kubetest.Pod(AppNamespace, "historian-0", "", corev1.PodPending, false)
	container.Labels = map[string]string{LabelAppName: "historian"}
	container.Status.Conditions = append(container.Status.Conditions, notPlaced)
	vmi := &kvv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: AppNamespace, Name: "hmi", UID: "vmi-uid-1", Labels: map[string]string{LabelAppName: "hmi"}}}
	vmi.Status.Phase = kvv1.Scheduling
	launcher := kubetest.Pod(AppNamespace, "virt-launcher-hmi-abcde", "", corev1.PodPending, false)
	launcher.Labels = map[string]string{labelVirtCreatedBy: "vmi-uid-1"}
	launcher.Status.Conditions = append(launcher.Status.Conditions, notPlaced)
	st := Derive(Data{Nodes: []*corev1.Node{cordoned}, Pods: []*corev1.Pod{leaving, container, launcher}, VMIs: []*kvv1.VirtualMachineInstance{vmi}}, kubetest.T0)

	n := st.Nodes[0]
	if n.CordonedSince == nil || !n.CordonedSince.Equal(kubetest.T0.Add(-2*time.Hour)) || n.PodsLeaving != 1 {
		t.Errorf("cordoned since %v, pods leaving %d; want 2h ago and 1", n.CordonedSince, n.PodsLeaving)
	}
	if fmt.Sprint(n.Taints) != "[node.kubernetes.io/unschedulable:NoSchedule]" {
		t.Errorf("taints = %v", n.Taints)
	}
	if len(n.Conditions) != 2 || n.Conditions[1] != (Condition{Type: "DiskPressure", Status: "False", Reason: "KubeletHasNoDiskPressure"}) {
		t.Errorf("conditions = %+v", n.Conditions)
	}
	want := Condition{Type: "PodScheduled", Status: "False", Reason: "Unschedulable", Message: notPlaced.Message, Since: kubetest.T0.Add(-time.Minute)}
	if len(st.Apps) != 2 {
		t.Fatalf("apps = %+v", st.Apps)
	}
	for _, a := range st.Apps {
		if a.Unscheduled == nil || *a.Unscheduled != want {
			t.Errorf("app %s: unscheduled = %+v, want %+v", a.Name, a.Unscheduled, want)
		}
	}
}
