package safety_test

// The drain/remove/replace preflight judged over plain values. These live
// here, not in kube, because kube's test binary boots a sitebox control
// plane in TestMain: these need none and run anywhere.

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/kube/safety"
)

var (
	t0      = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	servers = map[string]string{"node-role.kubernetes.io/control-plane": "true", kube.LabelEtcd: "true"}
	workers = map[string]string{"node-role.kubernetes.io/agent": "true"}
)

func stamp(d time.Duration) string { return t0.Add(d).Format(time.RFC3339) }

func mkNode(name string, ready bool, labels map[string]string) *corev1.Node {
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionUnknown
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}},
	}
}

func mkVolume(name string, state lhv1beta2.VolumeState, robustness lhv1beta2.VolumeRobustness) *lhv1beta2.Volume {
	v := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: name}}
	v.Status.State, v.Status.Robustness = state, robustness
	v.Status.KubernetesStatus.Namespace, v.Status.KubernetesStatus.PVCName = kube.AppNamespace, name+"-claim"
	return v
}

// cordoned is n made unschedulable.
func cordoned(n *corev1.Node) *corev1.Node {
	n = n.DeepCopy()
	n.Spec.Unschedulable = true
	return n
}

// mkReplica: healthyAt/failedAt "" means unset.
func mkReplica(name, volume, node string, state lhv1beta2.InstanceState, healthyAt, failedAt string) *lhv1beta2.Replica {
	r := &lhv1beta2.Replica{ObjectMeta: metav1.ObjectMeta{Name: name}}
	r.Spec.VolumeName, r.Spec.NodeID, r.Spec.Active = volume, node, true
	r.Spec.HealthyAt, r.Spec.LastHealthyAt = healthyAt, healthyAt
	r.Spec.FailedAt, r.Spec.LastFailedAt = failedAt, failedAt
	r.Status.CurrentState = state
	return r
}

// site is three Ready servers, a worker, and a running volume replicated
// on all three servers.
func site() kube.Data {
	return kube.Data{
		HasLonghorn: true,
		Nodes: []*corev1.Node{
			mkNode("node-a", true, servers), mkNode("node-b", true, servers), mkNode("node-c", true, servers),
			mkNode("node-w", true, workers),
		},
		Volumes: []*lhv1beta2.Volume{mkVolume("vol-safe", lhv1beta2.VolumeStateAttached, lhv1beta2.VolumeRobustnessHealthy)},
		Replicas: []*lhv1beta2.Replica{
			mkReplica("s-a", "vol-safe", "node-a", lhv1beta2.InstanceStateRunning, stamp(0), ""),
			mkReplica("s-b", "vol-safe", "node-b", lhv1beta2.InstanceStateRunning, stamp(0), ""),
			mkReplica("s-c", "vol-safe", "node-c", lhv1beta2.InstanceStateRunning, stamp(0), ""),
		},
	}
}

// withVolume adds a volume and its replicas to the site.
func withVolume(v *lhv1beta2.Volume, reps ...*lhv1beta2.Replica) func(*change.DrainCheck) {
	return func(c *change.DrainCheck) {
		c.Data.Volumes = append(c.Data.Volumes, v)
		c.Data.Replicas = append(c.Data.Replicas, reps...)
	}
}

type preflightCase struct {
	node     string
	edits    []func(*change.DrainCheck)
	refusals []string // each must appear in a refusal
	warnings []string // each must appear in a warning
	notes    []string // each must appear in a note
	// clean: neither refusals nor warnings, whatever the lists say.
	clean bool
	// unpublished: no etcd member list at all. Otherwise, unless an edit
	// published one, the site's agents have just published etcd's own
	// list, which names the Nodes with the etcd role label (etcdOfNodes).
	unpublished bool
}

func runPreflight(t *testing.T, tc preflightCase) safety.Preflight {
	t.Helper()
	c := change.DrainCheck{Node: tc.node, Data: site()}
	for _, edit := range tc.edits {
		edit(&c)
	}
	if !tc.unpublished {
		etcdOfNodes(&c)
	}
	p := safety.DrainPreflight(c.Facts())
	if tc.clean && (p.Refused() || p.NeedsForce()) {
		t.Fatalf("want nothing in the way; refusals %q warnings %q", p.Refusals, p.Warnings)
	}
	if !tc.clean && len(tc.refusals) == 0 && p.Refused() {
		t.Errorf("unexpected refusals %q", p.Refusals)
	}
	if !tc.clean && len(tc.warnings) == 0 && p.NeedsForce() {
		t.Errorf("unexpected warnings %q", p.Warnings)
	}
	for _, want := range tc.refusals {
		if !strings.Contains(strings.Join(p.Refusals, "\n"), want) {
			t.Errorf("refusals %q lack %q", p.Refusals, want)
		}
	}
	for _, want := range tc.warnings {
		if !strings.Contains(strings.Join(p.Warnings, "\n"), want) {
			t.Errorf("warnings %q lack %q", p.Warnings, want)
		}
	}
	for _, want := range tc.notes {
		if !strings.Contains(strings.Join(p.Notes, "\n"), want) {
			t.Errorf("notes %q lack %q", p.Notes, want)
		}
	}
	return p
}

