package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/test/sitebox"
)

func waitNode(t *testing.T, cs kubernetes.Interface, name string, ready bool) {
	t.Helper()
	until(t, 60*time.Second, fmt.Sprintf("%s ready=%v", name, ready), func() (string, bool) {
		n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err.Error(), false
		}
		return fmt.Sprintf("ready=%v", kube.NodeIsReady(n)), kube.NodeIsReady(n) == ready
	}, func(last string) string { return "last seen: " + last })
}

// Remove node: the name must be typed; then the Node is deleted and it
// leaves the cluster's node list. Read-only mode refuses every action.
func TestRemoveNodeAndReadOnly(t *testing.T) {
	site := sitebox.Shared(t)
	cs := clientset(t, site)
	ctx := context.Background()
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	spare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-spare", Labels: map[string]string{"node-role.kubernetes.io/agent": "true"}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, spare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(ctx, spare.Name, metav1.DeleteOptions{}) })
	cm, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.ClusterConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before := cm.Data[kube.ClusterKeyNodes]
	cm.Data[kube.ClusterKeyNodes] = before + ",node-spare"
	if _, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	out, err := runSiteconEnv(t, []string{"SITECON_READONLY=1"}, "cordon", "node-a", "--yes", "--kubeconfig", site.Kubeconfig(), "--audit-log", auditLog)
	if err == nil || !strings.Contains(out, "read-only mode") {
		t.Fatalf("read-only cordon: %v\n%s", err, out)
	}
	if out, err := act(t, site, auditLog, "node", "remove", "node-spare", "--yes"); err == nil || !strings.Contains(out, "--confirm node-spare") {
		t.Fatalf("remove without the typed name: %v\n%s", err, out)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, "node-spare", metav1.GetOptions{}); err != nil {
		t.Fatalf("an unconfirmed removal removed the node: %v", err)
	}
	if out, err := act(t, site, auditLog, "node", "remove", "node-spare", "--yes", "--confirm", "node-spare"); err != nil || !strings.Contains(out, "node-spare removed") {
		t.Fatalf("remove: %v\n%s", err, out)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, "node-spare", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node-spare still there: %v", err)
	}
	cm, _ = cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.ClusterConfigMapName, metav1.GetOptions{})
	if cm.Data[kube.ClusterKeyNodes] != before {
		t.Fatalf("node list %q, want %q", cm.Data[kube.ClusterKeyNodes], before)
	}
	recs, _ := audit.Read(auditLog)
	var outcomes []string
	for _, r := range recs {
		outcomes = append(outcomes, r.Action+":"+r.Outcome)
	}
	if !slices.Equal(outcomes, []string{"remove-node:cancelled", "remove-node:intent", "remove-node:done"}) {
		t.Fatalf("audit outcomes %v", outcomes)
	}
	if st, err := os.Stat(auditLog); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("audit log mode: %v %v", st.Mode(), err)
	}
}

