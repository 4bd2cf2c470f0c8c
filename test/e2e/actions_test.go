package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// runSiteconEnv runs the binary with extra environment; output combined.
func runSiteconEnv(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(sitecon, args...)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG=", "HOME="+t.TempDir()), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Migrate: sitecon migrate moves an auto VM and a pinned container app;
// every agent agrees on the new designated node and where it runs.
func TestMigrateApps(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	appsDir, logDir, auditLog := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "audit.jsonl")
	a := sitebox.NodeUUID("node-a")
	appConfigs := map[string]apps.AppConfig{
		"mig-vm": {UUID: "f1000000-0000-4000-8000-000000000001", DisplayName: "mig-vm", Activate: true, Kind: apps.KindVM,
			Image: "registry.local/vm:1", DesignatedNodeID: a, Affinity: apps.AffinityPreferred,
			Resources: apps.AppResources{Memory: "1Gi"}},
		"mig-pinned": {UUID: "f1000000-0000-4000-8000-000000000002", DisplayName: "mig-pinned", Activate: true, Kind: apps.KindContainer,
			Image: "registry.local/pinned:1", DesignatedNodeID: a, Affinity: apps.AffinityRequired},
	}
	for name, app := range appConfigs {
		writeJSON(t, filepath.Join(appsDir, "apps", name+".json"), app)
	}
	agents := map[string]*siteAgent{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		agents[n] = startSiteAgent(t, site, n, appsDir, logDir)
	}
	all := []*siteAgent{agents["node-a"], agents["node-b"], agents["node-c"]}
	t.Cleanup(func() { cleanupApps(t, cs, dynClient(t, site), agents, appsDir, appConfigs) })
	for name := range appConfigs {
		waitAgents(t, all, name, 60*time.Second, "running on node-a", runningOn("node-a"))
	}

	// Refusals first: nothing changes.
	if out, err := act(t, site, auditLog, "migrate", "mig-vm", "node-a", "--yes"); err == nil || !strings.Contains(out, "the app runs here") {
		t.Fatalf("migrating to where it runs: %v\n%s", err, out)
	}
	if out, err := act(t, site, auditLog, "migrate", "no-such-app", "node-b", "--yes"); err == nil || !strings.Contains(out, `no app "no-such-app" (apps: `) {
		t.Fatalf("unknown app: %v\n%s", err, out)
	}
	if out, err := act(t, site, auditLog, "migrate", "mig-vm", "node-c", "--dry-run"); err != nil || !strings.Contains(out, "would move mig-vm from node-a to node-c") {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	if _, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(context.Background(), kube.PlacementConfigMapName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("refusals and the dry run must write nothing: %v", err)
	}

	for name, target := range map[string]string{"mig-vm": "node-c", "mig-pinned": "node-b"} {
		out, err := act(t, site, auditLog, "migrate", name, target, "--yes", "--timeout", "90s", "--reason", "e2e")
		if err != nil || !strings.Contains(out, name+" runs on "+target) {
			t.Fatalf("migrate %s: %v\n%s", name, err, out)
		}
		rec := lastAudit(t, auditLog)
		if rec.Action != "migrate" || rec.Outcome != audit.OutcomeDone || !strings.Contains(rec.Detail, `"reason":"e2e"`) {
			t.Fatalf("audit record: %+v", rec)
		}
		view := waitAgents(t, all, name, 30*time.Second, "agreed on "+target, runningOn(target))
		for n, st := range view {
			if st.DNIdNode != target || st.IsDNIdNode != (n == target) {
				t.Fatalf("%s: %s does not agree on the designated node: %+v", name, n, st)
			}
		}
	}
}

// setReplicas changes, through the API server, every replica of volume on
// node (all nodes when node is ""): spec first, then status, as Longhorn's
// managers write them.
func setReplicas(t *testing.T, site *sitebox.TestSite, volume, node string, spec func(*lhv1beta2.Replica), state lhv1beta2.InstanceState) {
	t.Helper()
	ctx := context.Background()
	replicas := longhornClient(t, site).LonghornV1beta2().Replicas(kube.LonghornNamespace)
	list, err := replicas.List(ctx, metav1.ListOptions{LabelSelector: "longhornvolume=" + volume})
	if err != nil {
		t.Fatal(err)
	}
	changed := 0
	for _, r := range list.Items {
		if node != "" && r.Spec.NodeID != node {
			continue
		}
		changed++
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := replicas.Get(ctx, r.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if spec != nil {
				spec(cur)
				if cur, err = replicas.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
					return err
				}
			}
			cur.Status.CurrentState = state
			_, err = replicas.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if changed == 0 {
		t.Fatalf("%s has no replica on %q to change", volume, node)
	}
}

// Drain refused: node-b holds the only healthy replica of a volume. Nothing
// is cordoned and not one pod is evicted.
func TestDrainRefusedLastReplica(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	singleReplicaVolume(t, site, "vol-only-b", "node-b")
	// A workload on node-b that a drain would evict.
	labels := map[string]string{"app": "on-b"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "on-b", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				NodeSelector: map[string]string{corev1.LabelHostname: "node-b"},
				Containers:   []corev1.Container{{Name: "c", Image: "registry.local/x:1"}},
			}},
		},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AppsV1().Deployments("default").Delete(context.Background(), "on-b", metav1.DeleteOptions{})
	})
	waitPods(t, cs, "default", metav1.ListOptions{LabelSelector: "app=on-b"}, 30*time.Second, "the workload Ready on node-b", onlyPodReadyOn("node-b"))
	// Every change to node-b's pods during the attempt is recorded.
	w, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-b"})
	if err != nil {
		t.Fatal(err)
	}
	// Zero evictions only means something if there was something to evict.
	onB, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-b"})
	if err != nil {
		t.Fatal(err)
	}
	evictable := 0
	for _, p := range onB.Items {
		if !ownedByDaemonSet(&p) && p.DeletionTimestamp == nil {
			evictable++
		}
	}
	if evictable == 0 {
		t.Fatal("node-b runs no pod a drain would evict: the test would prove nothing")
	}
	var disrupted []string
	var mu sync.Mutex
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && (ev.Type == watch.Deleted || p.DeletionTimestamp != nil) {
				mu.Lock()
				disrupted = append(disrupted, p.Namespace+"/"+p.Name)
				mu.Unlock()
			}
		}
	}()
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	out, err := act(t, site, auditLog, "drain", "node-b", "--yes", "--force", "--confirm", "node-b")
	w.Stop()
	<-watchDone
	if err == nil || !strings.Contains(out, "node-b holds the only healthy replica of vol-only-b") {
		t.Fatalf("drain was not refused for the last replica: %v\n%s", err, out)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
	if err != nil || n.Spec.Unschedulable {
		t.Fatalf("a refused drain cordoned node-b: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(disrupted) > 0 {
		t.Fatalf("a refused drain evicted pods: %v", disrupted)
	}
	if rec := lastAudit(t, auditLog); rec.Outcome != audit.OutcomeRefused || rec.Action != "drain" {
		t.Fatalf("audit record: %+v", rec)
	}
}

// The cluster changes while the drain's question waits for its answer:
// node-b comes to hold the only healthy replica of a volume. The answer
// finds the re-check refusing, and node-b is not even cordoned.
func TestDrainRecheckedAfterConfirmation(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	// node-b is a server: without etcd's member list its drain is refused
	// before the question is asked.
	publishEtcdMembers(t, site)
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	c := startCommand(t, "drain", "node-b", "--force", "--kubeconfig", site.Kubeconfig(), "--audit-log", auditLog)
	c.waitScreen(30*time.Second, "the question", func(s string) bool { return strings.Contains(s, `Type "node-b" to go on`) })
	if strings.Contains(c.screen(), "only healthy replica") {
		t.Fatalf("the preflight refused before the change:\n%s", c.screen())
	}
	singleReplicaVolume(t, site, "vol-late-b", "node-b")
	c.keys("node-b", "Enter")
	s := c.waitScreen(30*time.Second, "the drain ends", func(s string) bool { return strings.Contains(s, "exited ") })
	flat := strings.Join(strings.Fields(s), " ") // the 80-column pane wraps long lines
	for _, want := range []string{"the cluster changed since the preflight", "node-b holds the only healthy replica of vol-late-b", "exited 1"} {
		if !strings.Contains(flat, want) {
			t.Fatalf("want %q:\n%s", want, s)
		}
	}
	n, err := cs.CoreV1().Nodes().Get(context.Background(), "node-b", metav1.GetOptions{})
	if err != nil || n.Spec.Unschedulable {
		t.Fatalf("a drain refused at the re-check cordoned node-b: %v", err)
	}
	if rec := lastAudit(t, auditLog); rec.Outcome != audit.OutcomeRefused || rec.Action != "drain" {
		t.Fatalf("audit record: %+v", rec)
	}
}

// Drain with a PodDisruptionBudget: kubectl drain (server dry run) and
// sitecon drain --dry-run pick the same pods; the real drain evicts both
// replicas of a budgeted Deployment, the second only once the first one's
// replacement is Ready elsewhere.
func TestDrainWithPDB(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	const ns, name, node = "default", "pdb-web", "node-c"
	// node-c is a server: its drain is judged on etcd's member list.
	publishEtcdMembers(t, site)
	pdbGuardedDeployment(t, cs, ns, name, node, 2)
	readyOnNode := func(pods []corev1.Pod) []string {
		var names []string
		for _, p := range pods {
			if p.Spec.NodeName == node && kube.PodReady(&p) {
				names = append(names, p.Name)
			}
		}
		return names
	}
	originals := readyOnNode(waitPods(t, cs, ns, metav1.ListOptions{LabelSelector: "app=" + name}, 30*time.Second, "both replicas Ready on "+node,
		func(pods []corev1.Pod) bool { return len(readyOnNode(pods)) == 2 }))
	until(t, 30*time.Second, "the disruption budget allows one disruption", func() (*policyv1.PodDisruptionBudget, bool) {
		p, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		return p, err == nil && p.Status.DisruptionsAllowed == 1
	}, func(p *policyv1.PodDisruptionBudget) string { return fmt.Sprintf("budget status: %+v", p.Status) })

	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	// The same pods as kubectl drain would evict (kubectl from the
	// control-plane build; Debian's kubernetes-client behaves the same).
	kubectl := filepath.Join(site.BinDir, "kubectl")
	cmd := exec.Command(kubectl, "--kubeconfig", site.Kubeconfig(), "drain", node, "--ignore-daemonsets", "--dry-run=server")
	var kout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &kout, &kout
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl drain --dry-run=server: %v\n%s", err, kout.String())
	}
	var kubectlPods []string
	for _, line := range strings.Split(kout.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "evicting pod "); ok {
			kubectlPods = append(kubectlPods, strings.TrimSuffix(rest, " (server dry run)"))
		}
	}
	out, err := act(t, site, auditLog, "drain", node, "--dry-run")
	if err != nil {
		t.Fatalf("sitecon drain --dry-run: %v\n%s", err, out)
	}
	var sitePods []string
	inList := false
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "pods to evict") {
			inList = true
			continue
		}
		if inList && strings.HasPrefix(line, "  ") {
			sitePods = append(sitePods, strings.TrimSpace(line))
		}
	}
	slices.Sort(kubectlPods)
	slices.Sort(sitePods)
	if len(sitePods) == 0 || !slices.Equal(kubectlPods, sitePods) {
		t.Fatalf("kubectl drain and sitecon drain disagree on the pods:\nkubectl: %v\nsitecon: %v", kubectlPods, sitePods)
	}
	if n, _ := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); n.Spec.Unschedulable {
		t.Fatal("a dry run cordoned the node")
	}

	// The real drain, with every pod transition of the Deployment timed.
	type mark struct {
		pod  string
		what string // "evicted" (deletion begun) or "ready"
		at   time.Time
	}
	var mu sync.Mutex
	var marks []mark
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			mu.Lock()
			switch {
			case p.DeletionTimestamp != nil && !seen["del/"+p.Name]:
				seen["del/"+p.Name] = true
				marks = append(marks, mark{p.Name, "evicted", time.Now()})
			case p.DeletionTimestamp == nil && p.Spec.NodeName != node && kube.PodReady(p) && !seen["ready/"+p.Name]:
				seen["ready/"+p.Name] = true
				marks = append(marks, mark{p.Name, "ready", time.Now()})
			}
			mu.Unlock()
		}
	}()
	out, err = act(t, site, auditLog, "drain", node, "--yes", "--timeout", "2m")
	w.Stop()
	<-watchDone
	t.Logf("drain output:\n%s", out)
	for _, m := range marks {
		t.Logf("%s %s %s", m.at.Format("15:04:05.000"), m.what, m.pod)
	}
	if err != nil || !strings.Contains(out, node+" drained") {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	// Whether the budget shows as a "waiting" step depends on timing: the
	// API server may hold the second eviction on a budget conflict until
	// the replacement is Ready. The order below is what the budget promises.
	mu.Lock()
	defer mu.Unlock()
	var evicted []mark
	firstReady := time.Time{}
	for _, m := range marks {
		if m.what == "evicted" && slices.Contains(originals, m.pod) {
			evicted = append(evicted, m)
		}
		if m.what == "ready" && firstReady.IsZero() {
			firstReady = m.at
		}
	}
	if len(evicted) != 2 {
		t.Fatalf("want both replicas evicted, got %+v", marks)
	}
	if firstReady.IsZero() || evicted[1].at.Before(firstReady) {
		t.Fatalf("the second replica was evicted before a replacement was ready: %+v", marks)
	}
	if rec := lastAudit(t, auditLog); rec.Outcome != audit.OutcomeDone || rec.Action != "drain" {
		t.Fatalf("audit record: %+v", rec)
	}
	pods, _ := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && !ownedByDaemonSet(&p) && p.Status.Phase == corev1.PodRunning {
			t.Errorf("pod %s/%s still runs on the drained node", p.Namespace, p.Name)
		}
	}
}

