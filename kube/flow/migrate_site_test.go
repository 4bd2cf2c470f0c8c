package flow

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/audit/audittest"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/test/sitebox"
)

// awayApp runs an auto app's Deployment, laid out as an agent lays it out
// (its designated node preferred, the config's stamps on it), whose one
// pod runs on away while its designated node home was cordoned, as after a
// failover; home is back in service when it returns. It returns the app's
// UUID.
func awayApp(t *testing.T, site *sitebox.TestSite, name, home, away string) string {
	t.Helper()
	ctx := context.Background()
	cs := site.Clients(t).Core
	uuid := fmt.Sprintf("ab0e0000-0000-4000-8000-%012x", len(name))
	labels := map[string]string{kube.LabelAppUUID: uuid, kube.LabelAppName: name}
	// Every node but away is cordoned while the pod is placed.
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		if n == away {
			continue
		}
		if _, err := change.Cordon(ctx, cs, n, true); err != nil {
			t.Fatal(err)
		}
		uncordonOnCleanup(t, site, n)
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kube.AppNamespace, Labels: labels,
			Annotations: map[string]string{kube.AnnotationConfigDNId: sitebox.NodeUUID(home)}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{kube.LabelAppUUID: uuid}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100,
							Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
								{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{home}}}}}}}},
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{{Name: "c", Image: "registry.local/" + name + ":1"}},
				},
			},
		},
	}
	deps := cs.AppsV1().Deployments(kube.AppNamespace)
	if _, err := deps.Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = deps.Delete(context.Background(), name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		patch := fmt.Sprintf(`{"data":{%q:null}}`, uuid)
		_, _ = cs.CoreV1().ConfigMaps(kube.AppNamespace).Patch(context.Background(), kube.PlacementConfigMapName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	})
	runningOn(t, site, uuid, away)
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		if n != away {
			if _, err := change.Cordon(ctx, cs, n, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	return uuid
}

// runningOn waits until the app's one live pod runs on node.
func runningOn(t *testing.T, site *sitebox.TestSite, uuid, node string) {
	t.Helper()
	cs := site.Clients(t).Core
	last := ""
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(kube.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + uuid})
		if err != nil {
			return false, nil
		}
		var seen []string
		running := 0
		for _, p := range pods.Items {
			seen = append(seen, fmt.Sprintf("%s %s on %q deleting=%t", p.Name, p.Status.Phase, p.Spec.NodeName, p.DeletionTimestamp != nil))
			if p.DeletionTimestamp == nil && p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		last = strings.Join(seen, "; ")
		return running == 1, nil
	})
	if err != nil {
		t.Fatalf("app %s never ran on %s: %v (pods: %s)", uuid, node, err, last)
	}
}

// An app away from the node its layout designates (after a failover, the
// node back): a move there is a move home. The override it would write
// names the node the layout names already, so it changes nothing the
// agents lay out, and the pod, whose affinity is only preferred, stays
// where it is: the move must start the app again for the scheduler to
// place it home. Nothing is written to the placement ConfigMap.
func TestMigrateToTheNodeItsLayoutDesignates(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	uuid := awayApp(t, site, "away-home", "node-b", "node-a")
	snap := sitebox.StartSnapshot(t, site.Config)
	r, path := testRecorder(t)
	m, err := PlanMigrate(context.Background(), r, snap, MigrateRequest{App: uuid, Target: "node-b", Timeout: 60 * time.Second, Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	if err := m.Run(context.Background(), func(l string) { lines = append(lines, l) }); err != nil {
		t.Fatalf("move home: %v\n%s", err, strings.Join(lines, "\n"))
	}
	runningOn(t, site, uuid, "node-b")
	if got := audittest.Outcomes(t, path); got != "migrate:intent migrate:done" {
		t.Fatalf("records %q", got)
	}
	cm, err := site.Clients(t).Core.CoreV1().ConfigMaps(kube.AppNamespace).Get(context.Background(), kube.PlacementConfigMapName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if cm != nil && cm.Data[uuid] != "" {
		t.Fatalf("an override naming the node the layout designates was written: %s", cm.Data[uuid])
	}
}
