package views

import (
	"strings"
	"testing"

	"github.com/sitecon/sitecon/kube"
)

// A cut replicas column must not hide the replica in trouble: on the
// screen, failed and rebuilding replicas come first; `sitecon status`,
// never cut, keeps node order.
func TestReplicasOnScreenProblemsFirst(t *testing.T) {
	v := kube.VolumeStatus{WantReplicas: 3, Replicas: []kube.ReplicaStatus{
		{Node: "node-a", State: kube.ReplicaHealthy},
		{Node: "node-b", State: kube.ReplicaRebuilding, Progress: 42},
		{Node: "node-c", State: kube.ReplicaFailed},
	}}
	if got := replicasOnScreen.list(v); !strings.HasPrefix(got, "node-c✗ node-b↻42% node-a✓") {
		t.Errorf("on screen: %q, want the failed replica first, then the rebuilding one", got)
	}
	if got := replicasInStatus.list(v); got != "node-a:healthy node-b:rebuilding(42%) node-c:failed" {
		t.Errorf("in status: %q, want node order", got)
	}
	if v.Replicas[0].Node != "node-a" {
		t.Error("listing reordered the volume's own replicas")
	}
}