// Issue 11 item 3: every replica that holds the volume's data counts, not
// only running ones.
func TestDrainCountsReplicasThatHoldData(t *testing.T) {
	detached := func(name string) *lhv1beta2.Volume {
		return mkVolume(name, lhv1beta2.VolumeStateDetached, lhv1beta2.VolumeRobustnessUnknown)
	}
	deleting := mkReplica("d-c", "vol-d", "node-c", lhv1beta2.InstanceStateRunning, stamp(0), "")
	deleting.DeletionTimestamp = &metav1.Time{Time: t0}
	for name, tc := range map[string]preflightCase{
		"a stopped app's only copy is on the node": {node: "node-b", edits: []func(*change.DrainCheck){
			withVolume(detached("vol-stopped"), mkReplica("st-b", "vol-stopped", "node-b", lhv1beta2.InstanceStateStopped, stamp(0), "")),
		}, warnings: []string{"node-b holds the only up-to-date copy of vol-stopped (eve-kube-app/vol-stopped-claim)"}},
		"a stopped copy elsewhere is a copy": {node: "node-b", edits: []func(*change.DrainCheck){
			withVolume(detached("vol-stopped"),
				mkReplica("st-b", "vol-stopped", "node-b", lhv1beta2.InstanceStateStopped, stamp(0), ""),
				mkReplica("st-c", "vol-stopped", "node-c", lhv1beta2.InstanceStateStopped, stamp(0), "")),
		}, clean: true},
		"a stopped copy elsewhere keeps a running volume's data": {node: "node-b", edits: []func(*change.DrainCheck){
			// The other replica's instance is stopped for a moment (its
			// instance manager restarting): its data is current.
			withVolume(mkVolume("vol-1", lhv1beta2.VolumeStateAttached, lhv1beta2.VolumeRobustnessDegraded),
				mkReplica("one-b", "vol-1", "node-b", lhv1beta2.InstanceStateRunning, stamp(0), ""),
				mkReplica("one-c", "vol-1", "node-c", lhv1beta2.InstanceStateStopped, stamp(0), "")),
		}, clean: true},
		"a replica elsewhere that was never healthy holds nothing": {node: "node-b", edits: []func(*change.DrainCheck){
			withVolume(mkVolume("vol-rb", lhv1beta2.VolumeStateAttached, lhv1beta2.VolumeRobustnessDegraded),
				mkReplica("rb-b", "vol-rb", "node-b", lhv1beta2.InstanceStateRunning, stamp(0), ""),
				mkReplica("rb-c", "vol-rb", "node-c", lhv1beta2.InstanceStateRunning, "", "")),
		}, refusals: []string{"node-b holds the only healthy replica of vol-rb"}},
		"a failed replica elsewhere is stale while a good one lives": {node: "node-b", edits: []func(*change.DrainCheck){
			withVolume(mkVolume("vol-f", lhv1beta2.VolumeStateAttached, lhv1beta2.VolumeRobustnessDegraded),
				mkReplica("f-b", "vol-f", "node-b", lhv1beta2.InstanceStateRunning, stamp(0), ""),
				mkReplica("f-c", "vol-f", "node-c", lhv1beta2.InstanceStateError, stamp(0), stamp(time.Hour))),
		}, refusals: []string{"node-b holds the only healthy replica of vol-f"}},
		"all failed: the latest to fail is the copy Longhorn salvages": {node: "node-b", edits: []func(*change.DrainCheck){
			// node-c's replica failed an hour before node-b's: node-b's
			// holds the hour of writes in between.
			withVolume(mkVolume("vol-salv", lhv1beta2.VolumeStateDetached, lhv1beta2.VolumeRobustnessFaulted),
				mkReplica("sv-b", "vol-salv", "node-b", lhv1beta2.InstanceStateError, stamp(0), stamp(2*time.Hour)),
				mkReplica("sv-c", "vol-salv", "node-c", lhv1beta2.InstanceStateError, stamp(0), stamp(time.Hour))),
		}, warnings: []string{"node-b holds the only up-to-date copy of vol-salv"}},
		"all failed together: either copy can be salvaged": {node: "node-b", edits: []func(*change.DrainCheck){
			withVolume(mkVolume("vol-salv", lhv1beta2.VolumeStateDetached, lhv1beta2.VolumeRobustnessFaulted),
				mkReplica("sv-b", "vol-salv", "node-b", lhv1beta2.InstanceStateError, stamp(0), stamp(time.Hour)),
				mkReplica("sv-c", "vol-salv", "node-c", lhv1beta2.InstanceStateError, stamp(0), stamp(time.Hour+30*time.Second))),
		}, clean: true},
		"a copy on a NotReady node is no copy to count on": {node: "node-b", edits: []func(*change.DrainCheck){
			func(c *change.DrainCheck) { c.Data.Nodes = append(c.Data.Nodes, mkNode("node-x", false, workers)) },
			withVolume(mkVolume("vol-x", lhv1beta2.VolumeStateAttached, lhv1beta2.VolumeRobustnessHealthy),
				mkReplica("x-b", "vol-x", "node-b", lhv1beta2.InstanceStateRunning, stamp(0), ""),
				// Longhorn has not marked it failed yet: it still says running.
				mkReplica("x-x", "vol-x", "node-x", lhv1beta2.InstanceStateRunning, stamp(0), "")),
		}, refusals: []string{"node-b holds the only healthy replica of vol-x"}},
		"a copy on a cordoned (draining) node is no home to count on": {node: "node-b", edits: []func(*change.DrainCheck){
			// Every node asked for a drain at once (a whole-site power-down):
			// node-c is cordoned on its way down too.
			func(c *change.DrainCheck) { c.Data.Nodes[2] = cordoned(c.Data.Nodes[2]) },
			withVolume(mkVolume("vol-k", lhv1beta2.VolumeStateAttached, lhv1beta2.VolumeRobustnessHealthy),
				mkReplica("k-b", "vol-k", "node-b", lhv1beta2.InstanceStateRunning, stamp(0), ""),
				mkReplica("k-c", "vol-k", "node-c", lhv1beta2.InstanceStateRunning, stamp(0), "")),
		}, refusals: []string{"node-b holds the only healthy replica of vol-k"},
			notes: []string{"vol-k (eve-kube-app/vol-k-claim): the copy on node-c is cordoned (draining or out of service) does not count"}},
		"a copy on a node that is gone is no copy": {node: "node-b", edits: []func(*change.DrainCheck){
			withVolume(mkVolume("vol-g", lhv1beta2.VolumeStateAttached, lhv1beta2.VolumeRobustnessHealthy),
				mkReplica("g-b", "vol-g", "node-b", lhv1beta2.InstanceStateRunning, stamp(0), ""),
				mkReplica("g-z", "vol-g", "node-removed", lhv1beta2.InstanceStateRunning, stamp(0), "")),
		}, refusals: []string{"node-b holds the only healthy replica of vol-g"}},
		"a copy being deleted is no copy": {node: "node-b", edits: []func(*change.DrainCheck){
			withVolume(mkVolume("vol-d", lhv1beta2.VolumeStateAttached, lhv1beta2.VolumeRobustnessHealthy),
				mkReplica("d-b", "vol-d", "node-b", lhv1beta2.InstanceStateRunning, stamp(0), ""), deleting),
		}, refusals: []string{"node-b holds the only healthy replica of vol-d"}},
		"a never-healthy replica here holds nothing to lose": {node: "node-b", edits: []func(*change.DrainCheck){
			withVolume(mkVolume("vol-new", lhv1beta2.VolumeStateDetached, lhv1beta2.VolumeRobustnessUnknown),
				mkReplica("n-b", "vol-new", "node-b", lhv1beta2.InstanceStateStopped, "", "")),
		}, clean: true},
		"Longhorn copies a stopped volume off first too": {node: "node-b", edits: []func(*change.DrainCheck){
			withVolume(detached("vol-stopped"), mkReplica("st-b", "vol-stopped", "node-b", lhv1beta2.InstanceStateStopped, stamp(0), "")),
			func(c *change.DrainCheck) { c.LonghornPolicy = "block-for-eviction" },
		}, warnings: []string{"node-b holds the only up-to-date copy of vol-stopped", "Longhorn (block-for-eviction) copies it off first"}},
		"under always-allow nothing but this check guards the replicas": {node: "node-b", edits: []func(*change.DrainCheck){
			func(c *change.DrainCheck) { c.LonghornPolicy = "always-allow" },
		}, warnings: []string{"always-allow"}},
		"always-allow says nothing for a node without replicas": {node: "node-w", edits: []func(*change.DrainCheck){
			func(c *change.DrainCheck) { c.LonghornPolicy = "always-allow" },
		}, clean: true},
	} {
		t.Run(name, func(t *testing.T) { runPreflight(t, tc) })
	}
}

