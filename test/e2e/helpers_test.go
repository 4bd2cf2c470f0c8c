package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	lhclientset "github.com/longhorn/longhorn-manager/k8s/pkg/client/clientset/versioned"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/test/sitebox"
)

// What the end-to-end tests share: the one way to wait (until, and holds
// for what must stay true over a window), running the binary, the site's
// clients and fixtures, the in-process apps and node agents, and the
// console driven in tmux. A helper one test file alone uses stays there.

// ---- Waiting: a condition with a deadline, never a sleep ----

// pollEvery is how often until looks.
const pollEvery = 100 * time.Millisecond

// poll calls look every interval until it reports done or within passes,
// and returns what it saw last and whether it was done. The first look is
// at once; a look that reports done after the deadline still counts.
func poll[T any](every, within time.Duration, look func() (T, bool)) (T, bool) {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		last, done := look()
		if done || !time.Now().Before(deadline) {
			return last, done
		}
		<-tick.C
	}
}

// until polls look (every 100 ms) until it reports done or within passes,
// and returns what it saw last. On the deadline the test fails with what
// it waited for and, when describe is given, what it last saw. Every
// e2e wait goes through here: a condition with a deadline, never a sleep.
func until[T any](t testing.TB, within time.Duration, what string, look func() (T, bool), describe func(T) string) T {
	t.Helper()
	last, done := poll(pollEvery, within, look)
	if !done {
		msg := fmt.Sprintf("%s: not within %s", what, within)
		if describe != nil {
			msg += "; " + describe(last)
		}
		t.Fatal(msg)
	}
	return last
}

// holds checks, every 200 ms for the whole window, that what stays true:
// broken says how it no longer is (nil: still true, or nothing to judge on
// this look, as an API error). The test fails at the first break.
func holds(t testing.TB, window time.Duration, what string, broken func() error) {
	t.Helper()
	start := time.Now()
	if err, broke := poll(200*time.Millisecond, window, func() (error, bool) {
		err := broken()
		return err, err != nil
	}); broke {
		t.Fatalf("%s: broken after %s of %s: %v", what, time.Since(start).Round(100*time.Millisecond), window, err)
	}
}

// ---- Running sitecon ----

// runSitecon runs the binary and returns stdout, stderr and the exit error.
func runSitecon(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sitecon, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// act runs a sitecon action command against the site with its own audit log.
func act(t *testing.T, site *sitebox.TestSite, auditLog string, args ...string) (string, error) {
	t.Helper()
	out, errOut, err := runSitecon(t, append(args, "--kubeconfig", site.Kubeconfig(), "--audit-log", auditLog)...)
	return out + errOut, err
}

func lastAudit(t *testing.T, path string) audit.Record {
	t.Helper()
	recs, err := audit.Read(path)
	if err != nil || len(recs) == 0 {
		t.Fatalf("no audit record in %s: %v", path, err)
	}
	return recs[len(recs)-1]
}

// ---- The site: clients, fixtures ----

func clientset(t *testing.T, site *sitebox.TestSite) kubernetes.Interface {
	t.Helper()
	return site.Clients(t).Core
}

func dynClient(t *testing.T, site *sitebox.TestSite) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}

func longhornClient(t *testing.T, site *sitebox.TestSite) lhclientset.Interface {
	t.Helper()
	return site.Clients(t).Longhorn
}

// singleReplicaVolume creates a Longhorn volume whose one replica is on
// node, in use by a pod on node-a (Longhorn attaches only a volume in use),
// waits until it is healthy, and removes it (replicas included) after the
// test.
func singleReplicaVolume(t *testing.T, site *sitebox.TestSite, name, node string) {
	t.Helper()
	replicatedVolume(t, site, name, node, 1)
}

// replicatedVolume creates a Longhorn volume with n replicas, one on node,
// in use by a pod on node-a, waits until it is healthy, and removes it
// (replicas included) after the test.
func replicatedVolume(t *testing.T, site *sitebox.TestSite, name, node string, n int) {
	t.Helper()
	site.Volume(t, name, sitebox.VolumeOptions{Replicas: n, ReplicaOn: node, UsedOn: "node-a"})
}

