package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// Issue 11 item 3: whether Longhorn is installed is asked for every action,
// not taken from when the snapshot started. A console opened before
// Longhorn existed hands the preflight a Data without Longhorn; the
// preflight must still find node-b's only replica.
func TestCheckDrainFindsLonghornTheSnapshotMissed(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	clients := site.Clients(t)
	ctx := context.Background()
	volumes := clients.Longhorn.LonghornV1beta2().Volumes(kube.LonghornNamespace)
	vol := sitebox.LonghornVolume("vol-late-lh", 1<<30, 1)
	vol.Annotations = map[string]string{sitebox.AnnotationFirstReplica: "node-b"}
	if _, err := volumes.Create(ctx, vol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = volumes.Delete(context.Background(), vol.Name, metav1.DeleteOptions{}) })
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		v, err := volumes.Get(ctx, vol.Name, metav1.GetOptions{})
		return err == nil && v.Status.Robustness == lhv1beta2.VolumeRobustnessHealthy, nil
	}); err != nil {
		t.Fatal("the volume never turned healthy")
	}
	nodes, err := clients.Core.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What a snapshot started before Longhorn was installed holds.
	d := kube.Data{HasLonghorn: false}
	for i := range nodes.Items {
		d.Nodes = append(d.Nodes, &nodes.Items[i])
	}
	p, err := kube.CheckDrain(ctx, clients, d, "node-b", kube.DrainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(p.Refusals, "\n"), "node-b holds the only healthy replica of vol-late-lh") {
		t.Fatalf("the preflight did not look for Longhorn itself: refusals %q warnings %q", p.Refusals, p.Warnings)
	}
}