// Issue 10 item 4: quorum is arithmetic over the etcd members.
func TestDrainQuorumArithmetic(t *testing.T) {
	dropNode := func(name string) func(*change.DrainCheck) {
		return func(c *change.DrainCheck) {
			for i, n := range c.Data.Nodes {
				if n.Name == name {
					c.Data.Nodes = append(c.Data.Nodes[:i:i], c.Data.Nodes[i+1:]...)
					return
				}
			}
		}
	}
	addServer := func(name string, ready bool) func(*change.DrainCheck) {
		return func(c *change.DrainCheck) { c.Data.Nodes = append(c.Data.Nodes, mkNode(name, ready, servers)) }
	}
	for name, tc := range map[string]preflightCase{
		"two members left: either one down loses quorum": {node: "node-a", edits: []func(*change.DrainCheck){dropNode("node-c")},
			refusals: []string{"2 etcd members, all healthy; draining node-a leaves 1 of the 2 needed"}},
		"three members: one out leaves exactly a quorum": {node: "node-a", clean: true,
			notes: []string{"3 etcd members, all healthy; draining node-a leaves 2 of the 2 needed: one more failure loses quorum"}},
		"five members, one down: a drain still leaves a quorum": {node: "node-a", clean: true,
			edits: []func(*change.DrainCheck){addServer("node-d", true), addServer("node-e", false)}},
		"five members, two down: a drain would lose quorum": {node: "node-a",
			edits:    []func(*change.DrainCheck){addServer("node-d", false), addServer("node-e", false)},
			refusals: []string{"5 etcd members, 2 unhealthy (node-d: NotReady, node-e: NotReady); draining node-a leaves 2 of the 3 needed"}},
		"a cordoned member is not counted healthy": {node: "node-a",
			edits:    []func(*change.DrainCheck){func(c *change.DrainCheck) { c.Data.Nodes[1].Spec.Unschedulable = true }},
			refusals: []string{"3 etcd members, 1 unhealthy (node-b: cordoned); draining node-a leaves 1 of the 2 needed"}},
		"a worker's drain does not touch etcd": {node: "node-w", clean: true,
			edits: []func(*change.DrainCheck){dropNode("node-c")}},
	} {
		t.Run(name, func(t *testing.T) { runPreflight(t, tc) })
	}
}

// etcdMember is one member of a published etcd member list.
type etcdMember struct {
	node    string
	healthy bool
	err     string
	learner bool
}

func healthyMember(node string) etcdMember { return etcdMember{node: node, healthy: true} }

// etcdOfNodes publishes, unless a list is published already, the list a
// healthy etcd gives on a site whose etcd members are the Nodes with the
// etcd role label, as the first of them observed it a second ago.
func etcdOfNodes(c *change.DrainCheck) {
	for _, cm := range c.Data.ConfigMaps {
		if cm.Name == kube.EtcdMembersConfigMapName {
			return
		}
	}
	var members []etcdMember
	for _, n := range c.Data.Nodes {
		if kube.IsEtcdMember(n) {
			members = append(members, healthyMember(n.Name))
		}
	}
	if len(members) > 0 {
		published(members[0].node, time.Second, members...)(c)
	}
}

// published adds observer's view of etcd, observed age ago (negative: dated
// in the future), under its own key of the sitecon-etcd-members ConfigMap.
func published(observer string, age time.Duration, members ...etcdMember) func(*change.DrainCheck) {
	return publishedAs(observer, observer, age, members...)
}

