package kube_test

import (
	"context"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

func TestMain(m *testing.M) { os.Exit(sitebox.RunMain(m)) }

// waitFor waits on the snapshot's change notifications until cond holds.
func waitFor(t *testing.T, snap *kube.Snapshot, within time.Duration, what string, cond func(kube.ClusterStatus) bool) kube.ClusterStatus {
	t.Helper()
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	deadline := time.After(within)
	for {
		st := snap.Status()
		if cond(st) {
			return st
		}
		select {
		case <-changes:
		case <-deadline:
			t.Fatalf("%s: not within %s", what, within)
		}
	}
}

func volume(st kube.ClusterStatus, name string) kube.VolumeStatus {
	for _, v := range st.Volumes {
		if v.Name == name {
			return v
		}
	}
	return kube.VolumeStatus{}
}

// The snapshot reads everything by watching: once synced, changes arrive
// without a single LIST or GET, and each notification reflects them.
func TestSnapshotWatchesWithoutPolling(t *testing.T) {
	site := sitebox.Shared(t)
	counter := &requestLog{}
	cfg := rest.CopyConfig(site.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	snap := sitebox.StartSnapshot(t, cfg)

	st := snap.Status()
	if !st.Longhorn || !st.KubeVirt {
		t.Fatalf("discovery missed the CRDs: longhorn=%v kubevirt=%v", st.Longhorn, st.KubeVirt)
	}
	if st.NodesTotal != 3 {
		t.Fatalf("nodes = %d, want 3", st.NodesTotal)
	}
	readsAtSync, _ := counter.snapshot()

	admin, err := kubernetes.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, name := range []string{"watch-1", "watch-2", "watch-3"} {
		_, err := admin.CoreV1().ConfigMaps(kube.AppNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "node-c", "application/merge-patch+json", []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.CoreV1().Nodes().Patch(context.Background(), "node-c", "application/merge-patch+json", []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{})
	})
	waitFor(t, snap, 10*time.Second, "node-c cordoned", func(st kube.ClusterStatus) bool {
		for _, n := range st.Nodes {
			if n.Name == "node-c" {
				return !n.Schedulable
			}
		}
		return false
	})
	// The config maps come on a watch of their own: seeing the node's
	// change says nothing of them yet.
	seen := 0
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		seen = 0
		for _, cm := range snap.Data().ConfigMaps {
			if strings.HasPrefix(cm.Name, "watch-") {
				seen++
			}
		}
		return seen == 3, nil
	})
	if err != nil {
		t.Errorf("snapshot has %d of the 3 new ConfigMaps", seen)
	}
	reads, watches := counter.snapshot()
	if extra := reads[len(readsAtSync):]; len(extra) > 0 {
		t.Errorf("after sync the snapshot made %d non-watch reads (polling): %v", len(extra), extra)
	}
	if watches < 7 {
		t.Errorf("watches = %d, want one per resource kind", watches)
	}

	// Idle for longer than several periods any poll would have (a health
	// check, a resync, a refresh of "since"): still nothing but the
	// watches. The window above is milliseconds long; a poll every few
	// seconds fits between its requests unseen.
	idle := 8 * time.Second
	time.Sleep(idle) // the measurement window itself, not a synchronisation
	reads, _ = counter.snapshot()
	if extra := reads[len(readsAtSync):]; len(extra) > 0 {
		t.Errorf("idle for %s, the snapshot made %d non-watch requests (polling): %v", idle, len(extra), extra)
	}
	if !snap.Health().Connected {
		t.Errorf("idle, the snapshot lost its health: %+v", snap.Health())
	}
}

