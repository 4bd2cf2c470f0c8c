package flow

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/audit/audittest"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/test/sitebox"
)

// The drains here run against sitebox's real API server; the pure tests of
// this package boot nothing (sitebox.Shared starts the site on first use).
func TestMain(m *testing.M) { os.Exit(sitebox.RunMain(m)) }

// podsOn runs replicas pods of a ReplicaSet named name on node (a node
// selector: once the node is cordoned, their replacements stay Pending)
// and waits until they run; cleanup deletes the set.
func podsOn(t *testing.T, site *sitebox.TestSite, name, node string, replicas int32) {
	t.Helper()
	cs := site.Clients(t).Core
	labels := map[string]string{"app": name}
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kube.AppNamespace},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{corev1.LabelHostname: node},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{{Name: "c", Image: "busybox"}},
				},
			},
		},
	}
	rss := cs.AppsV1().ReplicaSets(kube.AppNamespace)
	if _, err := rss.Create(context.Background(), rs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rss.Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	})
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(kube.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, nil
		}
		running := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				running++
			}
		}
		return running == int(replicas), nil
	})
	if err != nil {
		t.Fatalf("%d pods of %s never ran on %s: %v", replicas, name, node, err)
	}
}

// publishEtcdMembers publishes etcd's member list as node-a's agent does,
// observed through node-a's member, until the test ends (then the list is
// deleted): quorum is counted from that list only, and a server's drain
// or remove is refused without it (issue 36 A). Kept fresh throughout, so
// that the re-checks before the drain and before the removal read a list
// in time. Called before the snapshot starts, so its first read has it.
func publishEtcdMembers(t *testing.T, site *sitebox.TestSite) {
	t.Helper()
	local, ok := site.EtcdMemberOf("node-a")
	if !ok {
		t.Fatal("sitebox runs no etcd member for node-a")
	}
	cms := site.Clients(t).Core.CoreV1().ConfigMaps(kube.AppNamespace)
	publisher := &nodestate.EtcdPublisher{Access: nodestate.EtcdAccess{Endpoint: local.ClientURL()}, Node: "node-a",
		Client: site.Clients(t).Core, ObserveEvery: 500 * time.Millisecond, PublishEvery: 2 * time.Second}
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		publisher.Run(ctx)
	}()
	t.Cleanup(func() {
		// Stopped first: a publish after the delete would leave a list
		// that goes stale behind the next test.
		stop()
		<-stopped
		_ = cms.Delete(context.Background(), kube.EtcdMembersConfigMapName, metav1.DeleteOptions{})
	})
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cm, err := cms.Get(ctx, kube.EtcdMembersConfigMapName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		views, _, _ := nodestate.EtcdViews(kube.Data{Nodes: nodesNow(t, site), ConfigMaps: []*corev1.ConfigMap{cm}}, time.Now())
		return len(views) > 0 && views[0].ObservedBy == "node-a", nil
	})
	if err != nil {
		t.Fatalf("node-a's etcd member list was not published within 30s: %v", err)
	}
}

// nodesNow lists the Nodes from the API server.
func nodesNow(t *testing.T, site *sitebox.TestSite) []*corev1.Node {
	t.Helper()
	list, err := site.Clients(t).Core.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []*corev1.Node
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out
}

// uncordonOnCleanup takes node back into service after the test.
func uncordonOnCleanup(t *testing.T, site *sitebox.TestSite, node string) {
	t.Cleanup(func() {
		if _, err := change.Cordon(context.Background(), site.Clients(t).Core, node, false); err != nil {
			t.Errorf("uncordon %s: %v", node, err)
		}
	})
}

// Issue 19 §7: kubectl's drain helper tells of each eviction from that
// eviction's own goroutine. The flow's count of evicted pods, and the
// progress the face is told, must not race (run under -race: make test
// does).
func TestDrainProgressFromEvictionGoroutines(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	podsOn(t, site, "race-pods", "node-c", 6)
	uncordonOnCleanup(t, site, "node-c")
	// node-c is a server: its drain is judged on etcd's member list.
	publishEtcdMembers(t, site)
	snap := sitebox.StartSnapshot(t, site.Config)
	r, path := testRecorder(t)
	opts := DrainOptions{GracePeriod: PodsOwnGracePeriod, Timeout: 2 * time.Minute}
	p, err := CheckDrain(context.Background(), snap, ActionDrain, "node-c", "", opts)
	d, err := NewDrain(r.Open(ActionDrain, "node-c"), snap, p, err, opts)
	if err != nil {
		t.Fatal(err)
	}
	// A face that keeps what it is told, as the console's task does: no
	// lock of its own.
	var lines []string
	if err := d.Run(context.Background(), func(line string) { lines = append(lines, line) }); err != nil {
		t.Fatalf("drain: %v\n%s", err, strings.Join(lines, "\n"))
	}
	// Every step told is counted: as many evictions in the detail as
	// lines told (a pod the scheduler put there after the preflight, such
	// as a system pod, is evicted too).
	evicted, ours := 0, 0
	for _, l := range lines {
		if strings.HasPrefix(l, "evicted ") {
			evicted++
			if strings.Contains(l, "/race-pods-") {
				ours++
			}
		}
	}
	if want := fmt.Sprintf("evicted %d of %d pod(s)", evicted, len(p.Evict)); ours != 6 || d.Audit().Detail != want {
		t.Fatalf("%d evicted lines (%d of the 6 pods); detail %q, want %q", evicted, ours, d.Audit().Detail, want)
	}
	if got := audittest.Outcomes(t, path); got != "drain:intent drain:done" {
		t.Fatalf("records %q", got)
	}
}