// publishedAs adds a view under key that claims to be observedBy's.
func publishedAs(key, observedBy string, age time.Duration, members ...etcdMember) func(*change.DrainCheck) {
	return func(c *change.DrainCheck) {
		var list []string
		for i, m := range members {
			// k3s names a member after its node with a random suffix.
			list = append(list, fmt.Sprintf(`{"id":"%x","name":"%s-%08x","peerURLs":["https://10.244.244.%d:2380"],"clientURLs":["https://10.244.244.%d:2379"],"learner":%v,"healthy":%v,"error":%q}`,
				uint64(0x8e9e05c52164694d)+uint64(i), m.node, 0x1a2b3c4d+i, i+1, i+1, m.learner, m.healthy, m.err))
		}
		view := fmt.Sprintf(`{"observedBy":%q,"observedAt":%q,"endpoint":"https://127.0.0.1:2379","members":[%s]}`,
			observedBy, time.Now().Add(-age).UTC().Format(time.RFC3339), strings.Join(list, ","))
		for _, cm := range c.Data.ConfigMaps {
			if cm.Name == "sitecon-etcd-members" {
				cm.Data[key] = view
				return
			}
		}
		c.Data.ConfigMaps = append(c.Data.ConfigMaps, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "sitecon-etcd-members", Namespace: kube.AppNamespace},
			Data:       map[string]string{key: view},
		})
	}
}

// Issue 10 item 4: the member list comes from etcd itself, as the server
// nodes' agents publish it (ConfigMap sitecon-etcd-members, one key per
// observing node), not from the Nodes' etcd role label. A list that is
// missing or stale is not counted, and nothing stands in for it (issue
// 36): the verdict refuses and says what was read, when, and what to do.
func TestDrainQuorumFromEtcdMemberList(t *testing.T) {
	type member = etcdMember
	healthy := healthyMember
	notReady := func(name string) func(*change.DrainCheck) {
		return func(c *change.DrainCheck) {
			for i, n := range c.Data.Nodes {
				if n.Name == name {
					c.Data.Nodes[i] = mkNode(name, false, n.Labels)
				}
			}
		}
	}
	for name, tc := range map[string]preflightCase{
		"etcd says a member is unhealthy that the Nodes do not show": {node: "node-a",
			edits: []func(*change.DrainCheck){published("node-a", 5*time.Second,
				healthy("node-a"), healthy("node-b"), member{node: "node-c", err: "context deadline exceeded"})},
			refusals: []string{"3 etcd members, 1 unhealthy (node-c: etcd: context deadline exceeded); draining node-a leaves 1 of the 2 needed"},
			notes:    []string{"etcd members as etcd lists them (observed by node-a 5s ago)"}},
		"etcd lists two members: the third Node's label does not make it one": {node: "node-a",
			edits:    []func(*change.DrainCheck){published("node-b", 5*time.Second, healthy("node-a"), healthy("node-b"))},
			refusals: []string{"2 etcd members, all healthy; draining node-a leaves 1 of the 2 needed"}},
		"a learner does not vote": {node: "node-a", clean: true,
			edits: []func(*change.DrainCheck){published("node-a", 5*time.Second,
				healthy("node-a"), healthy("node-b"), healthy("node-c"), member{node: "node-w", healthy: true, learner: true})},
			notes: []string{"3 etcd members, all healthy; draining node-a leaves 2 of the 2 needed", "node-w is a learner (joining; it does not vote yet)"}},
		"a member healthy in etcd on a NotReady node is not counted on": {node: "node-a",
			edits:    []func(*change.DrainCheck){published("node-a", 5*time.Second, healthy("node-a"), healthy("node-b"), healthy("node-c")), notReady("node-c")},
			refusals: []string{"3 etcd members, 1 unhealthy (node-c: NotReady); draining node-a leaves 1 of the 2 needed"}},
		"a stale list: refused, with what was read and when": {node: "node-a",
			edits: []func(*change.DrainCheck){published("node-a", 10*time.Minute,
				healthy("node-a"), healthy("node-b"), member{node: "node-c", err: "context deadline exceeded"})},
			refusals: []string{"etcd's quorum is unknown, so draining node-a cannot be judged: etcd's member list is stale: its freshest entry was observed by node-a at ",
				"10m0s ago by this clock (more than the 1m30s allowed)", "check the servers' agents (sitecon status) and the nodes' clocks, then try again"},
			notes: []string{"the Nodes' etcd role label names node-a, node-b, node-c: not counted"}},
		"no list: refused, and that is said": {node: "node-a", unpublished: true,
			refusals: []string{"etcd's quorum is unknown, so draining node-a cannot be judged: etcd's member list is not published (no ConfigMap eve-kube-app/sitecon-etcd-members)",
				"check that they run (sitecon status), then try again"}},
		"the freshest observation counts": {node: "node-a",
			edits: []func(*change.DrainCheck){
				published("node-b", 50*time.Second, healthy("node-a"), healthy("node-b"), healthy("node-c")),
				published("node-c", 2*time.Second, healthy("node-a"), member{node: "node-b", err: "etcdserver: no leader"}, healthy("node-c")),
			},
			refusals: []string{"3 etcd members, 1 unhealthy (node-b: etcd: etcdserver: no leader); draining node-a leaves 1 of the 2 needed"}},
	} {
		t.Run(name, func(t *testing.T) { runPreflight(t, tc) })
	}
}