// Longhorn keeps only lastDegradedAt; the snapshot tracks the other
// transitions from watch events, so a volume that turns healthy again has an
// exact since.
func TestSnapshotTracksRobustnessTransitions(t *testing.T) {
	site := sitebox.Shared(t)
	snap := sitebox.StartSnapshot(t, site.Config)
	// In use on node-c (Longhorn attaches only a volume in use); node-a fails.
	site.Volume(t, "vol-track", sitebox.VolumeOptions{Replicas: 3, UsedOn: "node-c"})
	waitFor(t, snap, 20*time.Second, "vol-track healthy", func(st kube.ClusterStatus) bool {
		return volume(st, "vol-track").Robustness == string(lhv1beta2.VolumeRobustnessHealthy)
	})

	failed := time.Now()
	if err := site.Fail("node-a"); err != nil {
		t.Fatal(err)
	}
	site.RecoverOnCleanup(t, "node-a")
	st := waitFor(t, snap, 40*time.Second, "vol-track degraded", func(st kube.ClusterStatus) bool {
		return volume(st, "vol-track").Robustness == string(lhv1beta2.VolumeRobustnessDegraded)
	})
	if v := volume(st, "vol-track"); !v.SinceExact || v.Since.Before(failed.Add(-time.Second)) {
		t.Errorf("degraded since %s exact=%v, want after %s", v.Since, v.SinceExact, failed)
	}
	// kube-vip (its simulator) moves the VIP on its own schedule, not the
	// Longhorn manager's: wait for it rather than expect it by now.
	waitFor(t, snap, 20*time.Second, "the VIP off the failed node-a", func(st kube.ClusterStatus) bool {
		return st.VIP.Owner != "" && st.VIP.Owner != "node-a"
	})
	recovered := time.Now()
	if err := site.Recover("node-a"); err != nil {
		t.Fatal(err)
	}
	st = waitFor(t, snap, 40*time.Second, "vol-track healthy again", func(st kube.ClusterStatus) bool {
		return volume(st, "vol-track").Robustness == string(lhv1beta2.VolumeRobustnessHealthy)
	})
	if v := volume(st, "vol-track"); !v.SinceExact || v.Since.Before(recovered) {
		t.Errorf("healthy since %s exact=%v, want the transition after %s", v.Since, v.SinceExact, recovered)
	}

	// A fresh snapshot never saw the transition: its since is a lower bound.
	fresh := sitebox.StartSnapshot(t, site.Config)
	if v := volume(fresh.Status(), "vol-track"); v.SinceExact {
		t.Errorf("a snapshot started after the transition claims an exact since: %+v", v)
	}
}

// When the API server goes away the snapshot keeps its data and says it is
// stale and why; when it returns the snapshot reconnects by itself.
func TestSnapshotSurvivesAPIServerRestart(t *testing.T) {
	site := sitebox.Shared(t)
	began := time.Now()
	snap := sitebox.StartSnapshot(t, site.Config)
	before := snap.Status()
	if !before.API.Connected || before.Stale != nil {
		t.Fatalf("health after sync = %+v (stale %+v), want connected", before.API, before.Stale)
	}
	if err := site.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now() // an answer may land while it stops
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = site.StartAPIServer(context.Background())
		}
	})
	st := waitFor(t, snap, 30*time.Second, "snapshot marked stale", func(st kube.ClusterStatus) bool { return !st.API.Connected })
	if st.API.LastError == "" || st.NodesTotal != before.NodesTotal {
		t.Errorf("stale snapshot = %+v with %d nodes, want the error and the last data (%d nodes)", st.API, st.NodesTotal, before.NodesTotal)
	}
	// The model says so, with the data's age: as of the last answer,
	// before the API server was stopped.
	if s := st.Stale; s == nil || s.Reason != st.API.LastError || s.AsOf.Before(began) || s.AsOf.After(stopped) || s.Since.Before(s.AsOf) {
		t.Errorf("Stale = %+v, want the reason and the data as of between %s and %s", s, began, stopped)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := site.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitFor(t, snap, 60*time.Second, "snapshot reconnected", func(st kube.ClusterStatus) bool { return st.API.Connected && st.Stale == nil })

	// And it is live again: a change made now arrives.
	admin, err := kubernetes.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := admin.CoreV1().ConfigMaps(kube.AppNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restart"}}, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, snap, 30*time.Second, "change after restart seen", func(kube.ClusterStatus) bool {
		for _, cm := range snap.Data().ConfigMaps {
			if cm.Name == "after-restart" {
				return true
			}
		}
		return false
	})
}

