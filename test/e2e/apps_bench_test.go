package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// BenchmarkDetectionLatency measures migration detection: from the moment a
// watcher sees an app's pod Running and Ready on node-a to node-a's agent
// publishing cluster_app_running. Reports p50 and p99 in milliseconds.
func BenchmarkDetectionLatency(b *testing.B) {
	site := sitebox.Shared(b)
	cs, err := kubernetes.NewForConfig(site.Config)
	if err != nil {
		b.Fatal(err)
	}
	appsDir, logDir := b.TempDir(), b.TempDir()
	// The app's designated node is not in the cluster: nothing lays it out,
	// so the benchmark alone decides where its pod runs.
	app := apps.AppConfig{UUID: "be0c0000-0000-4000-8000-000000000001", DisplayName: "bench-detect", Activate: true,
		Kind: apps.KindContainer, Image: "registry.local/bench:1", DesignatedNodeID: "be0c0000-0000-4000-8000-0000000000ff"}
	writeJSON(b, filepath.Join(appsDir, "apps", "bench.json"), app)
	sa := startSiteAgent(b, site, "node-a", appsDir, logDir)
	defer sa.stop()

	// The harness's own watch timestamps the pod turning Running and Ready.
	ready := make(chan time.Time, 16)
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(kube.AppNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = kube.LabelAppUUID + "=" + app.UUID }))
	seen := map[string]bool{}
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			p := obj.(*corev1.Pod)
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && kube.PodReady(p) && !seen[p.Name] {
				seen[p.Name] = true
				ready <- time.Now()
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	appsPart := until(b, 30*time.Second, "the agent's apps part started", func() (*apps.Controller, bool) {
		appsPart := sa.agent.Apps()
		return appsPart, appsPart != nil
	}, func(*apps.Controller) string { return fmt.Sprintf("the agent's state: %+v", sa.agent.State()) })
	changes, unsubscribe := appsPart.Subscribe()
	defer unsubscribe()
	waitState := func(running bool) time.Time {
		deadline := time.After(30 * time.Second)
		for {
			for _, st := range appsPart.Apps() {
				if st.UUID == app.UUID && st.ClusterAppRunning == running && st.KubeStatus != apps.KubeUnknown {
					return st.ChangedAt
				}
			}
			select {
			case <-changes:
			case <-deadline:
				b.Fatalf("agent did not publish cluster_app_running=%v", running)
			}
		}
	}
	waitState(false)
	var latencies []time.Duration
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("bench-detect-%d", i)
		_, err := cs.CoreV1().Pods(kube.AppNamespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kube.LabelAppUUID: app.UUID, kube.LabelAppName: app.DisplayName}},
			Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: app.Image}}},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var watched time.Time
		select {
		case watched = <-ready:
		case <-time.After(30 * time.Second):
			b.Fatal("pod never turned Running")
		}
		published := waitState(true)
		latencies = append(latencies, max(published.Sub(watched), 0))
		if err := cs.CoreV1().Pods(kube.AppNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			b.Fatal(err)
		}
		waitState(false)
	}
	b.StopTimer()
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[min(len(latencies)-1, int(p*float64(len(latencies))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
