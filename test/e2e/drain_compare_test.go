package e2e

import (
	"bytes"
	"cmp"
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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/test/sitebox"
)

// The same drain scenario, drained for real by kubectl drain and then (put
// back as it was) by sitecon drain: both evict the same pods, through the
// eviction API (a plain delete fails the test), and both wait on a
// disruption budget that allows nothing rather than delete its pod. The scenario
// is pinned to one node: a StatefulSet (stable pod names), a Deployment with
// emptyDir data (evicted with --delete-emptydir-data), and a DaemonSet
// (left alone by both). kubectl is the control-plane build's (1.34);
// KUBECTL=/usr/bin/kubectl runs the comparison against another one.
func TestDrainEvictsWhatKubectlEvicts(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	const ns, node = "drain-compare", "node-c"
	// Cleanups run last first: uncordoned once the namespace is gone.
	t.Cleanup(func() {
		if _, err := change.Cordon(context.Background(), cs, node, false); err != nil {
			t.Errorf("uncordon %s: %v", node, err)
		}
	})
	scratchNamespace(t, cs, ns)
	pinned := corev1.PodSpec{
		NodeSelector: map[string]string{corev1.LabelHostname: node},
		Containers:   []corev1.Container{{Name: "c", Image: "registry.local/x:1"}},
	}
	template := func(app string, spec corev1.PodSpec) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}}, Spec: spec}
	}
	selector := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
	}
	scratch := pinned
	scratch.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       appsv1.StatefulSetSpec{Replicas: ptr.To[int32](2), Selector: selector("db"), Template: template("db", pinned), PodManagementPolicy: appsv1.ParallelPodManagement},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "cache"},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: selector("cache"), Template: template("cache", scratch)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent"},
		Spec:       appsv1.DaemonSetSpec{Selector: selector("agent"), Template: template("agent", pinned)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	settled := func(want int) {
		t.Helper()
		waitPods(t, cs, ns, metav1.ListOptions{}, 60*time.Second, fmt.Sprintf("the scenario whole on %s (%d pods Ready, none going)", node, want), func(pods []corev1.Pod) bool {
			running := 0
			for _, p := range pods {
				if p.DeletionTimestamp != nil {
					return false
				}
				if p.Spec.NodeName == node && kube.PodReady(&p) {
					running++
				}
			}
			return running == want
		})
	}

	// node-c is a server: sitecon's drains of it are judged on etcd's
	// member list, kept fresh through the kubectl drains before them.
	publishEtcdMembers(t, site)
	kubectl := cmp.Or(os.Getenv("KUBECTL"), filepath.Join(site.BinDir, "kubectl"))
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	drains := []struct {
		who string
		run func() (string, error)
	}{
		{"kubectl drain", func() (string, error) {
			var out bytes.Buffer
			cmd := exec.Command(kubectl, "--kubeconfig", site.Kubeconfig(), "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=90s")
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			return out.String(), err
		}},
		{"sitecon drain", func() (string, error) {
			return act(t, site, auditLog, "drain", node, "--yes", "--delete-emptydir-data", "--timeout", "90s")
		}},
	}
	var evicted [][]string
	for _, d := range drains {
		settled(4)
		got, out, err := recordEvictions(t, cs, ns, d.run)
		if err != nil {
			t.Fatalf("%s: %v\n%s", d.who, err, out)
		}
		t.Logf("%s evicted %v, deleted without eviction %v", d.who, got.evicted, got.deleted)
		evicted = append(evicted, got.evicted)
		if len(got.deleted) > 0 {
			t.Errorf("%s deleted %v without the eviction API", d.who, got.deleted)
		}
		if _, err := change.Cordon(ctx, cs, node, false); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"Deployment/cache", "db-0", "db-1"}
	for i, d := range drains {
		if !slices.Equal(evicted[i], want) {
			t.Errorf("%s evicted %v, want %v (the DaemonSet pod stays)", d.who, evicted[i], want)
		}
	}

	// A budget that allows no disruption: both drains wait on it (an
	// eviction refused with 429, retried) until their timeout, and neither
	// deletes the pod it guards.
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: selector("guarded"), Template: template("guarded", pinned)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(0)), Selector: selector("guarded")},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, 30*time.Second, "the disruption controller takes up the budget (1 healthy, 0 disruptions allowed)", func() (*policyv1.PodDisruptionBudget, bool) {
		p, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, "guarded", metav1.GetOptions{})
		return p, err == nil && p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 1 && p.Status.DisruptionsAllowed == 0
	}, func(p *policyv1.PodDisruptionBudget) string {
		return fmt.Sprintf("generation %d, status %+v", p.Generation, p.Status)
	})
	held := []struct {
		who string
		run func() (string, error)
	}{
		{"kubectl drain", func() (string, error) {
			var out bytes.Buffer
			cmd := exec.Command(kubectl, "--kubeconfig", site.Kubeconfig(), "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=12s")
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			return out.String(), err
		}},
		{"sitecon drain", func() (string, error) {
			return act(t, site, auditLog, "drain", node, "--yes", "--delete-emptydir-data", "--timeout", "12s")
		}},
	}
	for _, d := range held {
		settled(5)
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=guarded"})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("the guarded pod: %v %v", pods, err)
		}
		guarded := pods.Items[0]
		start := time.Now()
		got, out, err := recordEvictions(t, cs, ns, d.run)
		took := time.Since(start)
		t.Logf("%s under a budget of 0 (%s): evicted %v, deleted without eviction %v, err %v\n%s", d.who, took.Round(time.Second), got.evicted, got.deleted, err, out)
		if err == nil {
			t.Errorf("%s finished while a budget allowing no disruption covered a pod on %s", d.who, node)
		}
		if took < 10*time.Second {
			t.Errorf("%s gave up after %s: it did not wait on the budget", d.who, took)
		}
		if !strings.Contains(out, "disruption budget") {
			t.Errorf("%s did not say the disruption budget held it", d.who)
		}
		if slices.Contains(got.evicted, "Deployment/guarded") || slices.Contains(got.deleted, "Deployment/guarded") {
			t.Errorf("%s took the pod the budget guards", d.who)
		}
		if len(got.deleted) > 0 {
			t.Errorf("%s deleted %v without the eviction API", d.who, got.deleted)
		}
		now, err := cs.CoreV1().Pods(ns).Get(ctx, guarded.Name, metav1.GetOptions{})
		if err != nil || now.UID != guarded.UID || now.DeletionTimestamp != nil {
			t.Errorf("%s: the guarded pod %s is gone or going (%v)", d.who, guarded.Name, err)
		}
		if _, err := change.Cordon(ctx, cs, node, false); err != nil {
			t.Fatal(err)
		}
	}
}