// Removing a lost device: its kubelet never confirms a pod gone, so the
// drain must not wait on the pods it evicted there, or the removal would
// hang until its timeout and the Node would stay.
func TestRemoveLostNode(t *testing.T) {
	site := sitebox.Shared(t)
	cs := clientset(t, site)
	ctx := context.Background()
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	// A node with no kubelet behind it: never Ready.
	lost := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-lost",
		Labels: map[string]string{"node-role.kubernetes.io/agent": "true", corev1.LabelHostname: "node-lost"}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, lost, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(ctx, "node-lost", metav1.DeleteOptions{}) })
	// The node-lifecycle controller writes to a new Node too: retry on conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lost, err := cs.CoreV1().Nodes().Get(ctx, "node-lost", metav1.GetOptions{})
		if err != nil {
			return err
		}
		lost.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("10"), corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi")}
		lost.Status.Allocatable = lost.Status.Capacity
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, lost, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// A workload that was running there when the device died.
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "on-lost", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "on-lost"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "on-lost"}},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{corev1.LabelHostname: "node-lost"},
					// It ran there before the node was lost; it does not
					// tolerate a cordon, so nothing lands there afterwards.
					Tolerations: []corev1.Toleration{
						{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists},
						{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists},
					},
					Containers: []corev1.Container{{Name: "c", Image: "registry.local/x:1"}},
				},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AppsV1().Deployments("default").Delete(context.Background(), "on-lost", metav1.DeleteOptions{})
		pods, _ := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=on-lost"})
		for _, p := range pods.Items {
			_ = cs.CoreV1().Pods("default").Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	})
	original := waitPods(t, cs, "default", metav1.ListOptions{LabelSelector: "app=on-lost", FieldSelector: "spec.nodeName=node-lost"}, 30*time.Second,
		"the workload's pod on node-lost", func(pods []corev1.Pod) bool { return len(pods) == 1 })[0].Name

	start := time.Now()
	out, err := act(t, site, auditLog, "node", "remove", "node-lost", "--yes", "--confirm", "node-lost", "--timeout", "90s")
	if err != nil || !strings.Contains(out, "node-lost removed") {
		t.Fatalf("removing a lost node: %v (after %s)\n%s", err, time.Since(start).Round(time.Second), out)
	}
	// What was done, said as it is: evicted, not confirmed gone.
	if !strings.Contains(out, "more asked to go and not confirmed gone") {
		t.Errorf("the drain of a lost node does not say its eviction was asked and not confirmed:\n%s", out)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, "node-lost", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node-lost still there: %v", err)
	}
	// Its pod was evicted, not left running: terminating (a lost kubelet
	// never confirms) or already collected with its Node.
	p, err := cs.CoreV1().Pods("default").Get(ctx, original, metav1.GetOptions{})
	if err == nil && p.DeletionTimestamp == nil {
		t.Fatalf("pod %s on the lost node was not evicted", original)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if rec := lastAudit(t, auditLog); rec.Action != "remove-node" || rec.Outcome != audit.OutcomeDone {
		t.Fatalf("audit record %+v", rec)
	}
}

// Replace node: the old node is removed (name typed) and the new one's join
// bundle carries the old node's cluster address.
func TestReplaceNode(t *testing.T) {
	site := sitebox.Shared(t)
	cs := clientset(t, site)
	ctx := context.Background()
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	agentNodeAt(t, cs, "node-old", siteAddr(site, 9))
	clusterID, configPath := formedConfig(t, site)
	const newUUID = "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	args := []string{"node", "replace", "node-old", "node-new", "--node-uuid", newUUID, "--config", configPath, "--state-dir", deviceRecords(configPath).Dir, "--yes"}
	if out, err := act(t, site, auditLog, args...); err == nil || !strings.Contains(out, "--confirm node-old") {
		t.Fatalf("replace without the typed name: %v\n%s", err, out)
	}
	out, err := act(t, site, auditLog, append(args, "--confirm", "node-old")...)
	if err != nil {
		t.Fatalf("replace: %v\n%s", err, out)
	}
	if _, err := cs.CoreV1().Nodes().Get(ctx, "node-old", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node-old still there: %v", err)
	}
	line, err := formation.BundleFromText(out)
	if err != nil {
		t.Fatalf("no join bundle in:\n%s\n%v", out, err)
	}
	bundle, err := formation.DecodeBundle(line)
	if err != nil {
		t.Fatalf("no usable join bundle in:\n%s\n%v", out, err)
	}
	if bundle.NodeName != "node-new" || bundle.NodeUUID != newUUID || !strings.HasPrefix(bundle.ClusterIPPrefix, siteAddr(site, 9)+"/") || bundle.ClusterID != clusterID {
		t.Fatalf("bundle %+v does not hand node-old's address to node-new", bundle)
	}
	// One flow, one record: the replace alone, as the console records it.
	// The bundle of the unconfirmed attempt was never shown, so no record
	// may say it was (the CLI once ran join-info inside, which did).
	recs, err := audit.Read(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, r := range recs {
		outcomes = append(outcomes, r.Action+":"+r.Outcome)
	}
	if want := []string{"replace-node:cancelled", "replace-node:intent", "replace-node:done"}; !slices.Equal(outcomes, want) {
		t.Fatalf("audit outcomes %v, want %v", outcomes, want)
	}
}

// Issue 11 item 3: a stopped app's volume whose only copy is on node-b
// (its replica stopped with its data, the volume detached) is not thrown
// away by node remove or replace: not in the preview, not forced with the
// name typed.
func TestRemoveRefusedStoppedOnlyCopy(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	// Nothing uses the volume (its app stopped): Longhorn has it detached
	// and its replica stopped, which keeps its data (healthyAt stays).
	site.Volume(t, "vol-stopped-b", sitebox.VolumeOptions{Replicas: 1, ReplicaOn: "node-b"})
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	const want = "node-b holds the only up-to-date copy of vol-stopped-b"
	// The preview first: on a preflight that misses the copy, the test
	// stops here, before anything is removed from the shared site.
	out, err := act(t, site, auditLog, "node", "remove", "node-b", "--dry-run")
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("remove --dry-run did not refuse over the stopped only copy: %v\n%s", err, out)
	}
	_, configPath := formedConfig(t, site)
	out, err = act(t, site, auditLog, "node", "replace", "node-b", "node-x", "--node-uuid", "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4e", "--config", configPath, "--state-dir", deviceRecords(configPath).Dir, "--dry-run")
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("replace --dry-run did not refuse over the stopped only copy: %v\n%s", err, out)
	}
	out, err = act(t, site, auditLog, "node", "remove", "node-b", "--yes", "--force", "--confirm", "node-b")
	if err == nil || !strings.Contains(out, want) || !strings.Contains(out, "removing node-b would discard it") {
		t.Fatalf("a forced, confirmed remove was not refused: %v\n%s", err, out)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
	if err != nil || n.Spec.Unschedulable {
		t.Fatalf("a refused remove touched node-b: %v", err)
	}
	if rec := lastAudit(t, auditLog); rec.Outcome != audit.OutcomeRefused || rec.Action != "remove-node" {
		t.Fatalf("audit record: %+v", rec)
	}
}

