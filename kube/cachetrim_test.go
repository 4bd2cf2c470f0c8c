package kube_test

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// contentTypes records, per request path, the content type each answer
// came in.
type contentTypes struct {
	next http.RoundTripper
	mu   sync.Mutex
	got  map[string][]string
}

func (c *contentTypes) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err == nil {
		c.mu.Lock()
		c.got[req.URL.Path] = append(c.got[req.URL.Path], resp.Header.Get("Content-Type"))
		c.mu.Unlock()
	}
	return resp, err
}

func (c *contentTypes) of(path string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got[path]...)
}

// protobufContentType is how the API server encodes the built-in types
// most cheaply.
const protobufContentType = "application/vnd.kubernetes.protobuf"

// The built-in types are read as protobuf (cheaper to decode than their
// JSON); the Longhorn and KubeVirt CRDs, which the API server serves only
// as JSON, are still read and written as JSON. client-go's generated
// clientsets (v0.37 here: gentype.PrefersProtobuf) ask for protobuf by
// themselves while the config names no content type: this guards that
// default, which a content type set on Clients.Config would undo.
func TestClientsReadBuiltinsAsProtobufAndCRDsAsJSON(t *testing.T) {
	site := sitebox.Shared(t)
	rec := &contentTypes{got: map[string][]string{}}
	cfg := rest.CopyConfig(site.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec })
	snap := sitebox.StartSnapshot(t, cfg)

	for _, path := range []string{"/api/v1/pods", "/api/v1/nodes"} {
		got := rec.of(path)
		if len(got) == 0 || !strings.HasPrefix(got[0], protobufContentType) {
			t.Errorf("%s answered %q, want %s", path, got, protobufContentType)
		}
	}
	for _, path := range []string{"/apis/longhorn.io/v1beta2/namespaces/" + kube.LonghornNamespace + "/volumes", "/apis/kubevirt.io/v1/virtualmachineinstances"} {
		got := rec.of(path)
		if len(got) == 0 || !strings.HasPrefix(got[0], "application/json") {
			t.Errorf("%s answered %q, want application/json", path, got)
		}
	}

	// Writes: a built-in object sent as protobuf, a CRD object as JSON.
	ctx := t.Context()
	c := snap.Clients()
	cm, err := c.Core.CoreV1().ConfigMaps(kube.AppNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "proto-write"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a ConfigMap through the core client: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Core.CoreV1().ConfigMaps(kube.AppNamespace).Delete(context.Background(), "proto-write", metav1.DeleteOptions{})
	})
	if cm.Data["k"] != "v" {
		t.Errorf("the ConfigMap came back as %v", cm.Data)
	}
	vol, err := c.Longhorn.LonghornV1beta2().Volumes(kube.LonghornNamespace).Create(ctx, sitebox.LonghornVolume("proto-json", 1<<30, 3), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a Longhorn volume through the Longhorn client: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Longhorn.LonghornV1beta2().Volumes(kube.LonghornNamespace).Delete(context.Background(), "proto-json", metav1.DeleteOptions{})
	})
	if vol.Spec.NumberOfReplicas != 3 {
		t.Errorf("the volume came back with %d replicas", vol.Spec.NumberOfReplicas)
	}
	// Clients.Config, which dynamic and websocket clients start from,
	// stays JSON.
	if c.Config.ContentType != "" {
		t.Errorf("Clients.Config names content type %q: the core clientset then no longer prefers protobuf by itself, or a dynamic client made from it sends CRDs in it", c.Config.ContentType)
	}
}

