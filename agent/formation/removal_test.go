package formation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
	"github.com/sitecon/sitecon/kube"
)

// Removed means both: the Node seen before and gone, and the record of the
// same cluster without the node. Either alone, or an unsynced view, is not.
func TestRemovedFromCluster(t *testing.T) {
	const cluster = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	record := func(id, nodes string) *corev1.ConfigMap {
		return &corev1.ConfigMap{Data: map[string]string{kube.ClusterKeyID: id, kube.ClusterKeyNodes: nodes}}
	}
	cases := []struct {
		name    string
		view    RemovalView
		removed bool
	}{
		{"removed", RemovalView{SeenOwnNode: true, Record: record(cluster, "node-a,node-c")}, true},
		{"cluster id in another case", RemovalView{SeenOwnNode: true, Record: record(strings.ToUpper(cluster), "node-a")}, true},
		{"never seen: not registered yet", RemovalView{Record: record(cluster, "node-a,node-c")}, false},
		{"Node present", RemovalView{SeenOwnNode: true, NodePresent: true, Record: record(cluster, "node-a")}, false},
		{"still listed: a Node deleted by hand", RemovalView{SeenOwnNode: true, Record: record(cluster, "node-a, node-b")}, false},
		{"no record", RemovalView{SeenOwnNode: true}, false},
		{"another cluster's record", RemovalView{SeenOwnNode: true, Record: record("another", "node-a")}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			removed, evidence := RemovedFromCluster(cluster, "node-b", tc.view)
			if removed != tc.removed || removed != (evidence != "") {
				t.Errorf("removed %v (%q), want %v", removed, evidence, tc.removed)
			}
		})
	}
}

// The hold applies to the cluster and node it names; an unreadable marker
// holds; a join clears it.
func TestRemovalHold(t *testing.T) {
	v := agenttest.Validated(t, nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "removed.json")
	if err := RemovalHold(v, path); err != nil {
		t.Fatalf("no marker: %v", err)
	}
	if err := MarkRemoved(path, RemovedMarker{ClusterID: v.ClusterID, NodeName: v.NodeName, Evidence: "seen"}); err != nil {
		t.Fatal(err)
	}
	if err := RemovalHold(v, path); err == nil || !strings.Contains(err.Error(), "sitecon form --join") {
		t.Fatalf("hold = %v", err)
	}
	other := agenttest.Validated(t, func(c *config.Config) { c.NodeName = "node-x" })
	if err := RemovalHold(other, path); err != nil {
		t.Errorf("another node's config held: %v", err)
	}
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemovalHold(v, path); err == nil || !strings.Contains(err.Error(), "cannot tell") {
		t.Errorf("unreadable marker: %v", err)
	}
}
