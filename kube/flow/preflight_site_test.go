// The drain and removal preflights' fresh reads (kube/change) against
// sitebox's real API server: here, beside the flows that call them, so
// they share this package's site rather than start one of their own.
package flow_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/kube/safety"
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
	p, err := change.CheckDrain(ctx, clients, d, "node-b", change.DrainOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(p.Refusals, "\n"), "node-b holds the only healthy replica of vol-late-lh") {
		t.Fatalf("the preflight did not look for Longhorn itself: refusals %q warnings %q", p.Refusals, p.Warnings)
	}
}

// Issue 10 item 4: the preflight counts etcd's own member list, as an
// agent observes it through its node's member and publishes it, against
// sitebox's real three-member etcd. A member that stops while its Node
// stays Ready (etcd failed on a server whose kubelet still reports) is
// seen by the member list and nowhere else: draining another server is
// then refused with the arithmetic.
func TestCheckDrainCountsEtcdMemberList(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	clients := site.Clients(t)
	cms := clients.Core.CoreV1().ConfigMaps(kube.AppNamespace)
	t.Cleanup(func() {
		if err := site.StartEtcdMember("node-c"); err != nil {
			t.Errorf("start node-c's etcd member again: %v", err)
		}
		_ = cms.Delete(context.Background(), kube.EtcdMembersConfigMapName, metav1.DeleteOptions{})
	})
	local, ok := site.EtcdMemberOf("node-a")
	if !ok {
		t.Fatal("sitebox runs no etcd member for node-a")
	}
	snap := sitebox.StartSnapshot(t, site.Config)
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	// node-a's agent, as it runs with --etcd-endpoint: sitebox serves
	// plain http, so no certificates.
	publisher := &nodestate.EtcdPublisher{Access: nodestate.EtcdAccess{Endpoint: local.ClientURL()}, Node: "node-a",
		Client: clients.Core, ObserveEvery: 500 * time.Millisecond, PublishEvery: 2 * time.Second}
	go publisher.Run(ctx)

	// waitQuorum waits until the published list, as the snapshot has it,
	// satisfies cond.
	waitQuorum := func(what string, cond func(safety.EtcdQuorum) bool) safety.EtcdQuorum {
		t.Helper()
		changes, unsubscribe := snap.Subscribe()
		defer unsubscribe()
		deadline := time.After(60 * time.Second)
		for {
			q := nodestate.EtcdQuorumMembers(snap.Data(), time.Now())
			if cond(q) {
				return q
			}
			select {
			case <-changes:
			case <-deadline:
				t.Fatalf("%s: not within 60s; last: %+v", what, q)
			}
		}
	}
	healthy := func(q safety.EtcdQuorum) bool {
		if !q.FromEtcd || len(q.Members) != 3 {
			return false
		}
		for _, m := range q.Members {
			if m.Down != "" || !strings.HasPrefix(m.Name, "node-") || len(m.Name) != len("node-a") {
				return false
			}
		}
		return true
	}
	waitQuorum("three healthy members, each named by its node", healthy)
	drainA := func() safety.Preflight {
		t.Helper()
		p, err := change.CheckDrain(context.Background(), clients, snap.Data(), "node-a", change.DrainOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := drainA()
	if strings.Contains(strings.Join(p.Refusals, "\n"), "etcd members") || !strings.Contains(strings.Join(p.Notes, "\n"), "etcd members as etcd lists them (observed by node-a") {
		t.Fatalf("with three healthy members: refusals %q notes %q", p.Refusals, p.Notes)
	}

	if err := site.StopEtcdMember("node-c"); err != nil {
		t.Fatal(err)
	}
	waitQuorum("node-c's member seen unhealthy", func(q safety.EtcdQuorum) bool {
		for _, m := range q.Members {
			if m.Name == "node-c" {
				return strings.HasPrefix(m.Down, "etcd: ")
			}
		}
		return false
	})
	if n, err := clients.Core.CoreV1().Nodes().Get(context.Background(), "node-c", metav1.GetOptions{}); err != nil || !kube.IsEtcdMember(n) ||
		!slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
			return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}) {
		t.Fatalf("node-c's Node should still look a Ready etcd member: %v", err)
	}
	p = drainA()
	refusals := strings.Join(p.Refusals, "\n")
	if !strings.Contains(refusals, "3 etcd members, 1 unhealthy (node-c: etcd: ") || !strings.Contains(refusals, "draining node-a leaves 1 of the 2 needed") {
		t.Fatalf("node-c's etcd member is down: draining node-a must be refused with the arithmetic; refusals %q", p.Refusals)
	}
	t.Logf("refused: %s", p.Refusals[0])

	if err := site.StartEtcdMember("node-c"); err != nil {
		t.Fatal(err)
	}
	waitQuorum("node-c's member healthy again", healthy)
	if p := drainA(); strings.Contains(strings.Join(p.Refusals, "\n"), "etcd members") {
		t.Fatalf("node-c's member is back, yet: %q", p.Refusals)
	}
}