// Issue 19 §4: a removal re-checks quorum between the drain (minutes,
// behind disruption budgets) and deleting the Node. Here node-b, a server,
// is lost while the drain of node-c waits on a budget: once the drain
// finishes, removing node-c would leave 1 healthy member of the 2 needed,
// so the removal stops with nothing further changed: node-c stays, cordoned.
func TestRemoveRechecksQuorumAfterTheDrain(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := site.Clients(t).Core
	ctx := context.Background()
	podsOn(t, site, "held-pod", "node-c", 1)
	// Cleanups run last first: node-b back, then node-c, then settled.
	t.Cleanup(func() { site.WaitSettled(t, 2*time.Minute) })
	uncordonOnCleanup(t, site, "node-c")
	site.RecoverOnCleanup(t, "node-b")
	// The budget holds the drain until the test lets it go.
	pdbs := cs.PolicyV1().PodDisruptionBudgets(kube.AppNamespace)
	if _, err := pdbs.Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "held-pod"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "held-pod"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pdbs.Delete(context.Background(), "held-pod", metav1.DeleteOptions{}) })
	// Published throughout: the re-check after the drain counts node-b
	// lost on the list then current, not on a list gone stale (which would
	// stop the removal too, for quorum unknown).
	publishEtcdMembers(t, site)

	snap := sitebox.StartSnapshot(t, site.Config)
	r, path := testRecorder(t)
	opts := DrainOptions{GracePeriod: PodsOwnGracePeriod, Timeout: 3 * time.Minute}
	p, err := CheckDrain(ctx, snap, ActionRemove, "node-c", "", opts)
	if err == nil && p.Refused() {
		t.Fatalf("with three healthy servers, removing node-c is not refused: %q", p.Refusals)
	}
	if !slices.ContainsFunc(p.Notes, func(n string) bool { return strings.HasPrefix(n, "etcd members as etcd lists them") }) {
		t.Fatalf("the removal was not judged on etcd's own member list: notes %q", p.Notes)
	}
	// Confirmed with --force: node-c is Ready, and two servers are left.
	d, err := NewDrain(r.Open(ActionRemove, "node-c"), snap, p, err, opts)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []string
	held := make(chan struct{})
	var heldOnce sync.Once
	done := make(chan error, 1)
	go func() {
		done <- d.Run(ctx, func(line string) {
			mu.Lock()
			defer mu.Unlock()
			lines = append(lines, line)
			if strings.HasPrefix(line, "waiting") {
				heldOnce.Do(func() { close(held) })
			}
		})
	}()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("the drain ended before the budget held it: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the budget did not hold the drain within 60s")
	}
	// A server lost meanwhile.
	if err := site.Fail("node-b"); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
		return err == nil && !kube.NodeIsReady(n), nil
	})
	if err != nil {
		t.Fatalf("node-b never turned NotReady: %v", err)
	}
	if err := pdbs.Delete(ctx, "held-pod", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the drain did not finish within 2 minutes of the budget going")
	}
	mu.Lock()
	told := strings.Join(lines, "\n")
	mu.Unlock()
	// node-b's member as the list has it: "node-b: NotReady", or with
	// etcd's own word first once node-a's member has seen it go
	// ("node-b: etcd: ..., NotReady").
	if err == nil || !strings.Contains(err.Error(), "node-b: ") || !strings.Contains(err.Error(), "NotReady") ||
		!strings.Contains(err.Error(), "removing node-c leaves 1 of the 2 needed") || strings.Contains(err.Error(), "quorum is unknown") {
		t.Fatalf("the removal must stop, saying node-b was lost and the arithmetic: %v\n%s", err, told)
	}
	t.Logf("stopped: %v", err)
	n, gerr := cs.CoreV1().Nodes().Get(ctx, "node-c", metav1.GetOptions{})
	if apierrors.IsNotFound(gerr) {
		t.Fatalf("node-c was deleted after quorum was lost during its drain\n%s", told)
	}
	if gerr != nil || !n.Spec.Unschedulable {
		t.Fatalf("node-c should stay, cordoned: %v %+v", gerr, n.Spec)
	}
	cm, cerr := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.ClusterConfigMapName, metav1.GetOptions{})
	if cerr != nil || !slices.Contains(strings.Split(cm.Data[kube.ClusterKeyNodes], ","), "node-c") {
		t.Fatalf("node-c must stay in the cluster's node list: %v %q", cerr, cm.Data[kube.ClusterKeyNodes])
	}
	if got := audittest.Outcomes(t, path); got != "remove-node:intent remove-node:"+audit.OutcomeFailed {
		t.Fatalf("records %q", got)
	}
}