// Issue 19 §4: the published member list cannot be forged or go stale. An
// entry counts only when a current server wrote it under its own name and
// its time is not ahead of this clock by more than kube.EtcdMembersMaxSkew;
// a member no Node stands for is not counted on.
func TestDrainQuorumTrustsOnlyCurrentServers(t *testing.T) {
	cDown := etcdMember{node: "node-c", err: "context deadline exceeded"}
	honest := published("node-a", 5*time.Second, healthyMember("node-a"), healthyMember("node-b"), cDown)
	allHealthy := []etcdMember{healthyMember("node-a"), healthyMember("node-b"), healthyMember("node-c")}
	const lost = "3 etcd members, 1 unhealthy (node-c: etcd: context deadline exceeded); draining node-a leaves 1 of the 2 needed"
	for name, tc := range map[string]preflightCase{
		"an entry dated an hour ahead does not win": {node: "node-a",
			edits:    []func(*change.DrainCheck){honest, published("node-b", -time.Hour, allHealthy...)},
			refusals: []string{lost},
			notes: []string{"etcd members as etcd lists them (observed by node-a 5s ago)",
				"entry node-b ignored: dated 59m5", "ahead of this clock, more than the 30s clock skew allowed"}},
		"a clock a little ahead is within the skew": {node: "node-a",
			edits:    []func(*change.DrainCheck){published("node-b", -10*time.Second, healthyMember("node-a"), healthyMember("node-b"), cDown)},
			refusals: []string{lost},
			notes:    []string{"etcd members as etcd lists them (observed by node-b 0s ago)"}},
		"a worker's entry does not count": {node: "node-a",
			edits:    []func(*change.DrainCheck){honest, published("node-w", time.Second, allHealthy...)},
			refusals: []string{lost},
			notes:    []string{"entry node-w ignored: node-w is not a server (no node-role.kubernetes.io/etcd label)"}},
		"an entry from a node not in the cluster does not count": {node: "node-a",
			edits:    []func(*change.DrainCheck){honest, published("node-x", time.Second, allHealthy...)},
			refusals: []string{lost},
			notes:    []string{"entry node-x ignored: node-x is not a node of the cluster"}},
		"an entry under one key claiming another observer does not count": {node: "node-a",
			edits:    []func(*change.DrainCheck){honest, publishedAs("node-w", "node-b", time.Second, allHealthy...)},
			refusals: []string{lost},
			notes:    []string{`entry node-w ignored: it says it was observed by "node-b"`}},
		"only untrusted entries: refused, each said": {node: "node-a",
			edits: []func(*change.DrainCheck){published("node-w", time.Second, allHealthy...), published("node-b", -time.Hour, allHealthy...)},
			refusals: []string{"etcd's member list in eve-kube-app/sitecon-etcd-members has no entry a current server wrote",
				"entry node-b ignored: dated", "entry node-w ignored: node-w is not a server",
				"check the nodes' clocks"}},
		"a member no Node stands for is not counted on": {node: "node-a",
			edits:    []func(*change.DrainCheck){published("node-a", 5*time.Second, append(allHealthy, healthyMember("node-gone"))...)},
			refusals: []string{"4 etcd members, 1 unhealthy (node-gone-1a2b3c50: no Node in the cluster stands for this member); draining node-a leaves 2 of the 3 needed"}},
	} {
		t.Run(name, func(t *testing.T) { runPreflight(t, tc) })
	}
}

// Issue 36 A: a clock a minute off made every entry of the member list
// look future-dated, and the quorum arithmetic counted the Nodes' etcd
// role label instead, which misses a member without a Node (right after
// a node remove): a drain that lost quorum passed with a note. A list
// that cannot be counted on leaves quorum unknown, and whatever needs
// quorum is refused with what was read, when, and what to do.
func TestDrainRefusesAnUnknownQuorum(t *testing.T) {
	purpose := func(p safety.Purpose) func(*change.DrainCheck) { return func(c *change.DrainCheck) { c.Purpose = p } }
	// node-d was just removed: its Node is gone, its member not yet.
	withD := []etcdMember{healthyMember("node-a"), healthyMember("node-b"), healthyMember("node-c"), healthyMember("node-d")}
	controlPlaneOnly := func(c *change.DrainCheck) {
		c.Data.Nodes = append(c.Data.Nodes, mkNode("node-s", true, map[string]string{"node-role.kubernetes.io/control-plane": "true"}))
	}
	for name, tc := range map[string]preflightCase{
		"a clock a minute ahead does not switch to the labels": {node: "node-a",
			edits: []func(*change.DrainCheck){published("node-b", -time.Minute, withD...)},
			refusals: []string{"etcd's quorum is unknown, so draining node-a cannot be judged: etcd's member list in eve-kube-app/sitecon-etcd-members has no entry a current server wrote",
				"entry node-b ignored: dated", "ahead of this clock", "check the nodes' clocks (sitecon doctor), then try again"},
			notes: []string{"the Nodes' etcd role label names node-a, node-b, node-c: not counted (it misses a member without a Node, as right after a node remove)"}},
		"the same list in time counts the member without a Node": {node: "node-a",
			edits:    []func(*change.DrainCheck){published("node-b", 5*time.Second, withD...)},
			refusals: []string{"4 etcd members, 1 unhealthy (node-d-1a2b3c50: no Node in the cluster stands for this member); draining node-a leaves 2 of the 3 needed"}},
		"a remove on a stale list": {node: "node-c",
			edits: []func(*change.DrainCheck){purpose(safety.PurposeRemove), published("node-a", 10*time.Minute, withD...),
				func(c *change.DrainCheck) { c.Data.Nodes[2] = mkNode("node-c", false, servers) }},
			refusals: []string{"etcd's quorum is unknown, so removing node-c cannot be judged: etcd's member list is stale"}},
		"a replace with no list": {node: "node-c", unpublished: true,
			edits: []func(*change.DrainCheck){purpose(safety.PurposeReplace),
				func(c *change.DrainCheck) { c.Data.Nodes[2] = mkNode("node-c", false, servers) }},
			refusals: []string{"etcd's quorum is unknown, so replacing node-c cannot be judged: etcd's member list is not published"}},
		"a list that names no voting member is not etcd's": {node: "node-a",
			edits: []func(*change.DrainCheck){published("node-a", time.Second, etcdMember{node: "node-a", healthy: true, learner: true})},
			refusals: []string{"etcd's quorum is unknown, so draining node-a cannot be judged: etcd's member list as node-a observed it",
				"lists no voting member", "wait for a fresh list, then try again"}},
		"a server without the etcd label may still run a member": {node: "node-s", unpublished: true,
			edits:    []func(*change.DrainCheck){controlPlaneOnly},
			refusals: []string{"etcd's quorum is unknown, so draining node-s cannot be judged"}},
		"a worker's drain needs no quorum": {node: "node-w", unpublished: true, clean: true},
	} {
		t.Run(name, func(t *testing.T) { runPreflight(t, tc) })
	}
}