// No object in the snapshot's caches carries managedFields, though the API
// server keeps them on every object; and what the console derives from the
// trimmed cache is what it derives from the objects as the API server
// serves them.
func TestSnapshotCacheDropsManagedFieldsAndKeepsWhatIsShown(t *testing.T) {
	site := sitebox.Shared(t)
	site.Volume(t, "vol-trim", sitebox.VolumeOptions{Replicas: 3, UsedOn: "node-b"})
	snap := sitebox.StartSnapshot(t, site.Config)
	clients := site.Clients(t)
	ctx := t.Context()

	full, err := clients.Core.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	withFields := 0
	for _, p := range full.Items {
		if len(p.ManagedFields) > 0 {
			withFields++
		}
	}
	if withFields == 0 {
		t.Fatalf("none of the API server's %d pods has managedFields: the test proves nothing", len(full.Items))
	}

	d := snap.Data()
	if len(d.Pods) == 0 || len(d.Volumes) == 0 || len(d.Replicas) == 0 || len(d.Nodes) == 0 {
		t.Fatalf("the snapshot holds %d pods, %d volumes, %d replicas, %d nodes", len(d.Pods), len(d.Volumes), len(d.Replicas), len(d.Nodes))
	}
	check := func(kind, name string, m metav1.ObjectMeta) {
		if len(m.ManagedFields) > 0 {
			t.Errorf("%s %s in the cache keeps %d managedFields entries", kind, name, len(m.ManagedFields))
		}
	}
	for _, o := range d.Nodes {
		check("node", o.Name, o.ObjectMeta)
		if len(o.Status.Images) > 0 {
			t.Errorf("node %s in the cache keeps its %d images", o.Name, len(o.Status.Images))
		}
	}
	for _, o := range d.Pods {
		check("pod", o.Namespace+"/"+o.Name, o.ObjectMeta)
	}
	for _, o := range d.Leases {
		check("lease", o.Namespace+"/"+o.Name, o.ObjectMeta)
	}
	for _, o := range d.Events {
		check("event", o.Namespace+"/"+o.Name, o.ObjectMeta)
	}
	for _, o := range d.ConfigMaps {
		check("configmap", o.Name, o.ObjectMeta)
	}
	// Longhorn's objects carry labels, owner references and finalizers
	// that repeat their spec (the volume, the node) and that no reader
	// reads from a cache: the cache keeps none of them.
	checkLonghorn := func(kind, name string, m metav1.ObjectMeta) {
		check(kind, name, m)
		if len(m.Labels)+len(m.Annotations)+len(m.OwnerReferences)+len(m.Finalizers) > 0 {
			t.Errorf("%s %s in the cache keeps labels %v, annotations %v, owners %v, finalizers %v", kind, name, m.Labels, m.Annotations, m.OwnerReferences, m.Finalizers)
		}
	}
	for _, o := range d.Volumes {
		checkLonghorn("volume", o.Name, o.ObjectMeta)
	}
	for _, o := range d.Replicas {
		checkLonghorn("replica", o.Name, o.ObjectMeta)
	}
	for _, o := range d.Engines {
		checkLonghorn("engine", o.Name, o.ObjectMeta)
	}
	served, err := clients.Longhorn.LonghornV1beta2().Replicas(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(served.Items, func(r lhv1beta2.Replica) bool { return len(r.Labels) > 0 && len(r.OwnerReferences) > 0 }) {
		t.Fatalf("none of the API server's %d replicas has labels and an owner: the test proves nothing of them", len(served.Items))
	}
	servedEngines, err := clients.Longhorn.LonghornV1beta2().Engines(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(servedEngines.Items, func(e lhv1beta2.Engine) bool { return len(e.Labels) > 0 && len(e.OwnerReferences) > 0 }) {
		t.Fatalf("none of the API server's %d engines has labels and an owner: the test proves nothing of them", len(servedEngines.Items))
	}
	for _, o := range d.VMIs {
		check("vmi", o.Name, o.ObjectMeta)
	}

	// The same data as the API server serves it, whole: every figure the
	// console shows (the status, the pod rows) must come out the same.
	// Heartbeats move the site on; compare until one read of each agrees.
	var lastDiff string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cached := snap.Data()
		whole, err := wholeData(ctx, clients, cached)
		if err != nil {
			return false, err
		}
		now := time.Now()
		a, b := kube.Derive(cached, now), kube.Derive(whole, now)
		if !reflect.DeepEqual(a, b) {
			lastDiff = "status"
			return false, nil
		}
		if !reflect.DeepEqual(kube.PodRows(cached.Pods), kube.PodRows(whole.Pods)) {
			lastDiff = "pod rows"
			return false, nil
		}
		if !reflect.DeepEqual(kube.EventRows(cached.Events, 0), kube.EventRows(whole.Events, 0)) {
			lastDiff = "event rows"
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the trimmed cache and the API server's objects never gave the same %s: %v", lastDiff, err)
	}
}

// wholeData reads every kind the snapshot holds straight from the API
// server, untrimmed, in the snapshot's order, with the snapshot's own
// bookkeeping (robustness marks, app moves, health).
func wholeData(ctx context.Context, c *kube.Clients, like kube.Data) (kube.Data, error) {
	d := kube.Data{Robustness: like.Robustness, HasLonghorn: like.HasLonghorn, HasKubeVirt: like.HasKubeVirt,
		ServerVersion: like.ServerVersion, AppMoves: like.AppMoves, Health: like.Health}
	core := c.Core.CoreV1()
	nodes, err := core.Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	pods, err := core.Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	events, err := core.Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	leases, err := c.Core.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.namespace!=" + corev1.NamespaceNodeLease})
	if err != nil {
		return d, err
	}
	cms, err := core.ConfigMaps(kube.AppNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	lh := c.Longhorn.LonghornV1beta2()
	vols, err := lh.Volumes(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	reps, err := lh.Replicas(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	engs, err := lh.Engines(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	vmis, err := c.KubeVirt.KubevirtV1().VirtualMachineInstances("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	// Same order as the snapshot's (a lister's order is its map's).
	byKey := func(ns, name string) string { return ns + "/" + name }
	order := map[string]int{}
	for i, o := range like.Nodes {
		order["node "+o.Name] = i
	}
	for i, o := range like.Pods {
		order["pod "+byKey(o.Namespace, o.Name)] = i
	}
	for i, o := range like.Events {
		order["event "+byKey(o.Namespace, o.Name)] = i
	}
	for i, o := range like.Leases {
		order["lease "+byKey(o.Namespace, o.Name)] = i
	}
	for i, o := range like.ConfigMaps {
		order["cm "+o.Name] = i
	}
	for i, o := range like.Volumes {
		order["vol "+o.Name] = i
	}
	for i, o := range like.Replicas {
		order["rep "+o.Name] = i
	}
	for i, o := range like.Engines {
		order["eng "+o.Name] = i
	}
	for i, o := range like.VMIs {
		order["vmi "+byKey(o.Namespace, o.Name)] = i
	}
	place := func(kind, key string, n int) int {
		if i, ok := order[kind+" "+key]; ok && i < n {
			return i
		}
		return -1
	}
	d.Nodes = placed(nodes.Items, len(like.Nodes), func(o *corev1.Node) int { return place("node", o.Name, len(like.Nodes)) })
	d.Pods = placed(pods.Items, len(like.Pods), func(o *corev1.Pod) int { return place("pod", byKey(o.Namespace, o.Name), len(like.Pods)) })
	d.Events = placed(events.Items, len(like.Events), func(o *corev1.Event) int { return place("event", byKey(o.Namespace, o.Name), len(like.Events)) })
	d.Leases = placed(leases.Items, len(like.Leases), func(o *coordinationv1.Lease) int { return place("lease", byKey(o.Namespace, o.Name), len(like.Leases)) })
	d.ConfigMaps = placed(cms.Items, len(like.ConfigMaps), func(o *corev1.ConfigMap) int { return place("cm", o.Name, len(like.ConfigMaps)) })
	d.Volumes = placed(vols.Items, len(like.Volumes), func(o *lhv1beta2.Volume) int { return place("vol", o.Name, len(like.Volumes)) })
	d.Replicas = placed(reps.Items, len(like.Replicas), func(o *lhv1beta2.Replica) int { return place("rep", o.Name, len(like.Replicas)) })
	d.Engines = placed(engs.Items, len(like.Engines), func(o *lhv1beta2.Engine) int { return place("eng", o.Name, len(like.Engines)) })
	d.VMIs = placed(vmis.Items, len(like.VMIs), func(o *kvv1.VirtualMachineInstance) int {
		return place("vmi", byKey(o.Namespace, o.Name), len(like.VMIs))
	})
	return d, nil
}

// placed puts items at the positions at returns (the snapshot's order); an
// item the snapshot does not hold, or a count that differs, leaves a nil
// hole or a longer list, and the comparison fails until both agree.
func placed[T any](items []T, n int, at func(*T) int) []*T {
	out := make([]*T, n)
	var extra []*T
	for i := range items {
		o := &items[i]
		if j := at(o); j >= 0 && out[j] == nil {
			out[j] = o
		} else {
			extra = append(extra, o)
		}
	}
	return append(out, extra...)
}

// richPod is a pod as a real workload's: containers with env, mounts,
// probes and requests, a larger init container, volumes, tolerations,
// annotations, every condition and container status.
func richPod(ns, name, node string, phase corev1.PodPhase, ready bool) *corev1.Pod {
	req := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
	}
	readyStatus := corev1.ConditionFalse
	if ready {
		readyStatus = corev1.ConditionTrue
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name), ResourceVersion: "7",
			Labels:        map[string]string{"app": name},
			Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 2048)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}},
		Spec: corev1.PodSpec{NodeName: node,
			InitContainers: []corev1.Container{{Name: "migrate", Image: "registry.local/migrate:1", Resources: req("2", "1Gi")}},
			Containers: []corev1.Container{
				{Name: "web", Image: "registry.local/web:1", Resources: req("250m", "256Mi"),
					Env:          []corev1.EnvVar{{Name: "MODE", Value: "production"}, {Name: "LEVEL", Value: "info"}},
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}, ReadinessProbe: probe, LivenessProbe: probe},
				{Name: "sidecar", Image: "registry.local/sidecar:1", Resources: req("100m", "64Mi")},
			},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name + "-data"}}}},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
		Status: corev1.PodStatus{Phase: phase, HostIP: "127.0.0.2", PodIP: "10.42.1.9",
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
				{Type: corev1.ContainersReady, Status: readyStatus},
				{Type: corev1.PodReady, Status: readyStatus},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: ready, RestartCount: 3, Image: "registry.local/web:1"}},
		},
	}
}