// A snapshot made WithoutEvents (the agent's) never lists or watches the
// cluster's Events, and holds none, while everything else it reads works.
func TestSnapshotWithoutEventsNeverReadsThem(t *testing.T) {
	site := sitebox.Shared(t)
	var mu sync.Mutex
	var paths []string
	cfg := rest.CopyConfig(site.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			paths = append(paths, req.URL.Path)
			mu.Unlock()
			return rt.RoundTrip(req)
		})
	})
	snap, err := kube.NewSnapshot(cfg, nil, kube.WithoutEvents())
	if err != nil {
		t.Fatal(err)
	}
	snap.Start(t.Context())
	syncCtx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := snap.WaitForSync(syncCtx); err != nil {
		t.Fatal(err)
	}
	if st := snap.Status(); st.NodesTotal != 3 {
		t.Fatalf("the snapshot should still read the Nodes: %d", st.NodesTotal)
	}
	if d := snap.Data(); len(d.Events) != 0 {
		t.Errorf("a snapshot without Events holds %d", len(d.Events))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range paths {
		if strings.HasSuffix(p, "/events") {
			t.Errorf("a snapshot without Events requested %s", p)
		}
	}
	// And the default snapshot does read them: the check above can fail.
	full := sitebox.StartSnapshot(t, site.Config)
	if len(full.Data().Events) == 0 {
		t.Error("the default snapshot holds no Events on a site that has logged its start")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Issue 10 item 4: sitebox runs one etcd member per server, as k3s does, and
// a failed node loses its member. With two of three failed, etcd has no
// quorum: the API server stops answering, and the snapshot (the console's
// data) goes stale with the reason while keeping the last data. One node
// back restores quorum, and the snapshot comes back by itself.
func TestSnapshotStaleWhenEtcdLosesQuorum(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	snap := sitebox.StartSnapshot(t, site.Config)
	before := snap.Status()
	// Unthrottled: a client-side rate limit is not the API server failing.
	cfg := rest.CopyConfig(site.Config)
	cfg.QPS = -1
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// write is one request the API server can only answer with a quorum.
	write := func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "quorum-"}}
		_, err := admin.CoreV1().ConfigMaps(kube.AppNamespace).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}
	for _, node := range []string{"node-b", "node-c"} {
		site.RecoverOnCleanup(t, node)
		if err := site.Fail(node); err != nil {
			t.Fatal(err)
		}
	}
	var lastErr error
	// Each write has its own deadline, not the poll's: a write cut short
	// by the poll ending is no answer from the API server.
	err = wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		lastErr = write(t.Context())
		return lastErr != nil, nil
	})
	if err != nil {
		t.Fatalf("node-b and node-c failed, yet the API server still writes: etcd kept its quorum")
	}
	t.Logf("without quorum a write fails: %v", lastErr)
	st := waitFor(t, snap, 60*time.Second, "snapshot marked stale", func(st kube.ClusterStatus) bool { return !st.API.Connected })
	if !strings.Contains(st.API.LastError, "etcd") || st.NodesTotal != before.NodesTotal {
		t.Errorf("stale snapshot = %+v with %d nodes, want etcd named in the reason and the last data (%d nodes)", st.API, st.NodesTotal, before.NodesTotal)
	}
	t.Logf("stale: %s", st.API.LastError)
	// And it stays stale: the API server still answers from its watch
	// cache, which is no proof the data can change. Watched for longer
	// than two of the snapshot's probes.
	if err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 2*kube.QuietProbeAfter, true, func(context.Context) (bool, error) {
		return snap.Status().API.Connected, nil
	}); err == nil {
		t.Fatal("the snapshot came back while etcd still had no quorum")
	}

	if err := site.Recover("node-b"); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		lastErr = write(t.Context())
		return lastErr == nil, nil
	})
	if err != nil {
		t.Fatalf("node-b recovered (two of three members), yet the API server does not write: %v", lastErr)
	}
	waitFor(t, snap, 60*time.Second, "snapshot reconnected", func(st kube.ClusterStatus) bool { return st.API.Connected })
	if err := site.Recover("node-c"); err != nil {
		t.Fatal(err)
	}
	site.WaitSettled(t, 90*time.Second)
}

