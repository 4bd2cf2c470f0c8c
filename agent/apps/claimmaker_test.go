package apps

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Who makes a volume's claim: its designated node, unless that node's
// agent reaches the cluster with its node's identity (NodeRestriction
// admits no claim from a node); the stats leader, a server, makes those
// of the volumes designated to a worker.
func TestClaimMaker(t *testing.T) {
	node := func(name string, server bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if server {
			n.Labels["node-role.kubernetes.io/control-plane"] = "true"
		}
		return n
	}
	obs := observation{myUUID: "uuid-a",
		nodes:      map[string]*corev1.Node{"node-a": node("node-a", true), "node-b": node("node-b", true), "node-w": node("node-w", false)},
		nodeByUUID: map[string]string{"uuid-a": "node-a", "uuid-b": "node-b", "uuid-w": "node-w"}}
	vol := func(dnid string) VolumeConfig { return VolumeConfig{UUID: "v-" + dnid, DesignatedNodeID: dnid} }
	for _, tc := range []struct {
		name                string
		nodeIdentity, leads bool
		volume              VolumeConfig
		want                bool
	}{
		{"a server's own volume", false, false, vol("uuid-a"), true},
		{"its own volume, on its node's identity", true, false, vol("uuid-a"), false},
		{"another server's volume, leading", false, true, vol("uuid-b"), false},
		{"a worker's volume, leading", false, true, vol("UUID-W"), true},
		{"a worker's volume, not leading", false, false, vol("uuid-w"), false},
		{"a worker's volume, leading on a node's identity", true, true, vol("uuid-w"), false},
		{"a volume of a node not in the cluster, leading", false, true, vol("uuid-gone"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Controller{opts: Options{NodeIdentity: tc.nodeIdentity, Leader: func() LeaderState { return LeaderState{IsLeader: tc.leads} }}}
			if got := c.claimWriter(obs)(tc.volume.DesignatedNodeID); got != tc.want {
				t.Errorf("makes the claim: %v, want %v", got, tc.want)
			}
		})
	}
}