// A pod outside the namespaces sitecon shows is cached only as what it
// is counted by, and everything derived from the cache comes out as it
// does from the whole pods: the node figures (pods, pods leaving, CPU
// and memory requested with the init container's larger request), the
// namespaces' health, the apps. Pods in the shown namespaces stay whole.
func TestCountedPodsDeriveWhatWholePodsDo(t *testing.T) {
	node := func(name string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}}}
	}
	leaving := richPod("shop-floor", "leaving", "node-b", corev1.PodRunning, true)
	leaving.DeletionTimestamp = &metav1.Time{Time: time.Unix(1_800_000_000, 0)}
	app := richPod(kube.AppNamespace, "plc-gateway", "node-a", corev1.PodRunning, true)
	app.Labels[kube.LabelAppName] = "plc-gateway"
	whole := []*corev1.Pod{
		richPod("shop-floor", "web-1", "node-a", corev1.PodRunning, true),
		richPod("shop-floor", "web-2", "node-b", corev1.PodRunning, false),
		richPod("shop-floor", "batch", "node-a", corev1.PodSucceeded, false),
		richPod("shop-floor", "pending", "", corev1.PodPending, false),
		leaving,
		richPod("kube-system", "coredns", "node-a", corev1.PodRunning, true),
		richPod("longhorn-system", "manager", "node-b", corev1.PodRunning, false),
		app,
	}
	// As the snapshot gives them: the shown namespaces' pods listed, the
	// others counted per node from what the cache keeps of them.
	var shown []*corev1.Pod
	counted := map[string]kube.NodePodCount{}
	for _, p := range whole {
		obj, err := kube.TrimForCache(p.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		if !kube.ShownNamespace(p.Namespace) {
			c, ok := obj.(*kube.CountedPod)
			if !ok {
				t.Fatalf("%s/%s is cached as a %T, not as what it is counted by", p.Namespace, p.Name, obj)
			}
			if c.Name != p.Name || c.Namespace != p.Namespace || c.ResourceVersion != p.ResourceVersion {
				t.Errorf("%s/%s is cached under another key or version: %+v", p.Namespace, p.Name, c)
			}
			if key, err := cache.MetaNamespaceKeyFunc(c); err != nil || key != p.Namespace+"/"+p.Name {
				t.Errorf("an informer keys the counted %s/%s as %q (%v)", p.Namespace, p.Name, key, err)
			}
			if c.Node != "" {
				n := counted[c.Node]
				n.Pods, n.Leaving, n.CPU, n.Memory = n.Pods+c.Count.Pods, n.Leaving+c.Count.Leaving, n.CPU+c.Count.CPU, n.Memory+c.Count.Memory
				counted[c.Node] = n
			}
			continue
		}
		c := obj.(*corev1.Pod)
		if len(c.Spec.Volumes) != 1 || len(c.Annotations) != 1 || c.Spec.Containers[0].Env == nil ||
			len(c.Status.ContainerStatuses) != 1 || len(c.ManagedFields) > 0 {
			t.Errorf("%s/%s, in a shown namespace, is not cached whole (less its managedFields): %+v", p.Namespace, p.Name, c)
		}
		shown = append(shown, c)
	}
	nodes := []*corev1.Node{node("node-a"), node("node-b")}
	now := time.Unix(1_800_000_100, 0)
	a := kube.Derive(kube.Data{Nodes: nodes, Pods: whole}, now)
	b := kube.Derive(kube.Data{Nodes: nodes, Pods: shown, CountedPods: counted}, now)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("the status derived from the cached pods differs from the whole pods':\nwhole  %+v\ncached %+v", a.Nodes, b.Nodes)
	}
	// Each pod requests 2 CPU (its init container's request, over its
	// containers' 350m); node-a's finished batch pod counts for nothing.
	for i, want := range []struct {
		pods, leaving int
		cpu           int64
	}{{3, 0, 6000}, {3, 1, 6000}} {
		if n := b.Nodes[i]; n.Pods != want.pods || n.PodsLeaving != want.leaving || n.CPURequested != want.cpu {
			t.Errorf("%s from the cache: %d pods, %d leaving, %dm CPU requested; want %d, %d, %dm",
				n.Name, n.Pods, n.PodsLeaving, n.CPURequested, want.pods, want.leaving, want.cpu)
		}
	}
	if !reflect.DeepEqual(kube.PodRows(whole), kube.PodRows(shown)) {
		t.Errorf("the pod rows from the shown pods differ from the whole pods'")
	}
}