// A reader that keeps its volumes across reads (the console's frames,
// kube.Deriver) sees every change of a Longhorn object: the snapshot
// counts each one (Data.LonghornVersion) before it wakes the readers, so
// no read woken by a change is answered with the volumes of a read
// before it. The reader here derives on every wake-up, as the console
// does, and each change must reach it and leave it equal to a fresh
// derivation of the snapshot.
func TestSnapshotVolumesKeptAcrossReadsFollowChanges(t *testing.T) {
	site := sitebox.Shared(t)
	snap := sitebox.StartSnapshot(t, site.Config)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var shown []kube.VolumeStatus
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	read := make(chan struct{}, 1)
	go func() {
		var deriver kube.Deriver
		for {
			st := deriver.Derive(snap.Data(), time.Now())
			mu.Lock()
			shown = st.Volumes
			mu.Unlock()
			select {
			case read <- struct{}{}:
			default:
			}
			select {
			case <-ctx.Done():
				return
			case <-changes:
			}
		}
	}()
	readerShows := func(what string, cond func(kube.VolumeStatus) bool) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			mu.Lock()
			st := kube.ClusterStatus{Volumes: shown}
			mu.Unlock()
			if cond(volume(st, "vol-kept")) {
				return
			}
			select {
			case <-read:
			case <-deadline:
				t.Fatalf("the reader keeping its volumes across reads never showed %s: %+v", what, volume(st, "vol-kept"))
			}
		}
	}
	// Detached: Longhorn (the simulator) leaves its stopped replicas as
	// they are, so what the test writes stays.
	site.Volume(t, "vol-kept", sitebox.VolumeOptions{Replicas: 2})
	readerShows("vol-kept with its two replicas stopped", func(v kube.VolumeStatus) bool {
		return len(v.Replicas) == 2 && v.Replicas[0].State == kube.ReplicaStopped && v.Replicas[1].State == kube.ReplicaStopped
	})
	lh := site.Clients(t).Longhorn.LonghornV1beta2().Replicas(kube.LonghornNamespace)
	replicas, err := lh.List(ctx, metav1.ListOptions{LabelSelector: "longhornvolume=vol-kept"})
	if err != nil || len(replicas.Items) != 2 {
		t.Fatalf("vol-kept's replicas: %v %v", replicas, err)
	}
	// A replica moved to the node holding none: nothing on the site
	// answers that write (the engine's addresses and modes stay as they
	// are), so only its own event can bring it to the reader.
	r := replicas.Items[0]
	free := ""
	for _, n := range site.Nodes {
		if n.Name != r.Spec.NodeID && n.Name != replicas.Items[1].Spec.NodeID {
			free = n.Name
		}
	}
	r.Spec.NodeID = free
	updated, err := lh.Update(ctx, &r, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	readerShows("the replica moved to "+free, func(v kube.VolumeStatus) bool {
		return slices.ContainsFunc(v.Replicas, func(rs kube.ReplicaStatus) bool { return rs.Name == r.Name && rs.Node == free })
	})
	r = *updated
	r.Spec.FailedAt = time.Now().UTC().Format(time.RFC3339)
	if _, err := lh.Update(ctx, &r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	readerShows("the replica written failed", func(v kube.VolumeStatus) bool {
		return slices.ContainsFunc(v.Replicas, func(rs kube.ReplicaStatus) bool { return rs.Name == r.Name && rs.State == kube.ReplicaFailed })
	})
	if err := lh.Delete(ctx, r.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	readerShows("the replica deleted gone", func(v kube.VolumeStatus) bool {
		return len(v.Replicas) == 1 && v.Replicas[0].Name != r.Name
	})
	// And, whatever else the shared site did meanwhile, what the reader
	// shows once it has read again is a fresh derivation's.
	deadline := time.After(30 * time.Second)
	for {
		mu.Lock()
		got := shown
		mu.Unlock()
		want := snap.Status().Volumes
		if reflect.DeepEqual(got, want) {
			break
		}
		select {
		case <-read:
		case <-deadline:
			t.Fatalf("the reader keeping its volumes shows\n%+v\nwhere a fresh derivation gives\n%+v", got, want)
		}
	}
}

// heldTransport holds every request whose path contains held until
// release is closed: a list the API server is slow to give.
type heldTransport struct {
	next    http.RoundTripper
	held    string
	release chan struct{}
}

func (h *heldTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.Contains(req.URL.Path, h.held) {
		select {
		case <-h.release:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	return h.next.RoundTrip(req)
}

// While a large kind is still being listed, the snapshot gives the
// basics it has read (the nodes, the leases, the cluster's config maps)
// through BasicsData, and nothing more; Data stays empty and Synced
// false until every kind is read, and BasicsData ends then.
func TestSnapshotGivesTheBasicsBeforeTheRest(t *testing.T) {
	site := sitebox.Shared(t)
	// A volume for the reader below to show (detached: nothing on the
	// site writes it while the test runs).
	site.Volume(t, "vol-basics", sitebox.VolumeOptions{Replicas: 2})
	cfg := rest.CopyConfig(site.Config)
	held := &heldTransport{held: "/replicas", release: make(chan struct{})}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { held.next = rt; return held })
	released := false
	release := func() {
		if !released {
			released = true
			close(held.release)
		}
	}
	defer release()
	snap, err := kube.NewSnapshot(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	snap.Start(ctx)
	deadline := time.After(20 * time.Second)
	var basics kube.Data
	for ok := false; !ok; {
		if basics, ok = snap.BasicsData(); ok {
			break
		}
		select {
		case <-changes:
		case <-deadline:
			t.Fatal("the snapshot gave no basics within 20s while Longhorn's replicas were being listed")
		}
	}
	if len(basics.Nodes) != len(site.Nodes) || len(basics.Leases) == 0 || len(basics.ConfigMaps) == 0 {
		t.Errorf("the basics hold %d nodes (want %d), %d leases, %d config maps", len(basics.Nodes), len(site.Nodes), len(basics.Leases), len(basics.ConfigMaps))
	}
	if len(basics.Pods) != 0 || len(basics.Volumes) != 0 || len(basics.Replicas) != 0 {
		t.Errorf("the basics hold more than the basics: %d pods, %d volumes, %d replicas", len(basics.Pods), len(basics.Volumes), len(basics.Replicas))
	}
	if snap.Synced() || len(snap.Data().Nodes) != 0 {
		t.Fatalf("with the replicas not read, the snapshot says synced=%v and Data lists %d nodes", snap.Synced(), len(snap.Data().Nodes))
	}
	// A reader that keeps its volumes across reads (the console's frames)
	// reads the unsynced snapshot, volumes and engines read already, then
	// the synced one: it must then show every volume. The version of the
	// unsynced read let the synced one keep its empty list.
	var deriver kube.Deriver
	if d := snap.Data(); d.LonghornVersion != 0 || len(deriver.Derive(d, time.Now()).Volumes) != 0 {
		t.Fatalf("an unsynced read carries Longhorn version %d", d.LonghornVersion)
	}
	release()
	syncCtx, cancelSync := context.WithTimeout(ctx, 20*time.Second)
	defer cancelSync()
	if err := snap.WaitForSync(syncCtx); err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.BasicsData(); ok {
		t.Error("a synced snapshot still gives its basics apart")
	}
	d := snap.Data()
	if got, want := deriver.Derive(d, time.Now()).Volumes, kube.Derive(d, time.Now()).Volumes; len(want) == 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("after the sync the reader keeping its volumes shows %d of the %d volumes", len(got), len(want))
	}
}
