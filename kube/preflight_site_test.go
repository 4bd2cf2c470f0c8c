package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	// Its only replica on node-b, in use on node-a.
	site.Volume(t, "vol-late-lh", sitebox.VolumeOptions{Replicas: 1, ReplicaOn: "node-b", UsedOn: "node-a"})
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