// On a live site: a pod outside the shown namespaces enters the cache as
// what it is counted by, a pod in one whole; a write to the counted pod
// that changes nothing it is counted by (its annotations, its containers'
// states) wakes no reader, one that does (its labels, its deletion) does.
func TestSnapshotCountsPodsOutsideTheShownNamespaces(t *testing.T) {
	site := sitebox.Shared(t)
	clients := site.Clients(t)
	ctx := t.Context()
	core := clients.Core.CoreV1()
	if _, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop-floor"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = core.Namespaces().Delete(context.Background(), "shop-floor", metav1.DeleteOptions{}) })
	create := func(ns, name string) {
		p := richPod(ns, name, "node-b", "", true)
		p.UID, p.ResourceVersion, p.ManagedFields, p.Status = "", "", nil, corev1.PodStatus{}
		p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
		// No claim: sitebox holds a pod whose claim does not exist.
		p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		if _, err := core.Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = core.Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	create("shop-floor", "counted-web")
	create("kube-system", "whole-web")
	// Without Events: the site's components write them all the time, each
	// one a wake-up of its own.
	snap, err := kube.NewSnapshot(site.Config, nil, kube.WithoutEvents())
	if err != nil {
		t.Fatal(err)
	}
	snap.Start(ctx)
	// The snapshot lists no pod outside the shown namespaces: what its
	// informer caches of one is read through an informer with the same
	// transform, on the same watch of the same API server.
	factory := informers.NewSharedInformerFactoryWithOptions(clients.Core, 0, informers.WithTransform(kube.TrimForCache))
	pods := factory.Core().V1().Pods().Informer()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	// cachedPod is the informer's object for ns/name once cond holds of it:
	// a *corev1.Pod, or a *kube.CountedPod.
	cachedPod := func(ns, name string, cond func(any) bool) any {
		t.Helper()
		var got any
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			obj, exists, err := pods.GetIndexer().GetByKey(ns + "/" + name)
			if err == nil && exists && cond(obj) {
				got = obj
				return true, nil
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("no informer of the API server held %s/%s as wanted", ns, name)
		}
		return got
	}
	running := func(obj any) bool { p, ok := obj.(*corev1.Pod); return ok && p.Status.Phase == corev1.PodRunning }
	placed := func(obj any) bool { p, ok := obj.(*kube.CountedPod); return ok && p.Node != "" }
	counted := cachedPod("shop-floor", "counted-web", placed).(*kube.CountedPod)
	// Its init container's request (2 CPU, 1 GiB) is over its two
	// containers' (350m, 320 MiB).
	if want := (kube.NodePodCount{Pods: 1, CPU: 2000, Memory: 1 << 30}); counted.Node != "node-b" || counted.Count != want {
		t.Errorf("shop-floor/counted-web is cached as counting %+v on %q, want %+v on node-b", counted.Count, counted.Node, want)
	}
	whole := cachedPod("kube-system", "whole-web", running).(*corev1.Pod)
	if err := snap.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(snap.Pods(), func(p *corev1.Pod) bool { return p.Namespace == "kube-system" && p.Name == "whole-web" }) {
		t.Errorf("the snapshot does not list kube-system/whole-web")
	}
	if len(whole.Annotations) == 0 || !slices.ContainsFunc(whole.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "data" }) ||
		whole.Spec.Containers[0].Env == nil || len(whole.Status.ContainerStatuses) != 2 {
		t.Errorf("kube-system/whole-web is not cached whole: %d annotations, volumes %v, env %v, %d container statuses",
			len(whole.Annotations), whole.Spec.Volumes, whole.Spec.Containers[0].Env, len(whole.Status.ContainerStatuses))
	}

	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	select { // what came before this point is not the test's
	case <-changes:
	default:
	}
	patch := func(body string) string {
		t.Helper()
		p, err := core.Pods("shop-floor").Patch(ctx, "counted-web", types.MergePatchType, []byte(body), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.ResourceVersion
	}
	atLeast := func(rv string) func(any) bool {
		want, _ := strconv.ParseUint(rv, 10, 64)
		return func(obj any) bool {
			p, err := meta.Accessor(obj)
			if err != nil {
				return false
			}
			got, err := strconv.ParseUint(p.GetResourceVersion(), 10, 64)
			return err == nil && got >= want
		}
	}
	// The site's other objects (node heartbeats, the kube-system pod)
	// wake readers too, now and then, and more often while a fresh site
	// settles (five tries were all woken in two runs of twenty): a write
	// of the pod's annotations and labels must be quiet for half a second
	// after an informer of the same API server holds it, in at least one
	// of twenty tries (each of which wakes them if such writes wake
	// readers).
	quiet := false
	for try := 0; try < 20 && !quiet; try++ {
		select {
		case <-changes:
		default:
		}
		cachedPod("shop-floor", "counted-web", atLeast(patch(fmt.Sprintf(`{"metadata":{"annotations":{"shop-floor/shift":"night-%d"},"labels":{"shift":"night-%d"}}}`, try, try))))
		select {
		case <-changes:
		case <-time.After(500 * time.Millisecond):
			quiet = true
		}
	}
	if !quiet {
		t.Errorf("every write of a counted pod's annotations and labels woke the snapshot's readers")
	}

	// The snapshot lists the shown namespaces' pods and counts the rest:
	// every node figure comes out as counting the API server's pods gives,
	// while the pod is there and once it is gone.
	for _, p := range snap.Data().Pods {
		if p.Namespace == "shop-floor" {
			t.Errorf("the snapshot lists %s/%s, outside the shown namespaces", p.Namespace, p.Name)
		}
	}
	sameFigures := func(step string, cond func(kube.NodeStatus) bool) {
		t.Helper()
		var cached, served []kube.NodeStatus
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			d := snap.Data()
			whole, err := wholeData(ctx, clients, d)
			if err != nil {
				return false, nil
			}
			now := time.Now()
			cached, served = kube.Derive(d, now).Nodes, kube.Derive(whole, now).Nodes
			i := slices.IndexFunc(cached, func(n kube.NodeStatus) bool { return n.Name == "node-b" })
			return reflect.DeepEqual(cached, served) && i >= 0 && cond(cached[i]), nil
		})
		if err != nil {
			t.Fatalf("%s: the node figures from the snapshot never matched the API server's pods:\ncached %+v\nserved %+v", step, cached, served)
		}
	}
	var before kube.NodeStatus
	sameFigures("with shop-floor/counted-web on node-b", func(n kube.NodeStatus) bool { before = n; return true })
	// Terminating, held by a finalizer: counted as leaving its node.
	patch(`{"metadata":{"finalizers":["sitecon.test/hold"]}}`)
	t.Cleanup(func() {
		_, _ = core.Pods("shop-floor").Patch(context.Background(), "counted-web", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if err := core.Pods("shop-floor").Delete(ctx, "counted-web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sameFigures("with shop-floor/counted-web terminating", func(n kube.NodeStatus) bool {
		return n.Pods == before.Pods && n.PodsLeaving == before.PodsLeaving+1
	})
	patch(`{"metadata":{"finalizers":null}}`)
	sameFigures("with shop-floor/counted-web deleted", func(n kube.NodeStatus) bool {
		// Its init container's 2 CPU.
		return n.Pods == before.Pods-1 && n.CPURequested == before.CPURequested-2000
	})
}

// With CountedPodsWakeNobody (the agent's snapshot), a pod outside the
// shown namespaces is counted as it comes, runs and goes, and wakes no
// reader; a shown namespace's pod still wakes them.
func TestCountedPodsWakeNobodyWhenAsked(t *testing.T) {
	site := sitebox.Shared(t)
	clients := site.Clients(t)
	ctx := t.Context()
	core := clients.Core.CoreV1()
	const ns = "batch-floor"
	if _, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = core.Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	snap, err := kube.NewSnapshot(site.Config, nil, kube.WithoutEvents(), kube.CountedPodsWakeNobody())
	if err != nil {
		t.Fatal(err)
	}
	snap.Start(ctx)
	if err := snap.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	drain := func() {
		select {
		case <-changes:
		default:
		}
	}
	create := func(namespace, name string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: corev1.PodSpec{NodeName: "node-b", TerminationGracePeriodSeconds: ptr.To[int64](0),
				Containers: []corev1.Container{{Name: "c", Image: "registry.local/batch:1"}}}}
		if _, err := core.Pods(namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = core.Pods(namespace).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	}
	// The counts follow without a wake-up: read them until they do.
	counts := func(want func(kube.NodePodCount) bool, what string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			return want(snap.Data().CountedPods["node-b"]), nil
		})
		if err != nil {
			t.Fatalf("the counts never showed %s: %+v", what, snap.Data().CountedPods["node-b"])
		}
	}
	before := snap.Data().CountedPods["node-b"].Pods
	// The site's other objects (node heartbeats, the shown namespaces'
	// pods) wake readers now and then: a pod coming, running and going
	// must wake none for half a second after the counts hold it, in at
	// least one of five tries (each of which wakes them without the
	// option: its creation, its start, its deletion).
	quiet := false
	for try := 0; try < 5 && !quiet; try++ {
		drain()
		name := fmt.Sprintf("batch-%d", try)
		create(ns, name)
		counts(func(c kube.NodePodCount) bool { return c.Pods == before+1 }, name+" counted")
		woke := false
		select {
		case <-changes:
			woke = true
		case <-time.After(500 * time.Millisecond):
		}
		if err := core.Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		counts(func(c kube.NodePodCount) bool { return c.Pods == before }, name+" gone")
		select {
		case <-changes:
			woke = true
		case <-time.After(500 * time.Millisecond):
		}
		quiet = !woke
	}
	if !quiet {
		t.Errorf("a pod outside the shown namespaces woke the readers of a snapshot asked not to, in every try")
	}
	drain()
	create("kube-system", "batch-shown")
	select {
	case <-changes:
	case <-time.After(5 * time.Second):
		t.Errorf("a kube-system pod's creation did not wake the readers")
	}
}

