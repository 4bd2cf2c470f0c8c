package views

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/kubetest"
)

// troubledSite is one cluster read with a problem of every kind the
// overview alerts on: node-b lost (and the stats leader with it), node-c
// left cordoned, a volume degraded and one faulted, an app on the lost
// node, one running but not ready, one the scheduler cannot place.
func troubledSite(now time.Time) kube.Data {
	nodeA := kubetest.Node("node-a", "10.0.0.1", corev1.ConditionTrue, now.Add(-24*time.Hour), kubetest.ServerLabels)
	nodeB := kubetest.Node("node-b", "10.0.0.2", corev1.ConditionUnknown, now.Add(-10*time.Minute), kubetest.ServerLabels)
	nodeC := kubetest.Node("node-c", "10.0.0.3", corev1.ConditionTrue, now.Add(-24*time.Hour), kubetest.ServerLabels)
	nodeC.Spec.Unschedulable = true
	nodeC.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule, TimeAdded: ptr.To(metav1.NewTime(now.Add(-2 * time.Hour)))}}
	appPod := func(app, name, node string, phase corev1.PodPhase, ready bool) *corev1.Pod {
		p := kubetest.Pod(kube.AppNamespace, name, node, phase, ready)
		p.Labels = map[string]string{kube.LabelAppName: app, kube.LabelAppUUID: "uuid-" + app}
		p.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
		return p
	}
	pending := appPod("reports", "reports-1", "", corev1.PodPending, false)
	pending.Status.Conditions = append(pending.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: "Unschedulable", LastTransitionTime: metav1.NewTime(now.Add(-4 * time.Minute)), Message: "0/3 nodes are available"})
	volume := func(name string, robustness lhv1beta2.VolumeRobustness) *lhv1beta2.Volume {
		v := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "longhorn-system"}}
		v.Spec.NumberOfReplicas = 3
		v.Status.State, v.Status.Robustness = lhv1beta2.VolumeStateAttached, robustness
		v.Status.CurrentNodeID = "node-a"
		return v
	}
	degraded, faulted := volume("vol-deg", lhv1beta2.VolumeRobustnessDegraded), volume("vol-fault", lhv1beta2.VolumeRobustnessFaulted)
	degraded.Status.LastDegradedAt = now.Add(-2 * time.Hour).Format(time.RFC3339)
	return kube.Data{
		Nodes: []*corev1.Node{nodeA, nodeB, nodeC},
		Pods: []*corev1.Pod{
			appPod("plc", "plc-1", "node-b", corev1.PodRunning, true),
			appPod("hmi", "hmi-1", "node-a", corev1.PodRunning, false),
			appPod("broker", "broker-1", "node-a", corev1.PodRunning, true),
			pending,
		},
		Leases: []*coordinationv1.Lease{{ObjectMeta: metav1.ObjectMeta{Name: kube.StatsLeaderLeaseName, Namespace: kube.AppNamespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-b"), LeaseDurationSeconds: ptr.To[int32](15),
				AcquireTime: ptr.To(metav1.NewMicroTime(now.Add(-3 * time.Hour))), RenewTime: ptr.To(metav1.NewMicroTime(now.Add(-10 * time.Minute)))}}},
		Volumes: []*lhv1beta2.Volume{degraded, faulted},
		Replicas: []*lhv1beta2.Replica{
			kubetest.Replica("vol-deg-r1", "vol-deg", "node-a", "", "2026-11-22T01:00:00Z", lhv1beta2.InstanceStateRunning),
			kubetest.Replica("vol-deg-r2", "vol-deg", "node-b", "2026-11-22T02:00:00Z", "2026-11-22T01:00:00Z", lhv1beta2.InstanceStateError),
			kubetest.Replica("vol-fault-r1", "vol-fault", "node-b", "2026-11-22T02:00:00Z", "2026-11-22T01:00:00Z", lhv1beta2.InstanceStateError),
		},
		HasLonghorn: true,
	}
}

