package kube

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
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

		// The pods' list fails until released (the reflector backs off and
		// lists again): the basics are read while the pods are not.
		var holdPods atomic.Bool
		holdPods.Store(true)
		s.clients.Core.(*fake.Clientset).PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			if holdPods.Load() {
				return true, nil, errors.New("held by the test")
			}
			return false, nil, nil
		})
		podsRead := make(chan time.Time, 1)
		go func() {
			<-s.core.Core().V1().Pods().Informer().HasSyncedChecker().Done()
			podsRead <- time.Now()
		}()

		start := time.Now()
		s.runInformers(ctx)
		synctest.Wait()
		d, ok := s.BasicsData()
		if !ok {
			t.Fatalf("the basics' lists were read and every goroutine waits, but the snapshot does not know the basics are read (it waits for a timer to look)")
		}
		if len(d.Nodes) != 1 || len(d.Leases) != 1 || len(d.ConfigMaps) != 1 {
			t.Errorf("basics read: %d nodes, %d leases, %d config maps; want 1 of each", len(d.Nodes), len(d.Leases), len(d.ConfigMaps))
		}
		if waited := time.Since(start); waited != 0 {
			t.Errorf("the bubble's clock moved %s before the basics were noticed: something waited on a timer", waited)
		}
		if len(all) != 0 {
			t.Fatal("the whole read is reported while the pods are still unread")
		}

		holdPods.Store(false)
		var allAt time.Time
		select {
		case ok := <-all:
			allAt = time.Now()
			if !ok {
				t.Fatal("waitInformers gave up while its context was live")
			}
		case <-time.After(time.Minute):
			t.Fatal("the whole read was not reported within a minute of the pods' list being released")
		}
		synctest.Wait()
		for kind, inf := range s.readKinds() {
			if !inf.HasSynced() {
				t.Fatalf("the whole read is reported, but the %s are not read", kind)
			}
		}
		if at := <-podsRead; !allAt.Equal(at) {
			t.Errorf("the whole read was noticed %s after the pods, its last kind, were read: something waited on a timer", allAt.Sub(at))
		}
	})
}