// agentNodeAt adds an agent Node object (no kwok behind it) with the
// internal address ip, removed when the test ends.
func agentNodeAt(t *testing.T, cs kubernetes.Interface, name, ip string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"node-role.kubernetes.io/agent": "true"}}}
	if _, err := cs.CoreV1().Nodes().Create(t.Context(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	// A patch: the node controller writes the new Node's status too.
	patch := []byte(`{"status":{"addresses":[{"type":"InternalIP","address":"` + ip + `"}]}}`)
	if _, err := cs.CoreV1().Nodes().Patch(t.Context(), name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

// siteAddr is host number host of the site's node network, on this
// machine (1: node-a's address, 2: node-b's, ...).
func siteAddr(site *sitebox.TestSite, host int) string {
	a := netip.MustParsePrefix(site.NodePrefix()).Addr().As4()
	a[3] = byte(host)
	return netip.AddrFrom4(a).String()
}

// formedConfig writes node-a's cluster config as formation leaves it (the
// site's three nodes) and returns the cluster's ID and the config's path.
func formedConfig(t *testing.T, site *sitebox.TestSite) (clusterID, path string) {
	t.Helper()
	plan, err := formation.Plan(formation.FormRequest{ClusterName: "sitebox-test", Interface: "eth1", Prefix: site.NodePrefix(),
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	files, err := plan.Nodes[0].Files(t.TempDir(), "")
	if err == nil {
		err = files.Write()
	}
	if err != nil {
		t.Fatal(err)
	}
	return plan.ClusterID, files.ConfigPath
}

// putClusterRecordAside removes sitebox's own cluster record for a test
// whose agents write theirs, and puts it back when the test ends.
func putClusterRecordAside(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	cms := cs.CoreV1().ConfigMaps(kube.AppNamespace)
	siteRecord, err := cms.Get(t.Context(), kube.ClusterConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(t.Context(), kube.ClusterConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bg := context.Background()
		_ = cms.Delete(bg, kube.ClusterConfigMapName, metav1.DeleteOptions{})
		restored := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: siteRecord.Name, Namespace: siteRecord.Namespace}, Data: siteRecord.Data}
		if _, err := cms.Create(bg, restored, metav1.CreateOptions{}); err != nil {
			t.Errorf("restore the site's cluster record: %v", err)
		}
	})
}

// ---- Fixtures and small helpers ----
// (The in-process apps agents are in siteagents_test.go, the bootstrap
// node agents in nodeagents_test.go, the pod and Event waits in
// podwaits_test.go, the console in tmux in tmuxconsole_test.go.)

func writeJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := config.WriteFileAtomic(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// placeOnlyReplica creates a volume's claim as the agents lay it out, with
// the Longhorn simulator's test-side knob naming the node for its replica
// (as an administrator would pin it with Longhorn node tags); the agents
// then apply their layout over it and leave the knob alone.
func placeOnlyReplica(t *testing.T, dyn dynamic.Interface, v apps.VolumeConfig, node string) {
	t.Helper()
	l, err := apps.LayoutVolume(v)
	if err != nil {
		t.Fatal(err)
	}
	obj := l.Object.DeepCopy()
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[sitebox.AnnotationReplicaNode] = node
	obj.SetAnnotations(ann)
	if _, err := dyn.Resource(l.GVR).Namespace(l.Namespace()).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// siteconApply is sitecon's server-side apply entry on obj: when it was
// made and the fields it owns. Another apply that changes anything changes it.
func siteconApply(obj metav1.Object) string {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == apps.FieldManager && f.Operation == metav1.ManagedFieldsOperationApply {
			fields := ""
			if f.FieldsV1 != nil {
				fields = f.FieldsV1.GetRawString()
			}
			return f.Time.UTC().Format(time.RFC3339) + " " + fields
		}
	}
	return "(none)"
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// clearStatsLeaderLease deletes the stats-leader Lease an earlier test's
// agents left behind. A holder that died without giving it up (a power
// cut) leaves a record that every new candidate honours for the record's
// whole lease duration from when it first reads it, however long ago the
// holder last renewed (client-go's leader election times the lease by its
// own observation, never by the record's renew time): 30 s at the shipped
// timings. A test that times a stats-leader election starts without one;
// call it with no agent of the site running.
func clearStatsLeaderLease(t testing.TB, cs kubernetes.Interface) {
	t.Helper()
	err := cs.CoordinationV1().Leases(kube.AppNamespace).Delete(context.Background(), kube.StatsLeaderLeaseName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("clear the stats-leader lease: %v", err)
	}
}

// pdbGuardedDeployment runs replicas pods of a Deployment ns/name that
// prefer node, under a PodDisruptionBudget that keeps one available: a
// drain of node evicts them one at a time, and a single replica's eviction
// waits for as long as the drain does. Cleanup deletes both and uncordons
// node.
func pdbGuardedDeployment(t *testing.T, cs kubernetes.Interface, ns, name, node string, replicas int32) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
						Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
							{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}},
					Containers: []corev1.Container{{Name: "web", Image: "registry.local/web:1"}},
				},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{})
		_ = cs.PolicyV1().PodDisruptionBudgets(ns).Delete(ctx, name, metav1.DeleteOptions{})
		if _, err := change.Cordon(ctx, cs, node, false); err != nil {
			t.Errorf("uncordon %s: %v", node, err)
		}
	})
}