// A Longhorn object enters the cache without what no reader reads of it
// (its labels, annotations, owners and finalizers; a volume's list of the
// pods using it; an engine's snapshots and its backups', restores',
// purges', clones' and replicas' transition records, which a real engine
// carries for every snapshot of its volume), and with everything else:
// what is derived from the trimmed objects is what the objects give whole.
func TestTrimForCacheKeepsWhatLonghornReadersRead(t *testing.T) {
	objectMeta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: kube.LonghornNamespace, UID: types.UID(name), ResourceVersion: "9",
			Labels:          map[string]string{"longhornvolume": "vol-a", "longhornnode": "node-b"},
			Annotations:     map[string]string{"longhorn.io/last-applied-tolerations": "[]"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "longhorn.io/v1beta2", Kind: "Volume", Name: "vol-a", UID: "vol-a"}},
			Finalizers:      []string{"longhorn.io"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "longhorn-manager"}}}
	}
	vol := &lhv1beta2.Volume{ObjectMeta: objectMeta("vol-a")}
	vol.Spec.Size, vol.Spec.NumberOfReplicas, vol.Spec.NodeID = 10<<30, 3, "node-b"
	vol.Status.State, vol.Status.Robustness, vol.Status.CurrentNodeID = lhv1beta2.VolumeStateAttached, lhv1beta2.VolumeRobustnessDegraded, "node-b"
	vol.Status.LastDegradedAt, vol.Status.ActualSize = "2026-11-27T03:00:00Z", 3<<30
	vol.Status.Conditions = []lhv1beta2.Condition{{Type: lhv1beta2.VolumeConditionTypeScheduled, Status: lhv1beta2.ConditionStatusFalse, Reason: "ReplicaSchedulingFailure", Message: "insufficient storage"}}
	vol.Status.KubernetesStatus = lhv1beta2.KubernetesStatus{Namespace: kube.AppNamespace, PVCName: "vol-a-claim", PVName: "pv-a",
		WorkloadsStatus: []lhv1beta2.WorkloadStatus{{PodName: "web-0", PodStatus: "Running", WorkloadName: "web", WorkloadType: "StatefulSet"}}}
	replica := func(name, node, healthyAt, failedAt string, state lhv1beta2.InstanceState) *lhv1beta2.Replica {
		r := &lhv1beta2.Replica{ObjectMeta: objectMeta(name)}
		r.Spec.VolumeName, r.Spec.NodeID, r.Spec.HealthyAt, r.Spec.FailedAt = "vol-a", node, healthyAt, failedAt
		r.Status.CurrentState, r.Status.OwnerID = state, node
		return r
	}
	replicas := []*lhv1beta2.Replica{
		replica("vol-a-r-1", "node-a", "2026-11-27T02:00:00Z", "", lhv1beta2.InstanceStateRunning),
		replica("vol-a-r-2", "node-b", "2026-11-27T02:00:00Z", "2026-11-27T03:00:00Z", lhv1beta2.InstanceStateError),
		replica("vol-a-r-3", "node-c", "", "", lhv1beta2.InstanceStateRunning),
	}
	eng := &lhv1beta2.Engine{ObjectMeta: objectMeta("vol-a-e-0")}
	eng.Spec.VolumeName, eng.Spec.NodeID = "vol-a", "node-b"
	eng.Status.CurrentState = lhv1beta2.InstanceStateRunning
	eng.Status.CurrentReplicaAddressMap = map[string]string{"vol-a-r-1": "tcp://10.42.0.5:10000", "vol-a-r-3": "tcp://10.42.2.5:10000"}
	eng.Status.ReplicaModeMap = map[string]lhv1beta2.ReplicaMode{"vol-a-r-1": lhv1beta2.ReplicaModeRW, "vol-a-r-3": lhv1beta2.ReplicaModeWO}
	eng.Status.RebuildStatus = map[string]*lhv1beta2.RebuildStatus{"tcp://10.42.2.5:10000": {IsRebuilding: true, Progress: 42, State: "in_progress"}}
	eng.Status.ReplicaTransitionTimeMap = map[string]string{"vol-a-r-1": "2026-11-27T02:00:00Z"}
	eng.Status.Snapshots = map[string]*lhv1beta2.SnapshotInfo{
		"volume-head": {Name: "volume-head", Parent: "snap-1", Children: map[string]bool{}, Size: "4096"},
		"snap-1":      {Name: "snap-1", Children: map[string]bool{"volume-head": true}, Labels: map[string]string{"type": "recurring"}, Size: "1073741824"},
	}
	eng.Status.BackupStatus = map[string]*lhv1beta2.EngineBackupStatus{"backup-1": {SnapshotName: "snap-1", Progress: 100, State: "Completed"}}
	eng.Status.RestoreStatus = map[string]*lhv1beta2.RestoreStatus{"tcp://10.42.0.5:10000": {}}
	eng.Status.PurgeStatus = map[string]*lhv1beta2.PurgeStatus{"tcp://10.42.0.5:10000": {}}
	eng.Status.CloneStatus = map[string]*lhv1beta2.SnapshotCloneStatus{"tcp://10.42.0.5:10000": {}}

	trim := func(obj runtime.Object) runtime.Object {
		t.Helper()
		out, err := kube.TrimForCache(obj.DeepCopyObject())
		if err != nil {
			t.Fatal(err)
		}
		return out.(runtime.Object)
	}
	// What the trim may drop, dropped by hand: the trimmed object must be
	// exactly this, nothing else gone.
	dropped := func(obj runtime.Object) runtime.Object {
		c := obj.DeepCopyObject()
		m, _ := meta.Accessor(c)
		m.SetLabels(nil)
		m.SetAnnotations(nil)
		m.SetOwnerReferences(nil)
		m.SetFinalizers(nil)
		m.SetManagedFields(nil)
		switch o := c.(type) {
		case *lhv1beta2.Volume:
			o.Status.KubernetesStatus.WorkloadsStatus = nil
		case *lhv1beta2.Engine:
			o.Status.Snapshots, o.Status.BackupStatus, o.Status.RestoreStatus = nil, nil, nil
			o.Status.PurgeStatus, o.Status.CloneStatus, o.Status.ReplicaTransitionTimeMap = nil, nil, nil
		}
		return c
	}
	whole := kube.Data{HasLonghorn: true, Volumes: []*lhv1beta2.Volume{vol}, Replicas: replicas, Engines: []*lhv1beta2.Engine{eng}}
	cached := kube.Data{HasLonghorn: true}
	for _, o := range whole.Volumes {
		got := trim(o).(*lhv1beta2.Volume)
		if want := dropped(o); !reflect.DeepEqual(got, want) {
			t.Errorf("volume %s trimmed to\n%+v\nwant\n%+v", o.Name, got, want)
		}
		cached.Volumes = append(cached.Volumes, got)
	}
	for _, o := range whole.Replicas {
		got := trim(o).(*lhv1beta2.Replica)
		if want := dropped(o); !reflect.DeepEqual(got, want) {
			t.Errorf("replica %s trimmed to\n%+v\nwant\n%+v", o.Name, got, want)
		}
		cached.Replicas = append(cached.Replicas, got)
	}
	for _, o := range whole.Engines {
		got := trim(o).(*lhv1beta2.Engine)
		if want := dropped(o); !reflect.DeepEqual(got, want) {
			t.Errorf("engine %s trimmed to\n%+v\nwant\n%+v", o.Name, got, want)
		}
		cached.Engines = append(cached.Engines, got)
	}
	now := time.Date(2026, 11, 27, 4, 0, 0, 0, time.UTC)
	if a, b := kube.Derive(cached, now), kube.Derive(whole, now); !reflect.DeepEqual(a, b) {
		t.Errorf("the trimmed Longhorn objects derive\n%+v\nthe whole ones\n%+v", a.Volumes, b.Volumes)
	}
	if v := kube.Derive(cached, now).Volumes; len(v) != 1 || len(v[0].Replicas) != 3 || v[0].Replicas[2].Progress != 42 {
		t.Errorf("the derived volume lost its replicas or its rebuild: %+v", v)
	}
}
