package kube_test

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
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
	snap := startSnapshot(t, cfg)

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
	snap := startSnapshot(t, site.Config)
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
	for _, o := range d.Volumes {
		check("volume", o.Name, o.ObjectMeta)
	}
	for _, o := range d.Replicas {
		check("replica", o.Name, o.ObjectMeta)
	}
	for _, o := range d.Engines {
		check("engine", o.Name, o.ObjectMeta)
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
