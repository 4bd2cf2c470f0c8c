package apps

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
)

// The agent's memory by node and by app follows what exists: a site whose
// nodes are replaced one after another and whose apps come and go keeps
// as many entries as there are nodes and apps now, not as many as ever
// were (an agent runs for years).
func TestAgentMemoryFollowsChurn(t *testing.T) {
	a := &Controller{opts: Options{NodeName: "node-a", Metrics: NewMetrics(), Leader: func() LeaderState { return LeaderState{} }},
		log: slog.New(slog.DiscardHandler), timeline: NewTimeline(50),
		lastRunning: map[string]string{}, nodeReady: map[string]bool{}, lostSeen: map[string]bool{}}
	node := func(name string, ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	}
	now := time.Now()
	for i := range 200 {
		// node-a stays; each round another node joins in place of the
		// last, and another app runs on it (pinned, its node lost).
		joined := node(fmt.Sprintf("node-%d", i), corev1.ConditionUnknown)
		d := kube.Data{Nodes: []*corev1.Node{node("node-a", corev1.ConditionTrue), joined}, Health: kube.Health{Connected: true}}
		nodes := map[string]*corev1.Node{"node-a": d.Nodes[0], joined.Name: joined}
		a.followNodes(d, true, now)
		uuid := fmt.Sprintf("d0000000-0000-4000-8000-%012d", i)
		st := PublishedApp{UUID: uuid, Name: fmt.Sprintf("app-%d", i), KubeStatus: KubeRunning, Node: joined.Name,
			Lost: &LostApp{Node: joined.Name, Since: now}}
		a.publish([]PublishedApp{st}, d, nodes, true, now)
		if a.lastRunning[uuid] != joined.Name || !a.lostSeen[uuid] || !a.nodeReady["node-a"] {
			t.Fatalf("round %d: the memory lost what exists: lastRunning %v lostSeen %v nodeReady %v", i, a.lastRunning, a.lostSeen, a.nodeReady)
		}
	}
	if len(a.nodeReady) != 2 || len(a.lastRunning) != 1 || len(a.lostSeen) != 1 {
		t.Fatalf("after 200 nodes and apps came and went: nodeReady %d entries (want 2), lastRunning %d (want 1), lostSeen %d (want 1)",
			len(a.nodeReady), len(a.lastRunning), len(a.lostSeen))
	}
}