// Issue 36 A, the re-check: a drain or remove confirmed on a fresh list
// is stopped when the list has gone stale by the time it runs.
func TestReconfirmStopsOnAQuorumGoneUnknown(t *testing.T) {
	all := []etcdMember{healthyMember("node-a"), healthyMember("node-b"), healthyMember("node-c")}
	confirmed := runPreflight(t, preflightCase{node: "node-a", clean: true,
		edits: []func(*change.DrainCheck){published("node-b", time.Second, all...)}})
	now := runPreflight(t, preflightCase{node: "node-a",
		edits:    []func(*change.DrainCheck){published("node-b", 5*time.Minute, all...)},
		refusals: []string{"etcd's quorum is unknown"}})
	if reasons := safety.Reconfirm(confirmed, now); len(reasons) == 0 {
		t.Fatalf("the re-check let a drain run on a stale member list: %q", now.Notes)
	}
}

// Issue 36 A, at the source: an untrustworthy list counts no member, so no
// reader (the preflight, the doctor's finding) can count the Nodes' labels
// for etcd's members and call that healthy.
func TestEtcdQuorumMembersCountsNoLabelsForEtcd(t *testing.T) {
	all := []etcdMember{healthyMember("node-a"), healthyMember("node-b"), healthyMember("node-c")}
	for name, edits := range map[string][]func(*change.DrainCheck){
		"not published":        nil,
		"stale":                {published("node-a", 10*time.Minute, all...)},
		"dated a minute ahead": {published("node-a", -time.Minute, all...)},
		"from a worker only":   {published("node-w", time.Second, all...)},
		"no voting member":     {published("node-a", time.Second)},
	} {
		t.Run(name, func(t *testing.T) {
			c := change.DrainCheck{Data: site()}
			for _, edit := range edits {
				edit(&c)
			}
			q := nodestate.EtcdQuorumMembers(c.Data, time.Now())
			if q.FromEtcd || len(q.Members) > 0 {
				t.Fatalf("an untrustworthy list counted %d members (from etcd: %v): %s", len(q.Members), q.FromEtcd, q.Source)
			}
			if !strings.Contains(q.Source, "try again") {
				t.Errorf("the source does not say what to do: %s", q.Source)
			}
		})
	}
}

// appPod puts a pod of app on node (its app pinned or not, in phase)
// into the check's data, and the app into its apps.
func appPod(app, node string, pinned bool, phase corev1.PodPhase) func(*change.DrainCheck) {
	return func(c *change.DrainCheck) {
		mode := kube.AppModeAuto
		if pinned {
			mode = kube.AppModePinned
		}
		c.Apps = append(c.Apps, kube.AppStatus{Name: app, Node: node, Mode: mode})
		c.Data.Pods = append(c.Data.Pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: app + "-pod", Namespace: kube.AppNamespace, Labels: map[string]string{kube.LabelAppName: app}},
			Spec:       corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}})
	}
}

