package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/test/sitebox"
)

// memberRemovesServed sums what etcd's own metrics say the member at
// endpoint carried out of MemberRemove (refusals, such as a removal etcd
// holds back while a member has been back less than 5 s, aside): which
// member a removal was asked of.
func memberRemovesServed(t *testing.T, endpoint string) int {
	t.Helper()
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	for line := range strings.Lines(string(body)) {
		if !strings.HasPrefix(line, "grpc_server_handled_total{") || !strings.Contains(line, `grpc_method="MemberRemove"`) ||
			!strings.Contains(line, `grpc_code="OK"`) {
			continue
		}
		fields := strings.Fields(line)
		n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("%s/metrics: %q: %v", endpoint, line, err)
		}
		served += int(n)
	}
	return served
}

// etcdMemberNames lists the site's etcd members as etcd itself does.
func etcdMemberNames(t *testing.T, endpoint string) []string {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range list.Members {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return names
}

// publishEtcdView publishes etcd's member list as node-a's agent would, so
// that the preflight judges quorum from etcd itself.
func publishEtcdView(t *testing.T, site *sitebox.TestSite) {
	t.Helper()
	m, _ := site.EtcdMemberOf("node-a")
	view, err := nodestate.ObserveEtcd(context.Background(), nodestate.EtcdAccess{Endpoint: m.ClientURL()}, "node-a", time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if err := nodestate.PublishEtcdView(context.Background(), clientset(t, site), view); err != nil {
		t.Fatal(err)
	}
}

// Issue 19 §2: `sitecon agent leave` takes the node's work with it. A
// leave that would lose etcd's quorum is refused and changes nothing (the
// node not cordoned, no leave request: the agent keeps k3s and the
// address); one that leaves two members needs --force (issue 36 B).
// Allowed, it cordons and drains the node as a drain does (the
// app placed there runs elsewhere before anything else happens), removes
// the node's etcd member, and only then writes the request that makes the
// agent stop k3s, the containers, and drop the address; recorded before
// and after.
func TestAgentLeaveDrainsThenRemovesTheMember(t *testing.T) {
	// Its own site: the leave takes an etcd member away for good.
	site, err := sitebox.StartTestSite(sitebox.TestOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer site.Stop()
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()

	plan, err := formation.Plan(formation.FormRequest{ClusterName: "sitebox-test", Interface: "eth1", Prefix: "10.244.244.0/24",
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	files, err := plan.Nodes[2].Files(t.TempDir(), "") // node-c's device
	if err == nil {
		err = files.Write()
	}
	if err != nil {
		t.Fatal(err)
	}
	request := deviceRecords(files.ConfigPath).LeaveRequestFile()
	memberC, _ := site.EtcdMemberOf("node-c")
	memberA, _ := site.EtcdMemberOf("node-a")
	memberB, _ := site.EtcdMemberOf("node-b")
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	leave := func(args ...string) (string, error) {
		return act(t, site, auditLog, append([]string{"agent", "leave", "--config", files.ConfigPath, "--state-dir", deviceRecords(files.ConfigPath).Dir,
			"--agent-socket", filepath.Join(t.TempDir(), "no-agent.sock"), "--etcd-endpoint", memberC.ClientURL(), "--yes"}, args...)...)
	}

	labels := map[string]string{"app": "on-c"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "on-c", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				// Preferred, as an auto-migration app's: it may move.
				Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
					Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-c"}}}}}}}},
				Containers: []corev1.Container{{Name: "c", Image: "registry.local/x:1"}},
			}},
		},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	onC := metav1.ListOptions{LabelSelector: "app=on-c"}
	waitPods(t, cs, "default", onC, 30*time.Second, "the app Ready on node-c", onlyPodReadyOn("node-c"))

	// node-b's etcd member down: leaving node-c would leave 1 of the 2
	// healthy members quorum needs. Refused; nothing changes.
	if err := site.StopEtcdMember("node-b"); err != nil {
		t.Fatal(err)
	}
	publishEtcdView(t, site)
	out, err := leave()
	if err == nil || !strings.Contains(out, "REFUSED") || !strings.Contains(out, "etcd members") {
		t.Fatalf("a leave that loses quorum was not refused with the arithmetic: %v\n%s", err, out)
	}
	if n, err := cs.CoreV1().Nodes().Get(ctx, "node-c", metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Fatalf("a refused leave cordoned node-c (err %v)", err)
	}
	if _, err := os.Stat(request); !os.IsNotExist(err) {
		t.Fatalf("a refused leave wrote its request (%v): the agent would drop the address", err)
	}
	waitPods(t, cs, "default", onC, 5*time.Second, "the app still on node-c", onlyPodReadyOn("node-c"))
	if rec := lastAudit(t, auditLog); rec.Outcome != audit.OutcomeRefused || rec.Action != "leave" {
		t.Fatalf("audit record of the refused leave: %+v", rec)
	}
	if err := site.StartEtcdMember("node-b"); err != nil {
		t.Fatal(err)
	}
	until(t, 30*time.Second, "node-b's etcd member healthy again", func() (nodestate.EtcdView, bool) {
		v, err := nodestate.ObserveEtcd(ctx, nodestate.EtcdAccess{Endpoint: memberA.ClientURL()}, "node-a", time.Now)
		healthy := 0
		for _, m := range v.Members {
			if m.Healthy {
				healthy++
			}
		}
		return v, err == nil && healthy == 3
	}, func(v nodestate.EtcdView) string { return memberSummaryForTest(v) })
	publishEtcdView(t, site)

	// One of three servers leaving is judged as a removal (issue 36 B):
	// the two members left no longer tolerate a failure, a warning that
	// stops a leave without --force and changes nothing.
	tolerance := "the cluster no longer tolerates a failure"
	out, err = leave()
	if err == nil || !strings.Contains(out, "leave node-c refused") || !strings.Contains(out, "WARNING") || !strings.Contains(out, tolerance) {
		t.Fatalf("a leave to two members was not stopped by its warning: %v\n%s", err, out)
	}
	if strings.Contains(out, "REFUSED") {
		t.Fatalf("a leave to two members was refused, which --force does not take; want a warning:\n%s", out)
	}
	// Judged as a leave, and said so: not "preflight for draining".
	if !strings.Contains(out, "preflight for node-c leaving its cluster:") {
		t.Errorf("the leave's preflight does not say it is judged as a leave:\n%s", out)
	}
	if n, err := cs.CoreV1().Nodes().Get(ctx, "node-c", metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Fatalf("a leave stopped by its warning cordoned node-c (err %v)", err)
	}
	if _, err := os.Stat(request); !os.IsNotExist(err) {
		t.Fatalf("a leave stopped by its warning wrote its request (%v)", err)
	}

	// Forced past the warning, with the name typed: drained first, then
	// the member, then the request.
	// The app's pod on node-c, watched: the request must come after the
	// drain saw it gone (the replacement elsewhere is the controller's
	// business, on its own time, and not what the drain waits for).
	goneSeen := watchPodGone(t, cs, "default", onC, "node-c")
	removesBefore := memberRemovesServed(t, memberA.ClientURL()) + memberRemovesServed(t, memberB.ClientURL())
	out, err = leave("--force", "--confirm", "node-c")
	if err != nil {
		t.Fatalf("leave --force: %v\n%s", err, out)
	}
	if !strings.Contains(out, tolerance) {
		t.Errorf("the forced leave does not say the warning it went past:\n%s", out)
	}
	evicted, removed, written := strings.Index(out, "evicted"), strings.Index(out, "etcd member node-c"), strings.Index(out, "leave request written")
	if evicted < 0 || removed < evicted || written < removed {
		t.Errorf("want the eviction, then the member's removal, then the request, in that order:\n%s", out)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "node-c", metav1.GetOptions{})
	if err != nil || !n.Spec.Unschedulable {
		t.Errorf("node-c is not cordoned after it left (err %v)", err)
	}
	waitPods(t, cs, "default", onC, 60*time.Second, "the app Ready off node-c", func(pods []corev1.Pod) bool {
		return len(pods) == 1 && pods[0].Spec.NodeName != "node-c" && kube.PodReady(&pods[0])
	})
	if names := etcdMemberNames(t, memberA.ClientURL()); slices.ContainsFunc(names, func(s string) bool { return strings.HasPrefix(s, "node-c") }) || len(names) != 2 {
		t.Errorf("etcd members after node-c left: %v", names)
	}
	// Asked of a member that stays: one asked to remove itself may stop
	// before it answers, and the leave then fails though the member went.
	if served := memberRemovesServed(t, memberA.ClientURL()) + memberRemovesServed(t, memberB.ClientURL()) - removesBefore; served != 1 {
		t.Errorf("node-a's and node-b's etcd members carried out %d removal(s), want 1: the removal was asked of the member that leaves", served)
	}
	req, ok, err := formation.ReadLeaveRequest(request)
	if err != nil || !ok || req.NodeName != "node-c" {
		t.Errorf("leave request %+v ok=%v err=%v", req, ok, err)
	}
	// The watch sees a deletion a little after it happens; the request is
	// written after the drain saw it, so at most that little earlier.
	if st, err := os.Stat(request); err != nil {
		t.Errorf("the leave request: %v", err)
	} else if gone := goneSeen(); gone.IsZero() || st.ModTime().Before(gone.Add(-2*time.Second)) {
		t.Errorf("the request (%s) was written before the drained pod was gone (seen gone at %s; zero: never)", st.ModTime(), gone)
	}
	if got := auditOutcomes(t, auditLog); !strings.HasSuffix(got, "leave:intent leave:done") {
		t.Errorf("audit %q should end with the leave's intent and outcome", got)
	}
}

func memberSummaryForTest(v nodestate.EtcdView) string {
	var b strings.Builder
	for _, m := range v.Members {
		b.WriteString(m.Name)
		if !m.Healthy {
			b.WriteString(" (" + m.Error + ")")
		}
		b.WriteString(" ")
	}
	return b.String()
}

// auditOutcomes is the log as "action:outcome" words.
func auditOutcomes(t *testing.T, path string) string {
	t.Helper()
	recs, err := audit.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.Action+":"+r.Outcome)
	}
	return strings.Join(out, " ")
}

// Issue 19 §2: a leave that would take the only up-to-date copy of a
// volume with the node is refused and changes nothing: node-c not
// cordoned, no leave request written (its agent keeps k3s and the address).
func TestAgentLeaveRefusedForTheLastCopy(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	singleReplicaVolume(t, site, "vol-only-c", "node-c")
	plan, err := formation.Plan(formation.FormRequest{ClusterName: "sitebox-test", Interface: "eth1", Prefix: "10.244.244.0/24",
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	files, err := plan.Nodes[2].Files(t.TempDir(), "")
	if err == nil {
		err = files.Write()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Should the leave have gone through, the shared site gets node-c back.
		_, _ = act(t, site, filepath.Join(t.TempDir(), "audit.jsonl"), "uncordon", "node-c", "--yes")
	})
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	// No etcd endpoint that answers: a leave that got past its preflight
	// would fail there, after the drain; refused, it never gets there.
	out, err := act(t, site, auditLog, "agent", "leave", "--config", files.ConfigPath, "--state-dir", deviceRecords(files.ConfigPath).Dir,
		"--agent-socket", filepath.Join(t.TempDir(), "no-agent.sock"), "--etcd-endpoint", "http://127.0.0.1:1", "--yes")
	if err == nil || !strings.Contains(out, "vol-only-c") {
		t.Fatalf("a leave taking the last copy of vol-only-c was not refused, naming it: %v\n%s", err, out)
	}
	if strings.Contains(out, "evicting") {
		t.Errorf("the refused leave evicted pods:\n%s", out)
	}
	if n, err := cs.CoreV1().Nodes().Get(context.Background(), "node-c", metav1.GetOptions{}); err != nil || n.Spec.Unschedulable {
		t.Errorf("a refused leave cordoned node-c (err %v)", err)
	}
	if _, err := os.Stat(deviceRecords(files.ConfigPath).LeaveRequestFile()); !os.IsNotExist(err) {
		t.Errorf("a refused leave wrote its request (%v)", err)
	}
	if rec := lastAudit(t, auditLog); rec.Outcome != audit.OutcomeRefused || rec.Action != "leave" {
		t.Errorf("audit record: %+v", rec)
	}
}

// watchPodGone watches the pods opts selects in ns and returns what tells
// when the first of them on node was seen deleted (zero: not yet).
func watchPodGone(t *testing.T, cs kubernetes.Interface, ns string, opts metav1.ListOptions, node string) func() time.Time {
	t.Helper()
	w, err := cs.CoreV1().Pods(ns).Watch(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var gone time.Time
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Deleted && p.Spec.NodeName == node {
				mu.Lock()
				if gone.IsZero() {
					gone = time.Now()
				}
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(w.Stop)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return gone
	}
}