// One truth: every problem the overview (and `sitecon status`, which
// prints the same alerts) shows, the doctor finds too, under the same id
// and about the same subject, never as ok; and every problem the doctor
// finds of those ids, the overview shows. A console that alerts while the
// doctor says ok (or the other way) leaves the technician to pick one.
func TestOverviewAndDoctorFindTheSameProblems(t *testing.T) {
	now := kubetest.T0
	t.Run("a node lost with the stats leader", func(t *testing.T) { sameProblems(t, troubledSite(now), now) })
	// The leader's node is Ready, its agent stopped: its lease ran out.
	expired := troubledSite(now)
	expired.Leases[0] = expired.Leases[0].DeepCopy()
	expired.Leases[0].Spec.HolderIdentity = ptr.To("node-a")
	t.Run("the stats leader's lease ran out on a Ready node", func(t *testing.T) { sameProblems(t, expired, now) })
}

// sameProblems checks that the overview and the doctor find the same
// problems in d.
func sameProblems(t *testing.T, d kube.Data, now time.Time) {
	st := kube.Derive(d, now)
	alerts := Alerts(&Frame{Status: st}, now)
	report := doctor.Run(context.Background(), doctor.Checks(), &doctor.Env{Data: d, Now: now})

	// The overview's subjects are what a detail opens on (node/NAME,
	// app/ROW); the doctor's, the name a technician types.
	appNames := map[string]string{}
	for _, a := range st.Apps {
		appNames[appSubject(a)] = a.Name
	}
	subject := func(s string) string {
		if name, ok := appNames[s]; ok {
			return name
		}
		_, name, _ := strings.Cut(s, "/")
		return name
	}
	shown := map[string]bool{}
	ids := map[string]bool{}
	for _, a := range alerts {
		if a.ID == "" {
			continue
		}
		shown[a.ID+" "+subject(a.Subject)] = true
		ids[a.ID] = true
	}
	found := map[string]doctor.Finding{}
	for _, f := range report.Findings {
		if ids[f.ID] && f.Severity > doctor.OK {
			found[f.ID+" "+f.Subject] = f
		}
	}
	for _, want := range []string{doctor.IDNodeNotReady, doctor.IDNodeCordoned, doctor.IDStatsLeaderLost, doctor.IDVolumeDegraded,
		doctor.IDVolumeFaulted, doctor.IDAppNotRunning, doctor.IDAppPending} {
		if !ids[want] {
			t.Errorf("the fixture raised no %s alert: it no longer covers that kind (alerts: %v)", want, lines(alerts))
		}
	}
	for k := range shown {
		if _, ok := found[k]; !ok {
			t.Errorf("the overview shows %s, the doctor has no finding for it", k)
		}
	}
	for k, f := range found {
		if !shown[k] {
			t.Errorf("the doctor finds %s (%s), the overview does not show it", k, f.Summary)
		}
	}
}

func lines(alerts []Alert) string {
	var out []string
	for _, a := range alerts {
		out = append(out, fmt.Sprintf("%q", a.Line()))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// Issue 38: `sitecon status` prints the same alerts as the overview, but
// a command line has no screens: its next steps are commands, never a
// console key ("l on apps", "u on nodes", "the events screen").
func TestStatusAlertsNameNoConsoleKeys(t *testing.T) {
	now := kubetest.T0
	d := troubledSite(now)
	st := kube.Derive(d, now)
	st.Namespaces = append(st.Namespaces, kube.NamespaceHealth{Name: "shop", Failed: 2})
	frames := []Frame{{Status: st}, alertsFrame()}
	consoleWords := []string{" on apps", " on nodes", "screen", "enter on", "l on ", "u on "}
	seen := 0
	for _, f := range frames {
		for _, a := range Alerts(&f, now) {
			cli := a.CLILine()
			for _, w := range consoleWords {
				if strings.Contains(cli, w) {
					t.Errorf("status says %q: it names a console key (%q)", cli, w)
				}
			}
			if a.NextCLI != "" {
				seen++
			}
		}
	}
	if seen < 5 {
		t.Errorf("only %d alerts have a command-line next step: the fixture no longer covers the console-key cases", seen)
	}
	r := NewStatusReport(st, nil, now)
	for _, p := range r.Problems {
		if strings.Contains(p, " on apps") || strings.Contains(p, "screen") {
			t.Errorf("sitecon status's problems name a console key: %q", p)
		}
	}
}