func ownedByDaemonSet(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// Seed change: sitecon seed node-b; every node's seed follower re-renders
// its k3s config to join through node-b. Refused for a NotReady node.
func TestSeedChange(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	plan, err := formation.Plan(formation.FormRequest{ClusterName: "sitebox-test", Interface: "eth1", Prefix: site.NodePrefix(),
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := kube.NewSnapshot(site.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap.Start(ctx)
	type rendered struct {
		node   string
		file   string
		record string
		v      *config.Validated
	}
	var files []rendered
	for _, b := range plan.Nodes {
		// The site's own cluster: a record of another cluster is never
		// followed.
		b.ClusterID = site.ClusterID
		dir := t.TempDir()
		nf, err := b.Files(dir, "")
		if err == nil {
			err = nf.Write()
		}
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(nf.ConfigPath)
		if err != nil {
			t.Fatal(err)
		}
		v, err := config.Validate(cfg, config.Environment{ReadFile: os.ReadFile})
		if err != nil {
			t.Fatal(err)
		}
		paths := k3s.Paths{ConfigFile: filepath.Join(dir, "k3s", "config.yaml"), DataDir: filepath.Join(dir, "k3s-data")}
		if err := k3s.Render(v, paths, false).Write(); err != nil {
			t.Fatal(err)
		}
		record := deviceRecords(nf.ConfigPath).SeedRecordFile()
		f := &formation.SeedFollower{Config: v, Paths: paths, RecordPath: record}
		go f.Run(ctx, snap)
		files = append(files, rendered{v.NodeName, paths.ConfigFile, record, v})
	}
	t.Cleanup(func() {
		if _, err := act(t, site, auditLog, "seed", "node-a", "--yes"); err != nil {
			t.Errorf("restore the seed: %v", err)
		}
	})

	if err := site.Fail("node-c"); err != nil {
		t.Fatal(err)
	}
	site.RecoverOnCleanup(t, "node-c")
	waitNode(t, cs, "node-c", false)
	if out, err := act(t, site, auditLog, "seed", "node-c", "--yes"); err == nil || !strings.Contains(out, "node-c is not Ready") {
		t.Fatalf("seed on a NotReady node: %v\n%s", err, out)
	}
	if err := site.Recover("node-c"); err != nil {
		t.Fatal(err)
	}

	out, err := act(t, site, auditLog, "seed", "node-b", "--yes")
	if err != nil || !strings.Contains(out, "node-b is the seed: join_server_ip "+siteAddr(site, 2)) {
		t.Fatalf("seed node-b: %v\n%s", err, out)
	}
	for _, r := range files {
		until(t, 15*time.Second, r.node+"'s k3s config joins through node-b", func() ([]byte, bool) {
			data, _ := os.ReadFile(r.file)
			return data, strings.Contains(string(data), `server: "https://`+siteAddr(site, 2)+`:6443"`)
		}, func(data []byte) string { return "the config:\n" + string(data) })
	}
	if rec := lastAudit(t, auditLog); rec.Outcome != audit.OutcomeDone || !strings.Contains(rec.Detail, siteAddr(site, 1)+" → "+siteAddr(site, 2)) {
		t.Fatalf("audit record: %+v", rec)
	}
	// Again: nothing to change, said so, asked nothing (no --yes).
	if out, err := act(t, site, auditLog, "seed", "node-b"); err != nil || !strings.Contains(out, "node-b is the seed already (join_server_ip "+siteAddr(site, 2)+"): nothing to do") {
		t.Fatalf("seed node-b again: %v\n%s", err, out)
	}
	// Each node keeps the change on its disk: a restart with the cluster
	// out of reach (the old seed dead) still joins through node-b.
	for _, r := range files {
		rec, ok, err := formation.ReadSeedRecord(r.record)
		if err != nil || !ok || rec.JoinServerIP != siteAddr(site, 2) || rec.ConfigJoinIP != siteAddr(site, 1) || rec.ClusterID != r.v.ClusterID {
			t.Fatalf("%s's seed record = %+v (present %v, %v)", r.node, rec, ok, err)
		}
		restarted, applied, _ := formation.ApplySeedRecord(r.v, rec)
		if !applied || restarted.JoinIP.String() != siteAddr(site, 2) || restarted.IsSeed != (r.node == "node-b") {
			t.Fatalf("%s after a restart joins through %s (seed=%v)", r.node, restarted.JoinIP, restarted.IsSeed)
		}
	}
	// Back to node-a, the config's own seed: the records go.
	if out, err := act(t, site, auditLog, "seed", "node-a", "--yes"); err != nil {
		t.Fatalf("seed node-a: %v\n%s", err, out)
	}
	for _, r := range files {
		until(t, 15*time.Second, r.node+" drops its seed record once the seed is back to the config's", func() (formation.SeedRecord, bool) {
			rec, ok, _ := formation.ReadSeedRecord(r.record)
			return rec, !ok
		}, func(rec formation.SeedRecord) string { return fmt.Sprintf("the record kept: %+v", rec) })
	}
}