// Issue 10 item 4: with two etcd members left (node-c out of the member
// list, as after its removal), taking either down loses quorum, and the
// refusal says the arithmetic. The shared site's etcd keeps its three
// members for the other tests, so the list published is etcd's own less
// node-c's member, as the servers' agents would publish it then. Before
// it is published, quorum is unknown: refused, and the Nodes' etcd
// labels, though they name the same two servers, are said and not
// counted (issue 36 A).
func TestDrainQuorumTwoMembers(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	// A list an earlier test's agents published would be etcd's three.
	if err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Delete(ctx, kube.EtcdMembersConfigMapName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "node-c", metav1.GetOptions{})
	if err != nil || !kube.IsEtcdMember(n) {
		t.Fatalf("node-c is not an etcd member to start with: %v", err)
	}
	// node-c leaves the member list. The shared site keeps its three
	// kwok nodes for the other tests: its etcd label goes, not the Node.
	label := func(value any) {
		t.Helper()
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{kube.LabelEtcd: value}}})
		if _, err := cs.CoreV1().Nodes().Patch(context.Background(), "node-c", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label(nil)
	t.Cleanup(func() { label(n.Labels[kube.LabelEtcd]) })
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")

	// No member list published: quorum unknown, whatever the labels say.
	out, err := act(t, site, auditLog, "drain", "node-a", "--dry-run")
	if err == nil || !strings.Contains(out, "REFUSED  etcd's quorum is unknown, so draining node-a cannot be judged: etcd's member list is not published") {
		t.Fatalf("drain --dry-run with no member list published was not refused for quorum unknown: %v\n%s", err, out)
	}
	if !strings.Contains(out, "the Nodes' etcd role label names node-a, node-b: not counted") || strings.Contains(out, "2 etcd members") {
		t.Fatalf("the preflight counted the Nodes' labels, or did not say it left them out:\n%s", out)
	}

	// etcd's own list, less node-c's member.
	publishEtcdMembers(t, site, func(v *nodestate.EtcdView) {
		v.Members = slices.DeleteFunc(v.Members, func(m nodestate.EtcdMemberStatus) bool { return strings.HasPrefix(m.Name, "node-c") })
	})
	out, err = act(t, site, auditLog, "drain", "node-a", "--dry-run")
	if err == nil || !strings.Contains(out, "REFUSED  2 etcd members, all healthy; draining node-a leaves 1 of the 2 needed") {
		t.Fatalf("drain --dry-run with two etcd members was not refused with the arithmetic: %v\n%s", err, out)
	}
	if !strings.Contains(out, "etcd members as etcd lists them (observed by node-") {
		t.Fatalf("the preflight did not say it counted etcd's own list:\n%s", out)
	}
	out, err = act(t, site, auditLog, "node", "remove", "node-b", "--dry-run")
	if err == nil || !strings.Contains(out, "REFUSED  2 etcd members, all healthy; removing node-b leaves 1 of the 2 needed") {
		t.Fatalf("remove --dry-run with two etcd members was not refused with the arithmetic: %v\n%s", err, out)
	}
	// node-c itself is no member now: draining it touches no quorum.
	if out, err := act(t, site, auditLog, "drain", "node-c", "--dry-run"); strings.Contains(out, "etcd members,") && strings.Contains(out, "REFUSED") {
		t.Fatalf("draining a node outside the member list was judged on quorum: %v\n%s", err, out)
	}
}