// Issue 10 item 4 and issue 11 item 3 for remove and replace: the node's
// disks and its etcd membership go for good.
func TestRemovePreflight(t *testing.T) {
	purpose := func(p safety.Purpose) func(*change.DrainCheck) { return func(c *change.DrainCheck) { c.Purpose = p } }
	notReady := func(name string) func(*change.DrainCheck) {
		return func(c *change.DrainCheck) {
			for i, n := range c.Data.Nodes {
				if n.Name == name {
					c.Data.Nodes[i] = mkNode(name, false, n.Labels)
				}
			}
		}
	}
	only := func(names ...string) func(*change.DrainCheck) {
		return func(c *change.DrainCheck) {
			var keep []*corev1.Node
			for _, n := range c.Data.Nodes {
				if slices.Contains(names, n.Name) {
					keep = append(keep, n)
				}
			}
			c.Data.Nodes = keep
			c.Data.Volumes, c.Data.Replicas = nil, nil
		}
	}
	stoppedOnlyOnB := withVolume(mkVolume("vol-stopped", lhv1beta2.VolumeStateDetached, lhv1beta2.VolumeRobustnessUnknown),
		mkReplica("st-b", "vol-stopped", "node-b", lhv1beta2.InstanceStateStopped, stamp(0), ""))
	for name, tc := range map[string]preflightCase{
		"a stopped app's only copy is not discarded": {node: "node-b",
			edits:    []func(*change.DrainCheck){purpose(safety.PurposeRemove), notReady("node-b"), stoppedOnlyOnB},
			refusals: []string{"node-b holds the only up-to-date copy of vol-stopped", "removing node-b would discard it"},
			warnings: []string{"after removing node-b: 2 etcd members"}},
		"nor by a replace": {node: "node-b",
			edits:    []func(*change.DrainCheck){purpose(safety.PurposeReplace), notReady("node-b"), stoppedOnlyOnB},
			refusals: []string{"node-b holds the only up-to-date copy of vol-stopped", "replacing node-b would discard it"}},
		"nor when Longhorn would copy it off in a drain": {node: "node-b",
			edits: []func(*change.DrainCheck){purpose(safety.PurposeRemove), notReady("node-b"), stoppedOnlyOnB,
				func(c *change.DrainCheck) { c.LonghornPolicy = "block-for-eviction" }},
			refusals: []string{"node-b holds the only up-to-date copy of vol-stopped"},
			warnings: []string{"after removing node-b: 2 etcd members"}},
		"a dead server out of three: allowed, said out loud": {node: "node-c",
			edits:    []func(*change.DrainCheck){purpose(safety.PurposeRemove), notReady("node-c")},
			warnings: []string{"after removing node-c: 2 etcd members, 2 healthy, quorum needs 2: the cluster no longer tolerates a failure (it takes three servers to)"}},
		"a replace restores the count: a note": {node: "node-c",
			edits: []func(*change.DrainCheck){purpose(safety.PurposeReplace), notReady("node-c")}, clean: true,
			notes: []string{"after replacing node-c: 2 etcd members, 2 healthy, quorum needs 2: the cluster no longer tolerates a failure (it takes three servers to) until the new node has joined"}},
		"a live server while another is down loses quorum": {node: "node-a",
			edits:    []func(*change.DrainCheck){purpose(safety.PurposeRemove), notReady("node-c")},
			refusals: []string{"3 etcd members, 1 unhealthy (node-c: NotReady); removing node-a leaves 1 of the 2 needed"},
			warnings: []string{"node-a is Ready"}},
		"the last server": {node: "node-a",
			edits:    []func(*change.DrainCheck){purpose(safety.PurposeRemove), only("node-a", "node-w"), notReady("node-a")},
			refusals: []string{"node-a is the last server: removing it ends the cluster"}},
		"the node this runs on": {node: "node-c",
			edits:    []func(*change.DrainCheck){purpose(safety.PurposeRemove), notReady("node-c"), func(c *change.DrainCheck) { c.LocalNode = "node-c" }},
			refusals: []string{"node-c is the node this runs on"}, warnings: []string{"no longer tolerates a failure"}},
		"a Ready node needs --force": {node: "node-w",
			edits:    []func(*change.DrainCheck){purpose(safety.PurposeRemove)},
			warnings: []string{"node-w is Ready (the device is alive): removing a live node needs --force"}},
		"a dead worker goes without a word": {node: "node-w",
			edits: []func(*change.DrainCheck){purpose(safety.PurposeRemove), notReady("node-w"), appPod("plc-io", "node-w", true, corev1.PodRunning),
				appPod("old-job", "node-w", false, corev1.PodSucceeded), appPod("plc-gateway", "node-a", false, corev1.PodRunning)}, clean: true},
		// Issue 36 (found by the explorer): deleting a Node deletes its
		// pods at once, and a worker not Ready may be cut off or paused,
		// its app still running: the removal started it elsewhere beside
		// that copy. Evicted (a deletion the device never heard of) or not.
		"a worker not Ready with an app that moves still bound to it": {node: "node-w",
			edits:    []func(*change.DrainCheck){purpose(safety.PurposeRemove), notReady("node-w"), appPod("plc-gateway", "node-w", false, corev1.PodRunning)},
			warnings: []string{"node-w is not Ready, but pods of apps that move are still bound to it", "Power the device off", "--force only if you know the device is off"},
			notes:    []string{"app plc-gateway's pod eve-kube-app/plc-gateway-pod is bound to node-w"}},
		"nor by a replace, evicted or not": {node: "node-w",
			edits: []func(*change.DrainCheck){purpose(safety.PurposeReplace), notReady("node-w"), appPod("plc-gateway", "node-w", false, corev1.PodRunning),
				func(c *change.DrainCheck) {
					c.Data.Pods[len(c.Data.Pods)-1].DeletionTimestamp = &metav1.Time{Time: time.Now()}
				}},
			warnings: []string{"replacing it now starts them elsewhere beside those copies"}},
		// A drain's evictions make the replacements at once: only a
		// volume holds one until the failover's evidence.
		"a drain of a worker not Ready with an app no volume holds": {node: "node-w",
			edits:    []func(*change.DrainCheck){notReady("node-w"), appPod("edge-cache", "node-w", false, corev1.PodRunning)},
			warnings: []string{"draining it now starts them elsewhere beside those copies", "then drain it"},
			notes:    []string{"app edge-cache's pod eve-kube-app/edge-cache-pod is bound to node-w"}},
		"a drain of a worker not Ready whose app a volume holds": {node: "node-w",
			edits: []func(*change.DrainCheck){notReady("node-w"), appPod("plc-gateway", "node-w", false, corev1.PodRunning), func(c *change.DrainCheck) {
				pod := c.Data.Pods[len(c.Data.Pods)-1]
				pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "plc-data"}}}}
			}}, clean: true},
	} {
		t.Run(name, func(t *testing.T) {
			p := runPreflight(t, tc)
			if p.Purpose == "" {
				t.Errorf("the preflight does not say what it was for: %+v", p)
			}
		})
	}
}

