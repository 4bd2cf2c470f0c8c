package kube

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

// TestSnapshotNoticesItsReadsAtOnce: the snapshot learns that the basics
// (and then everything) are read when the lists come, not at its next
// look. cache.WaitForCacheSync looked every 100 ms, so the first screen
// came up to a tenth of a second after its lists, and the whole one
// again.
//
// The fake clientset is the corner a real API server cannot give: a
// cluster inside a synctest bubble, whose clock moves only when every
// goroutine in it waits. Its lists are read at once; a snapshot that
// learns of them by a timer waits for that timer, and the bubble's clock
// shows it.
func TestSnapshotNoticesItsReadsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := &rest.Config{Host: "https://127.0.0.1:1"}
		s, err := NewSnapshot(cfg, nil, WithClients(&Clients{Config: cfg, Core: fake.NewClientset(
			&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kube-vip-cp", Namespace: "kube-system"}},
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "eve-cluster", Namespace: AppNamespace}},
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: AppNamespace}, Spec: corev1.PodSpec{NodeName: "node-a"}},
		)}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer func() {
			cancel()
			synctest.Wait()
		}()
		// Both waits wait before the informers start: a wait that looks
		// once at its start and then by a timer cannot see the lists come.
		s.makeInformers()
		go s.waitBasics(ctx)
		all := make(chan bool, 1)
		go func() { all <- s.waitInformers(ctx) }()
		synctest.Wait()
		if _, ok := s.BasicsData(); ok {
			t.Fatal("the basics are read before their informers started")
		}

		start := time.Now()
		s.runInformers(ctx)
		synctest.Wait()
		for kind, inf := range s.readKinds() {
			if !inf.HasSynced() {
				t.Fatalf("the %s were not read in the bubble: the test proves nothing", kind)
			}
		}
		d, ok := s.BasicsData()
		if !ok {
			t.Fatalf("every list was read and every goroutine waits, but the snapshot does not know the basics are read (it waits for a timer to look)")
		}
		if len(d.Nodes) != 1 || len(d.Leases) != 1 || len(d.ConfigMaps) != 1 {
			t.Errorf("basics read: %d nodes, %d leases, %d config maps; want 1 of each", len(d.Nodes), len(d.Leases), len(d.ConfigMaps))
		}
		select {
		case ok := <-all:
			if !ok {
				t.Fatal("waitInformers gave up while its context was live")
			}
		default:
			t.Fatalf("every list was read and every goroutine waits, but the wait for the whole read has not returned (it waits for a timer to look)")
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("the bubble's clock moved %s before the reads were noticed: something waited on a timer", waited)
		}
	})
}