// Issue 11 item 3: a running drain relies on the copies elsewhere of the
// volumes whose data is on the node. When one of those fails mid-drain,
// the evictions stop, the node stays cordoned, and the reason is given.
func TestDrainStopsWhenACopyElsewhereFails(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	// Copies on node-b and node-a.
	replicatedVolume(t, site, "vol-watch", "node-b", 2)
	// A pod on node-b that a disruption budget holds: the drain waits on
	// it, retrying its eviction, for as long as the test needs.
	const ns, name = "default", "held-on-b"
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				NodeSelector: map[string]string{corev1.LabelHostname: "node-b"},
				Containers:   []corev1.Container{{Name: "c", Image: "registry.local/x:1"}},
			}},
		},
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{})
		_ = cs.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, name, metav1.DeleteOptions{})
		if _, err := change.Cordon(ctx, cs, "node-b", false); err != nil {
			t.Errorf("uncordon node-b: %v", err)
		}
	})
	waitPods(t, cs, ns, metav1.ListOptions{LabelSelector: "app=" + name}, 30*time.Second, "the held pod Ready on node-b", onlyPodReadyOn("node-b"))
	// node-b is a server: its drain is judged on etcd's member list.
	publishEtcdMembers(t, site)
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, sitecon, "drain", "node-b", "--yes", "--force", "--confirm", "node-b", "--timeout", "60s",
		"--kubeconfig", site.Kubeconfig(), "--audit-log", auditLog)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// The drain is under way once node-b is cordoned (its watch of the
	// volumes is set up before the cordon).
	_ = until(t, 30*time.Second, "the drain cordons node-b", func() (error, bool) {
		n, err := cs.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
		return err, err == nil && n.Spec.Unschedulable
	}, func(err error) string {
		cancel() // the drain's output is whole once it has ended
		<-done
		return fmt.Sprintf("node-b not cordoned (get: %v); the drain's output:\n%s", err, out.String())
	})
	// node-a's copy fails, as a disk or node failure makes Longhorn mark it.
	failedAt := time.Now().UTC().Format(time.RFC3339)
	setReplicas(t, site, "vol-watch", "node-a", func(r *lhv1beta2.Replica) {
		r.Spec.FailedAt, r.Spec.LastFailedAt = failedAt, failedAt
	}, lhv1beta2.InstanceStateError)
	err := <-done
	s := out.String()
	if err == nil || !strings.Contains(s, "STOPPED  vol-watch") || !strings.Contains(s, "lost an up-to-date copy on another node") || !strings.Contains(s, "node-b stays cordoned") {
		t.Fatalf("the drain did not stop when node-a's copy failed: %v\n%s", err, s)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
	if err != nil || !n.Spec.Unschedulable {
		t.Fatalf("node-b is not left cordoned: %v", err)
	}
	if rec := lastAudit(t, auditLog); rec.Outcome != audit.OutcomeFailed || !strings.Contains(rec.Error, "vol-watch") {
		t.Fatalf("audit record: %+v", rec)
	}
}

