package views

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/syncbuf"
)

// fakeReadSite is a snapshot, not started, over a fake cluster of one
// node, its leases and config map, and a few pods: for a test inside a
// synctest bubble, where the fake clientset is the corner a real API
// server cannot give. The bubble's clock moves only when every goroutine
// in it waits, so whatever is held for a timer shows on the clock.
func fakeReadSite(t *testing.T) *kube.Snapshot {
	objects := []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kube-vip-cp", Namespace: "kube-system"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "eve-cluster", Namespace: kube.AppNamespace}},
	}
	for _, name := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		objects = append(objects, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app-" + name, Namespace: kube.AppNamespace}, Spec: corev1.PodSpec{NodeName: "node-a"}})
	}
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	snap, err := kube.NewSnapshot(cfg, nil, kube.WithClients(&kube.Clients{Config: cfg, Core: fake.NewClientset(objects...)}))
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestFeedDrawsTheFirstReadsAtOnce: the frames of a burst of changes are
// held to MaxFrameRate, but the frame that first shows the basics, and
// the one that first shows the whole cluster, are sent as soon as they
// are read. The feed held them for the rest of its tenth of a second: on
// a large site the pods stream in while the basics come, so the first
// screen waited up to 100 ms behind the rate cap, and the whole one again.
func TestFeedDrawsTheFirstReadsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		snap := fakeReadSite(t)
		type sent struct {
			at    time.Time
			frame Frame
		}
		frames := make(chan sent, 100)
		ctx, cancel := context.WithCancel(t.Context())
		defer func() {
			cancel()
			synctest.Wait()
		}()
		go Feed(ctx, snap, nil, "", func(m tea.Msg) { frames <- sent{time.Now(), Frame(m.(FrameMsg))} })
		synctest.Wait()
		first := <-frames
		if first.frame.Synced || first.frame.Basics != nil {
			t.Fatal("the first frame, before the snapshot started, shows a read cluster")
		}

		// The pods' list fails until released (the reflector backs off and
		// lists again): the basics are read alone first, as on a large site.
		var holdPods atomic.Bool
		holdPods.Store(true)
		snap.Clients().Core.(*fake.Clientset).PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			if holdPods.Load() {
				return true, nil, errors.New("held by the test")
			}
			return false, nil, nil
		})
		start := time.Now()
		snap.Start(ctx)
		synctest.Wait()
		if snap.Synced() || !snap.BasicsRead() {
			t.Fatalf("with the pods held, the snapshot should have read the basics alone (synced %v, basics %v): the test proves nothing", snap.Synced(), snap.BasicsRead())
		}
		// firstSent takes every frame sent so far and keeps the first
		// that shows stage (nil: none).
		firstSent := func(stage int) *sent {
			var first *sent
			for len(frames) > 0 {
				f := <-frames
				if frameStage(f.frame) >= stage && first == nil {
					first = &f
				}
			}
			return first
		}
		// sentAt fails the test unless the first frame showing stage was
		// sent at the instant what it shows was read.
		sentAt := func(stage int, read time.Time, what string) {
			t.Helper()
			switch f := firstSent(stage); {
			case f == nil:
				t.Fatalf("%s: read, and every goroutine waits, but no frame shows it: the feed holds it for a timer", what)
			case !f.at.Equal(read):
				t.Errorf("the first frame with %s was sent %s after it was read", what, f.at.Sub(read))
			}
		}
		sentAt(readBasics, start, "the basics")

		holdPods.Store(false)
		syncedCh := make(chan time.Time, 1)
		go func() {
			if snap.WaitForSync(ctx) == nil {
				syncedCh <- time.Now()
			}
		}()
		var syncedAt time.Time
		select {
		case syncedAt = <-syncedCh:
		case <-time.After(time.Minute):
			t.Fatal("the cluster was not read within a minute of the pods' list being released")
		}
		synctest.Wait()
		sentAt(readAll, syncedAt, "the whole cluster")

		// Any other change is still held to MaxFrameRate: a pod that
		// comes right after the whole read waits out the gap.
		addPod(t, snap, "app-late")
		synctest.Wait()
		if n := len(frames); n != 0 {
			t.Fatalf("%d frames sent for a pod in the same instant as the last frame: the rate cap is gone", n)
		}
		time.Sleep(time.Second / MaxFrameRate)
		synctest.Wait()
		if n := len(frames); n != 1 {
			t.Fatalf("%d frames sent a tenth of a second after a pod came, want 1", n)
		}
	})
}

// addPod adds a pod to the fake cluster under snap.
func addPod(t *testing.T, snap *kube.Snapshot, name string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kube.AppNamespace}, Spec: corev1.PodSpec{NodeName: "node-a"}}
	if _, err := snap.Clients().Core.CoreV1().Pods(kube.AppNamespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestWatchStatusDrawsTheFirstReadAtOnce: `sitecon status --watch`
// redraws at most twice a second, but the status of a cluster just read
// is drawn at once, not after the half second left since "waiting for
// the API server".
func TestWatchStatusDrawsTheFirstReadAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		snap := fakeReadSite(t)
		var out syncbuf.Buffer
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		defer func() {
			cancel()
			synctest.Wait()
		}()
		go func() {
			done <- WatchStatus(ctx, WatchTerminal{Out: &out}, snap, func(context.Context) *AgentSummary { return nil }, FormatTable)
		}()
		synctest.Wait()
		if !strings.Contains(out.String(), "waiting for the API server") {
			t.Fatalf("the watch's first frame, before the snapshot started: %q", out.String())
		}

		snap.Start(ctx)
		synctest.Wait()
		if !snap.Synced() {
			t.Fatal("the snapshot did not read the fake cluster: the test proves nothing")
		}
		frames := strings.Split(out.String(), "\x1b[H\x1b[2J")
		if last := frames[len(frames)-1]; !strings.Contains(last, "node-a") {
			t.Fatalf("the cluster is read and every goroutine waits, but the watch still shows %q: it holds the status for a timer", last)
		}

		// Any other change is still drawn at most twice a second.
		addPod(t, snap, "app-late")
		synctest.Wait()
		if n := strings.Count(out.String(), "\x1b[H\x1b[2J"); n != len(frames)-1 {
			t.Fatalf("a pod in the same instant as the last draw was drawn at once (%d draws, were %d): the half second is gone", n, len(frames)-1)
		}
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if n := strings.Count(out.String(), "\x1b[H\x1b[2J"); n != len(frames) {
			t.Fatalf("%d draws half a second after a pod came, want %d", n, len(frames))
		}
	})
}