// Issue 19 §4: the published member list cannot be forged. With node-c's
// etcd member really stopped (its Node still Ready), node-a's agent
// publishes what it observes; a second entry claiming every member
// healthy, dated an hour ahead by a server, or written now by a worker,
// must not win: the preflight of a drain of node-a, read from the real API
// server, still refuses because quorum would be lost.
func TestCheckDrainIgnoresForgedEtcdEntries(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	clients := site.Clients(t)
	ctx := context.Background()
	cms := clients.Core.CoreV1().ConfigMaps(kube.AppNamespace)
	t.Cleanup(func() {
		if err := site.StartEtcdMember("node-c"); err != nil {
			t.Errorf("start node-c's etcd member again: %v", err)
		}
		_ = cms.Delete(context.Background(), kube.EtcdMembersConfigMapName, metav1.DeleteOptions{})
		_ = clients.Core.CoreV1().Nodes().Delete(context.Background(), "node-w", metav1.DeleteOptions{})
	})
	// A worker: a Node without the server role labels.
	if _, err := clients.Core.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-w",
		Labels: map[string]string{"kubernetes.io/hostname": "node-w"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := site.StopEtcdMember("node-c"); err != nil {
		t.Fatal(err)
	}
	local, ok := site.EtcdMemberOf("node-a")
	if !ok {
		t.Fatal("sitebox runs no etcd member for node-a")
	}
	// node-a's agent observes: node-c's member does not answer.
	honest, err := nodestate.ObserveEtcd(ctx, nodestate.EtcdAccess{Endpoint: local.ClientURL()}, "node-a", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(honest.Members, func(m nodestate.EtcdMemberStatus) bool { return strings.HasPrefix(m.Name, "node-c") && !m.Healthy }) {
		t.Fatalf("node-a's observation should see node-c's member down: %+v", honest.Members)
	}
	// What a forger writes: the same members, all healthy.
	forged := func(by string, at time.Time) nodestate.EtcdView {
		v := honest
		v.ObservedBy, v.ObservedAt = by, at
		v.Members = slices.Clone(honest.Members)
		for i := range v.Members {
			v.Members[i].Healthy, v.Members[i].Error = true, ""
		}
		return v
	}
	for name, forgery := range map[string]nodestate.EtcdView{
		"a server's entry dated an hour ahead": forged("node-b", time.Now().Add(time.Hour)),
		// Within kube.EtcdMembersMaxSkew: only who wrote it rules it out.
		"a worker's entry dated now": forged("node-w", time.Now().Add(20*time.Second)),
	} {
		t.Run(name, func(t *testing.T) {
			_ = cms.Delete(ctx, kube.EtcdMembersConfigMapName, metav1.DeleteOptions{})
			for _, v := range []nodestate.EtcdView{honest, forgery} {
				if err := nodestate.PublishEtcdView(ctx, clients.Core, v); err != nil {
					t.Fatal(err)
				}
			}
			// The preflight as an action makes it: everything read now
			// from the API server.
			nodes, err := clients.Core.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cm, err := cms.Get(ctx, kube.EtcdMembersConfigMapName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			d := kube.Data{ConfigMaps: []*corev1.ConfigMap{cm}}
			for i := range nodes.Items {
				d.Nodes = append(d.Nodes, &nodes.Items[i])
			}
			p, err := change.CheckDrain(ctx, clients, d, "node-a", change.DrainOptions{})
			if err != nil {
				t.Fatal(err)
			}
			refusals := strings.Join(p.Refusals, "\n")
			if !strings.Contains(refusals, "3 etcd members, 1 unhealthy (node-c: etcd: ") || !strings.Contains(refusals, "etcd would lose quorum") {
				t.Fatalf("node-c's member is down: draining node-a must be refused whatever %s says; refusals %q notes %q", forgery.ObservedBy, p.Refusals, p.Notes)
			}
			if notes := strings.Join(p.Notes, "\n"); !strings.Contains(notes, "entry "+forgery.ObservedBy+" ignored: ") {
				t.Errorf("the verdict should say %s's entry was ignored: notes %q", forgery.ObservedBy, p.Notes)
			}
			t.Logf("refused: %s", p.Refusals[0])
		})
	}
}

// Issue 19 §4: the re-check between a removal's drain and the deletion
// judges the seed again, from the API server: the seed moved to the node
// meanwhile, or the cluster record gone so that the seed cannot be told,
// stops the removal with the node still there.
func TestRemoveAsConfirmedJudgesTheSeedAgain(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	clients := site.Clients(t)
	ctx := context.Background()
	cms := clients.Core.CoreV1().ConfigMaps(kube.AppNamespace)
	record, err := cms.Get(ctx, kube.ClusterConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The record as it was, whatever the test left.
		_ = cms.Delete(context.Background(), kube.ClusterConfigMapName, metav1.DeleteOptions{})
		restored := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: record.Name, Namespace: record.Namespace}, Data: record.Data}
		if _, err := cms.Create(context.Background(), restored, metav1.CreateOptions{}); err != nil {
			t.Errorf("restore the cluster record: %v", err)
		}
	})
	// Quorum is counted from etcd's own list only (issue 36): node-a's
	// agent's, published now, as the re-check reads it again.
	members := publishEtcdNow(t, site, clients)
	confirmed, err := change.CheckDrain(ctx, clients, kube.Data{Nodes: nodesNow(t, clients), ConfigMaps: []*corev1.ConfigMap{members}},
		"node-c", change.DrainOptions{Purpose: safety.PurposeRemove})
	if err != nil || confirmed.Refused() {
		t.Fatalf("removing node-c, with node-a the seed: %v %q", err, confirmed.Refusals)
	}
	nodeC, err := clients.Core.CoreV1().Nodes().Get(ctx, "node-c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		apply func() error
		want  string
	}{
		"the seed moved to the node": {func() error {
			// The record as it is now: the other case recreates it (a new
			// UID), and the cases run in map order.
			moved, err := cms.Get(ctx, kube.ClusterConfigMapName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			moved.Data[kube.ClusterKeyJoinServerIP] = kube.InternalIP(nodeC)
			_, err = cms.Update(ctx, moved, metav1.UpdateOptions{})
			return err
		}, "node-c is the seed in effect"},
		"the cluster record is gone": {func() error {
			return cms.Delete(ctx, kube.ClusterConfigMapName, metav1.DeleteOptions{})
		}, "cannot tell whether node-c is the seed"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := tc.apply(); err != nil {
				t.Fatal(err)
			}
			err := change.RemoveAsConfirmed(ctx, clients, kube.Data{}, confirmed)
			if stopped := (*change.RemovalStoppedError)(nil); !errors.As(err, &stopped) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want the removal stopped with %q, got %v", tc.want, err)
			}
			if _, err := clients.Core.CoreV1().Nodes().Get(ctx, "node-c", metav1.GetOptions{}); err != nil {
				t.Fatalf("node-c must still be there: %v", err)
			}
			// Back as it was for the next change.
			_ = cms.Delete(ctx, kube.ClusterConfigMapName, metav1.DeleteOptions{})
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: record.Name, Namespace: record.Namespace}, Data: record.Data}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// publishEtcdNow publishes etcd's member list as node-a's agent observes
// it now through node-a's member, and returns the ConfigMap; deleted at
// the test's end.
func publishEtcdNow(t *testing.T, site *sitebox.TestSite, clients *kube.Clients) *corev1.ConfigMap {
	t.Helper()
	ctx := context.Background()
	local, ok := site.EtcdMemberOf("node-a")
	if !ok {
		t.Fatal("sitebox runs no etcd member for node-a")
	}
	view, err := nodestate.ObserveEtcd(ctx, nodestate.EtcdAccess{Endpoint: local.ClientURL()}, "node-a", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	cms := clients.Core.CoreV1().ConfigMaps(kube.AppNamespace)
	t.Cleanup(func() { _ = cms.Delete(context.Background(), kube.EtcdMembersConfigMapName, metav1.DeleteOptions{}) })
	if err := nodestate.PublishEtcdView(ctx, clients.Core, view); err != nil {
		t.Fatal(err)
	}
	cm, err := cms.Get(ctx, kube.EtcdMembersConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func nodesNow(t *testing.T, clients *kube.Clients) []*corev1.Node {
	t.Helper()
	list, err := clients.Core.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []*corev1.Node
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out
}