// Issue 36 B: `sitecon agent leave` removes the node's etcd member and
// ends its disks' part in the cluster, so it is judged as a removal is:
// the quorum after the leave counts M-1 members and says when the cluster
// no longer tolerates a failure, and a volume whose only up-to-date copy
// is on the node is a refusal, not a warning worded as temporary. What a
// removal judges only because it is done from another node to a dead
// device (the node it runs on, a Ready node) does not apply: a leaving
// node is both.
func TestLeavePreflight(t *testing.T) {
	leave := func(c *change.DrainCheck) { c.Purpose, c.LocalNode = safety.PurposeOf("leave"), c.Node }
	notReady := func(name string) func(*change.DrainCheck) {
		return func(c *change.DrainCheck) {
			for i, n := range c.Data.Nodes {
				if n.Name == name {
					c.Data.Nodes[i] = mkNode(name, false, n.Labels)
				}
			}
		}
	}
	fourth := func(c *change.DrainCheck) { c.Data.Nodes = append(c.Data.Nodes, mkNode("node-d", true, servers)) }
	only := func(names ...string) func(*change.DrainCheck) {
		return func(c *change.DrainCheck) {
			c.Data.Nodes = slices.DeleteFunc(c.Data.Nodes, func(n *corev1.Node) bool { return !slices.Contains(names, n.Name) })
			c.Data.Volumes, c.Data.Replicas = nil, nil
		}
	}
	stoppedOnlyOnB := withVolume(mkVolume("vol-stopped", lhv1beta2.VolumeStateDetached, lhv1beta2.VolumeRobustnessUnknown),
		mkReplica("st-b", "vol-stopped", "node-b", lhv1beta2.InstanceStateStopped, stamp(0), ""))
	for name, tc := range map[string]preflightCase{
		"one of three servers leaving: the cluster no longer tolerates a failure": {node: "node-c",
			edits:    []func(*change.DrainCheck){leave},
			warnings: []string{"after removing node-c: 2 etcd members, 2 healthy, quorum needs 2: the cluster no longer tolerates a failure (it takes three servers to)"}},
		"a detached volume's only copy is refused, not taken along": {node: "node-b",
			edits:    []func(*change.DrainCheck){leave, fourth, stoppedOnlyOnB},
			refusals: []string{"node-b holds the only up-to-date copy of vol-stopped (eve-kube-app/vol-stopped-claim): replica stopped, volume detached; removing node-b would discard it"}},
		"nor when Longhorn would copy it off in a drain": {node: "node-b",
			edits: []func(*change.DrainCheck){leave, fourth, stoppedOnlyOnB,
				func(c *change.DrainCheck) { c.LonghornPolicy = "block-for-eviction" }},
			refusals: []string{"node-b holds the only up-to-date copy of vol-stopped", "removing node-b would discard it"}},
		"an attached volume's only copy is refused": {node: "node-b",
			edits: []func(*change.DrainCheck){leave, fourth, withVolume(mkVolume("vol-1", lhv1beta2.VolumeStateAttached, lhv1beta2.VolumeRobustnessHealthy),
				mkReplica("one-b", "vol-1", "node-b", lhv1beta2.InstanceStateRunning, stamp(0), ""))},
			refusals: []string{"node-b holds the only healthy replica of vol-1", "removing node-b would discard it"}},
		"a leave that loses quorum says the arithmetic": {node: "node-a",
			edits:    []func(*change.DrainCheck){leave, notReady("node-c")},
			refusals: []string{"3 etcd members, 1 unhealthy (node-c: NotReady); removing node-a leaves 1 of the 2 needed"}},
		"the last server does not leave": {node: "node-a",
			edits:    []func(*change.DrainCheck){leave, only("node-a", "node-w")},
			refusals: []string{"node-a is the last server: removing it ends the cluster"}},
		"nor on an unknown member list": {node: "node-c", unpublished: true,
			edits:    []func(*change.DrainCheck){leave, fourth},
			refusals: []string{"etcd's quorum is unknown, so removing node-c cannot be judged"}},
		"the node it runs on, Ready, leaves with a spare": {node: "node-c", clean: true,
			edits: []func(*change.DrainCheck){leave, fourth}},
		"a worker leaves without a word": {node: "node-w", clean: true,
			edits: []func(*change.DrainCheck){leave}},
	} {
		t.Run(name, func(t *testing.T) {
			p := runPreflight(t, tc)
			if p.Purpose == safety.PurposeDrain {
				t.Errorf("a leave was judged as a drain: %+v", p)
			}
		})
	}
}

// A running drain stops when a volume it relies on loses a copy elsewhere
// or turns faulted; the volume degrading because the node's own replica
// went is what a drain does.
func TestDrainHazards(t *testing.T) {
	vol := func(r lhv1beta2.VolumeRobustness) []*lhv1beta2.Volume {
		return []*lhv1beta2.Volume{mkVolume("vol-1", lhv1beta2.VolumeStateAttached, r)}
	}
	healthy := func(name, node string) *lhv1beta2.Replica {
		return mkReplica(name, "vol-1", node, lhv1beta2.InstanceStateRunning, stamp(0), "")
	}
	failed := func(name, node string) *lhv1beta2.Replica {
		return mkReplica(name, "vol-1", node, lhv1beta2.InstanceStateError, stamp(0), stamp(time.Hour))
	}
	start := []*lhv1beta2.Replica{healthy("r-b", "node-b"), healthy("r-a", "node-a"), healthy("r-c", "node-c")}
	before := change.CopiesElsewhere("node-b", vol(lhv1beta2.VolumeRobustnessHealthy), start)
	if before["vol-1"] != 2 {
		t.Fatalf("CopiesElsewhere = %v, want vol-1: 2", before)
	}
	for name, tc := range map[string]struct {
		volumes  []*lhv1beta2.Volume
		replicas []*lhv1beta2.Replica
		want     string
	}{
		"unchanged":                      {vol(lhv1beta2.VolumeRobustnessHealthy), start, ""},
		"the node's own replica went":    {vol(lhv1beta2.VolumeRobustnessDegraded), []*lhv1beta2.Replica{failed("r-b", "node-b"), healthy("r-a", "node-a"), healthy("r-c", "node-c")}, ""},
		"Longhorn copied it off":         {vol(lhv1beta2.VolumeRobustnessHealthy), []*lhv1beta2.Replica{healthy("r-a", "node-a"), healthy("r-c", "node-c"), healthy("r-d", "node-w")}, ""},
		"a copy elsewhere failed":        {vol(lhv1beta2.VolumeRobustnessDegraded), []*lhv1beta2.Replica{healthy("r-b", "node-b"), failed("r-a", "node-a"), healthy("r-c", "node-c")}, "vol-1 (eve-kube-app/vol-1-claim) lost an up-to-date copy on another node (1 left besides node-b's, 2 when the drain began; robustness degraded)"},
		"a copy elsewhere is rebuilding": {vol(lhv1beta2.VolumeRobustnessDegraded), []*lhv1beta2.Replica{healthy("r-b", "node-b"), mkReplica("r-a", "vol-1", "node-a", lhv1beta2.InstanceStateRunning, "", ""), healthy("r-c", "node-c")}, "lost an up-to-date copy"},
		"faulted":                        {vol(lhv1beta2.VolumeRobustnessFaulted), start, "vol-1 (eve-kube-app/vol-1-claim) turned faulted"},
	} {
		t.Run(name, func(t *testing.T) {
			got := strings.Join(change.DrainHazards("node-b", before, tc.volumes, tc.replicas), "; ")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("DrainHazards = %q, want %q", got, tc.want)
			}
		})
	}
}
