package kube_test

import (
	"context"
	"maps"
	"strconv"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

func TestEngineRebuilds(t *testing.T) {
	engine := func(addrs map[string]string, rebuilds map[string]*lhv1beta2.RebuildStatus) *lhv1beta2.Engine {
		e := &lhv1beta2.Engine{}
		e.Status.CurrentReplicaAddressMap, e.Status.RebuildStatus = addrs, rebuilds
		return e
	}
	cases := []struct {
		name string
		e    *lhv1beta2.Engine
		want map[string]int
	}{
		{"no replicas", engine(nil, nil), nil},
		{"none rebuilding", engine(map[string]string{"r1": "tcp://a", "r2": "tcp://b"}, map[string]*lhv1beta2.RebuildStatus{}), nil},
		{"one rebuilding", engine(map[string]string{"r1": "tcp://a", "r2": "tcp://b"},
			map[string]*lhv1beta2.RebuildStatus{"tcp://b": {IsRebuilding: true, Progress: 40}}), map[string]int{"r2": 40}},
		{"a finished rebuild is not one", engine(map[string]string{"r1": "tcp://a"},
			map[string]*lhv1beta2.RebuildStatus{"tcp://a": {IsRebuilding: false, Progress: 100}}), nil},
		{"a rebuild of an address no replica has", engine(map[string]string{"r1": "tcp://a"},
			map[string]*lhv1beta2.RebuildStatus{"tcp://z": {IsRebuilding: true, Progress: 10}}), nil},
	}
	for _, c := range cases {
		if got := kube.EngineRebuilds(c.e); !maps.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// Longhorn rewrites an engine's status as its replicas' addresses and
// modes move: a write that changes nothing shown wakes no reader of the
// snapshot (each would re-derive the whole cluster), while a rebuild's
// progress does.
func TestSnapshotEngineWritesWakeReadersOnlyForRebuilds(t *testing.T) {
	site := sitebox.Shared(t)
	site.Volume(t, "vol-engine", sitebox.VolumeOptions{Replicas: 3})
	snap := sitebox.StartSnapshot(t, site.Config)
	engines := site.Clients(t).Longhorn.LonghornV1beta2().Engines(kube.LonghornNamespace)
	ctx := t.Context()

	var e *lhv1beta2.Engine
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := engines.Get(ctx, "vol-engine-e-0", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		e = got
		return len(got.Status.CurrentReplicaAddressMap) == 3, nil
	})
	if err != nil {
		t.Fatalf("the engine of vol-engine never mapped its 3 replicas: %v", err)
	}
	// cached waits until the snapshot's cache holds the engine at rv or
	// later (the simulator may write it again at once; etcd's revisions
	// grow, which a test against this server may rely on).
	cached := func(rv string) {
		t.Helper()
		want, err := strconv.ParseUint(rv, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			for _, c := range snap.Data().Engines {
				if got, err := strconv.ParseUint(c.ResourceVersion, 10, 64); c.Name == e.Name && err == nil && got >= want {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("the snapshot never held the engine at resourceVersion %s", rv)
		}
	}
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	// update writes change over the engine as the cache holds it, what
	// came before not the test's; the simulator may write the engine
	// between the read and the write (a conflict): then again, from its
	// write.
	update := func(change func(*lhv1beta2.Engine)) *lhv1beta2.Engine {
		t.Helper()
		for try := 1; ; try++ {
			cached(e.ResourceVersion)
			select {
			case <-changes:
			default:
			}
			next := e.DeepCopy()
			change(next)
			written, err := engines.UpdateStatus(ctx, next, metav1.UpdateOptions{})
			if err == nil {
				cached(written.ResourceVersion)
				e = written
				return written
			}
			if !apierrors.IsConflict(err) || try == 5 {
				t.Fatal(err)
			}
			if e, err = engines.Get(ctx, e.Name, metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// A write of what no screen shows: the engine's size and expansion.
	written := update(func(quiet *lhv1beta2.Engine) {
		quiet.Status.CurrentSize = quiet.Status.CurrentSize + 4096
		quiet.Status.IsExpanding = !quiet.Status.IsExpanding
	})
	select {
	case <-changes:
		t.Errorf("an engine write that changes no rebuild woke the snapshot's readers")
	default:
	}

	// A rebuild's progress is shown: it wakes them.
	var name, addr string
	for name, addr = range written.Status.CurrentReplicaAddressMap {
		break
	}
	update(func(loud *lhv1beta2.Engine) {
		loud.Status.RebuildStatus = map[string]*lhv1beta2.RebuildStatus{addr: {IsRebuilding: true, Progress: 30, State: "in_progress"}}
	})
	select {
	case <-changes:
	case <-time.After(5 * time.Second):
		t.Errorf("a rebuild of %s starting on the engine did not wake the snapshot's readers", name)
	}
}