// drained is what a drain did to the scenario's pods: evicted through the
// eviction API (the API server marks such a pod DisruptionTarget, reason
// EvictionByEvictionAPI, before it deletes it), or deleted plainly.
type drained struct{ evicted, deleted []string }

// recordEvictions runs a drain and returns the scenario pods it evicted and
// deleted, named so that both runs compare: a StatefulSet pod by its stable
// name, a Deployment's pod by its Deployment.
func recordEvictions(t *testing.T, cs kubernetes.Interface, ns string, drain func() (string, error)) (drained, string, error) {
	t.Helper()
	w, err := cs.CoreV1().Pods(ns).Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	evicted, deleted := map[string]bool{}, map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.DeletionTimestamp == nil {
				continue
			}
			mu.Lock()
			if evictedByAPI(p) {
				evicted[evictionName(p)] = true
			} else {
				deleted[evictionName(p)] = true
			}
			mu.Unlock()
		}
	}()
	out, err := drain()
	w.Stop()
	<-done
	var d drained
	for n := range evicted {
		d.evicted = append(d.evicted, n)
	}
	for n := range deleted {
		if !evicted[n] {
			d.deleted = append(d.deleted, n)
		}
	}
	slices.Sort(d.evicted)
	slices.Sort(d.deleted)
	return d, out, err
}

// evictedByAPI: the eviction subresource sets this condition on the pod
// before it deletes it; a plain DELETE does not.
func evictedByAPI(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "EvictionByEvictionAPI" {
			return true
		}
	}
	return false
}

func evictionName(p *corev1.Pod) string {
	for _, o := range p.OwnerReferences {
		switch o.Kind {
		case "StatefulSet":
			return p.Name
		case "ReplicaSet":
			if i := strings.LastIndex(o.Name, "-"); i > 0 {
				return "Deployment/" + o.Name[:i]
			}
		case "DaemonSet":
			return "DaemonSet/" + o.Name
		}
	}
	return "pod/" + p.Name
}