// siteConfig writes node's cluster config for the sitebox site itself (its
// cluster ID, its addresses), as the device holds it, and returns its path.
func siteConfig(t *testing.T, site *sitebox.TestSite, node string) string {
	t.Helper()
	plan, err := formation.Plan(formation.FormRequest{ClusterName: site.ClusterName, Interface: "eth1", Prefix: site.NodePrefix(),
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range plan.Nodes {
		if b.NodeName != node {
			continue
		}
		b.ClusterID = site.ClusterID
		files, err := b.Files(t.TempDir(), "")
		if err == nil {
			err = files.Write()
		}
		if err != nil {
			t.Fatal(err)
		}
		return files.ConfigPath
	}
	t.Fatalf("no %s in the plan", node)
	return ""
}

// The seed in effect is neither removed nor replaced: both are refused,
// with the command that moves it, and nothing is touched. Once the seed is
// moved (sitecon seed node-b), a bundle made with node-c's files carries the
// seed in effect, not the one node-c's config was formed with.
func TestRemoveOrReplaceOfTheSeedRefused(t *testing.T) {
	site := sitebox.Shared(t)
	cs := clientset(t, site)
	ctx := context.Background()
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	configC := siteConfig(t, site, "node-c")
	const newUUID = "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	want := "node-a is the seed in effect (join address " + siteAddr(site, 1) + "); move the seed first: sitecon seed node-b"

	untouched := func(what string) {
		t.Helper()
		n, err := cs.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil || n.Spec.Unschedulable {
			t.Fatalf("after a refused %s node-a is gone or cordoned: %v", what, err)
		}
		if rec := lastAudit(t, auditLog); rec.Outcome != audit.OutcomeRefused {
			t.Fatalf("audit record after a refused %s: %+v", what, rec)
		}
	}
	out, err := act(t, site, auditLog, "node", "remove", "node-a", "--yes", "--confirm", "node-a", "--force")
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("removing the seed: %v, want the refusal %q:\n%s", err, want, out)
	}
	untouched("remove")
	out, err = act(t, site, auditLog, "node", "replace", "node-a", "node-x", "--node-uuid", newUUID, "--config", configC, "--state-dir", deviceRecords(configC).Dir,
		"--yes", "--confirm", "node-a", "--force")
	if err == nil || !strings.Contains(out, want) || strings.Contains(out, "sitecon form --join") {
		t.Fatalf("replacing the seed: %v, want the refusal %q and no bundle:\n%s", err, want, out)
	}
	untouched("replace")

	// The seed moves to node-b; node-c's files still name node-a.
	t.Cleanup(func() {
		if out, err := act(t, site, auditLog, "seed", "node-a", "--yes"); err != nil {
			t.Errorf("restore the seed: %v\n%s", err, out)
		}
	})
	if out, err := act(t, site, auditLog, "seed", "node-b", "--yes"); err != nil {
		t.Fatalf("seed node-b: %v\n%s", err, out)
	}
	out, err = act(t, site, auditLog, "node", "add", "--config", configC, "--state-dir", deviceRecords(configC).Dir, "--role", "server", "--node-name", "node-x",
		"--node-uuid", newUUID, "--node-ip", siteAddr(site, 9))
	if err != nil {
		t.Fatalf("node add: %v\n%s", err, out)
	}
	line, _ := formation.BundleFromText(out)
	bundle, err := formation.DecodeBundle(line)
	if err != nil || bundle.JoinServerIP != siteAddr(site, 2) || !bundle.ExistingCluster {
		t.Fatalf("the bundle must join through the seed in effect (node-b, %s) as an existing cluster: %+v, %v\n%s", siteAddr(site, 2), bundle, err, out)
	}
	if out, err := act(t, site, auditLog, "node", "remove", "node-b", "--yes", "--confirm", "node-b", "--force"); err == nil ||
		!strings.Contains(out, "node-b is the seed in effect (join address "+siteAddr(site, 2)+")") {
		t.Fatalf("removing the moved seed: %v\n%s", err, out)
	}
}
