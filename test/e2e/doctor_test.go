package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"

	"github.com/sitecon/sitecon/test/testcert"
)

// verbCounter counts the doctor's requests by HTTP method: a read-only
// doctor sends GETs alone (LIST and WATCH are GETs).
type verbCounter struct {
	mu     sync.Mutex
	counts map[string][]string
}

func (v *verbCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		v.mu.Lock()
		if v.counts == nil {
			v.counts = map[string][]string{}
		}
		v.counts[req.Method] = append(v.counts[req.Method], req.URL.Path)
		v.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

// assertReadOnly fails the test if any request but a GET reached the API server.
func (v *verbCounter) assertReadOnly(t *testing.T) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.counts["GET"]) == 0 {
		t.Errorf("the doctor sent no GET at all: the counter saw nothing")
	}
	for verb, paths := range v.counts {
		if verb != http.MethodGet {
			t.Errorf("the doctor sent %d %s request(s) (%v): it must only read", len(paths), verb, paths)
		}
	}
}

// diagnose runs the doctor in process against the site, counting its requests.
func diagnose(t *testing.T, site *sitebox.TestSite, verbs *verbCounter) doctor.Report {
	t.Helper()
	cfg := rest.CopyConfig(site.Config)
	cfg.Wrap(verbs.wrap)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return doctor.Diagnose(ctx, doctor.Options{Config: cfg, APIWait: 15 * time.Second, K3sDataDir: t.TempDir()})
}

// findings are a report's findings by id, then subject.
func findings(r doctor.Report) map[string]map[string]doctor.Finding {
	out := map[string]map[string]doctor.Finding{}
	for _, f := range r.Findings {
		if out[f.ID] == nil {
			out[f.ID] = map[string]doctor.Finding{}
		}
		out[f.ID][f.Subject] = f
	}
	return out
}

func describeReport(r doctor.Report) string {
	var b strings.Builder
	for _, f := range r.Findings {
		if f.Severity >= doctor.Warn {
			fmt.Fprintf(&b, "\n  %s %s [%s] %s %v", f.Severity, f.ID, f.Subject, f.Summary, f.Evidence)
		}
	}
	return fmt.Sprintf("worst %s, api %q:%s", r.Worst, r.APIProblem, b.String())
}

// runDoctor runs the binary on a machine with no k3s and no agent, and
// returns its output and exit status.
func runDoctor(t *testing.T, site *sitebox.TestSite, args ...string) (string, int) {
	t.Helper()
	return runDoctorWith(t, site, append([]string{"--agent-socket", t.TempDir() + "/none.sock"}, args...)...)
}

// runDoctorWith runs the binary with args and no k3s data dir.
func runDoctorWith(t *testing.T, site *sitebox.TestSite, args ...string) (string, int) {
	t.Helper()
	// Its own audit log: the machine's is no test's to judge.
	out, errOut, err := runSitecon(t, append([]string{"doctor", "--kubeconfig", site.Kubeconfig(),
		"--k3s-data-dir", t.TempDir(), "--audit-log", filepath.Join(t.TempDir(), "audit.jsonl")}, args...)...)
	code := 0
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("sitecon doctor: %v", err)
	}
	return out + errOut, code
}

func TestDoctorQuietOnHealthySite(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	// No member list published (no agent runs here): quorum is not
	// checked, never called healthy on the Nodes' labels (issue 36 A).
	cs := clientset(t, site)
	if err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Delete(context.Background(), kube.EtcdMembersConfigMapName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	var unlisted verbCounter
	if f := findings(diagnose(t, site, &unlisted))[doctor.IDEtcdQuorum][""]; !f.NotChecked || f.Severity != doctor.Warn ||
		!strings.Contains(f.Summary, "quorum not checked: etcd's member list is not published") || !strings.Contains(f.Next, "then try again") {
		t.Errorf("etcd quorum with no member list published: %+v", f)
	}
	// The servers' agents publish it, and every node's agent says it
	// fences with the shipped timeout: the site is healthy. (Said here:
	// the agents earlier tests ran on this site left theirs, whatever
	// timeout each ran with.)
	publishEtcdMembers(t, site)
	// No agent runs here: no stats leader (an earlier test's agents may
	// have left their lease, run out, which is a lost leader).
	clearStatsLeaderLease(t, cs)
	// The node policies in force, as a server's agent puts them.
	grantAgentAccessAfresh(t, cs)
	shipped := kube.FenceSettings{Fencing: true, FailoverTimeout: (apps.Options{}).EffectiveFailoverTimeout()}.String()
	for _, n := range site.Nodes {
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, kube.AnnotationFence, shipped)
		if _, err := cs.CoreV1().Nodes().Patch(context.Background(), n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var verbs verbCounter
	r := diagnose(t, site, &verbs)
	verbs.assertReadOnly(t)
	if r.APIProblem != "" || r.Worst > doctor.Info {
		t.Errorf("a healthy site: %s", describeReport(r))
	}
	got := findings(r)
	for _, c := range doctor.Checks() {
		if len(got[c.ID]) == 0 {
			t.Errorf("check %s left no finding: every check that runs says so", c.ID)
		}
	}
	if f := got[doctor.IDEtcdQuorum][""]; !strings.Contains(f.Summary, "3 etcd members healthy; quorum survives 1 more server loss") {
		t.Errorf("etcd quorum on a healthy site: %+v", f)
	}
	out, code := runDoctor(t, site, "-o", "json")
	var jr doctor.Report
	if err := json.Unmarshal([]byte(out), &jr); err != nil || code != doctor.ExitOK {
		t.Errorf("sitecon doctor -o json on a healthy site: exit %d, %v\n%s", code, err, out)
	}
}

// A failed server, a node left cordoned, the stats leader on the lost node,
// a volume degraded and one faulted by the loss: each has its finding, with
// its evidence, and the exit status is an error's.
func TestDoctorFindsNodeAndVolumeTrouble(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	replicatedVolume(t, site, "doctor-degraded", "node-c", 3)
	singleReplicaVolume(t, site, "doctor-faulted", "node-c")

	// node-b cordoned, as a technician leaves it after maintenance.
	cordon := func(on bool) {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cordon(true)
	t.Cleanup(func() { cordon(false) })
	// The stats leader is node-c's agent, as it would be before its loss.
	clearStatsLeaderLease(t, cs)
	now := metav1.NewMicroTime(time.Now())
	_, err := cs.CoordinationV1().Leases(kube.AppNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: kube.StatsLeaderLeaseName, Namespace: kube.AppNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-c"), AcquireTime: &now, RenewTime: &now,
			LeaseDurationSeconds: ptr.To[int32](3600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clearStatsLeaderLease(t, cs) })

	// Quorum is counted from etcd's member list only, as the servers'
	// agents publish it; node-a's and node-b's stay in time with node-c
	// down.
	publishEtcdMembers(t, site)
	site.RecoverOnCleanup(t, "node-c")
	// What the doctor says of node-c's loss is under test, not etcd's
	// election: with the leader on node-c, the API server stalls a few
	// seconds, the simulated Longhorn managers on the other nodes miss
	// their readiness and their replicas fail with them (the volume
	// faulted, not degraded: CI saw it).
	if err := site.MoveEtcdLeaderOff("node-c"); err != nil {
		t.Fatal(err)
	}
	if err := site.Fail("node-c"); err != nil {
		t.Fatal(err)
	}
	var verbs verbCounter
	r := until(t, 90*time.Second, "the doctor reports node-c NotReady, its etcd member down and both volumes", func() (doctor.Report, bool) {
		r := diagnose(t, site, &verbs)
		got := findings(r)
		_, notReady := got[doctor.IDNodeNotReady]["node-c"]
		_, degraded := got[doctor.IDVolumeDegraded]["doctor-degraded"]
		_, faulted := got[doctor.IDVolumeFaulted]["doctor-faulted"]
		memberDown := strings.Contains(got[doctor.IDEtcdQuorum][""].Summary, "1 etcd member down")
		return r, notReady && degraded && faulted && memberDown
	}, describeReport)
	verbs.assertReadOnly(t)
	got := findings(r)
	for _, want := range []struct {
		id, subject string
		sev         doctor.Severity
		text        string
	}{
		{doctor.IDNodeNotReady, "node-c", doctor.Error, "node-c is "},
		{doctor.IDNodeCordoned, "node-b", doctor.Warn, "node-b is cordoned"},
		{doctor.IDEtcdQuorum, "", doctor.Warn, "1 etcd member down; quorum survives no further server loss"},
		{doctor.IDStatsLeaderLost, "node-c", doctor.Warn, "node-c is not Ready"},
		{doctor.IDVolumeDegraded, "doctor-degraded", doctor.Warn, "volume doctor-degraded is degraded for"},
		{doctor.IDVolumeFaulted, "doctor-faulted", doctor.Error, "volume doctor-faulted is faulted for"},
	} {
		f, ok := got[want.id][want.subject]
		if !ok || f.Severity != want.sev || !strings.Contains(f.Summary, want.text) || f.Next == "" {
			t.Errorf("%s %s: got %+v; want %s containing %q with a next step", want.id, want.subject, f, want.sev, want.text)
		}
	}
	if f := got[doctor.IDVolumeDegraded]["doctor-degraded"]; f.Since == nil || !strings.Contains(strings.Join(f.Evidence, " "), "node-c failed") {
		t.Errorf("degraded volume's evidence: since %v, %v; want since when and node-c's replica failed", f.Since, f.Evidence)
	}
	if f := got[doctor.IDVolumeFaulted]["doctor-faulted"]; f.Since == nil {
		t.Errorf("faulted volume without since when (its replica's failure): %+v", f)
	}
	if f := got[doctor.IDNodeNotReady]["node-c"]; f.Since == nil {
		t.Errorf("node-c NotReady without since when: %+v", f)
	}
	out, code := runDoctor(t, site)
	t.Logf("sitecon doctor:\n%s", out)
	if code != doctor.ExitAttention || !strings.Contains(out, "SC-NODE-NOT-READY") || !strings.HasPrefix(out, "NODES") && !strings.HasPrefix(out, "STORAGE") && !strings.HasPrefix(out, "CONTROL PLANE") {
		t.Errorf("sitecon doctor with node-c down: exit %d (want %d), output:\n%s", code, doctor.ExitAttention, out)
	}
}

// Apps away from home and Pending, overrides that no longer apply, a
// replica Longhorn cannot schedule and a support bundle left behind: each
// has its finding.
func TestDoctorFindsAppAndStorageTrouble(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	lh := longhornClient(t, site)
	ctx := context.Background()
	del := func(what string, f func() error) {
		t.Cleanup(func() {
			if err := f(); err != nil {
				t.Logf("cleanup %s: %v", what, err)
			}
		})
	}
	pods := cs.CoreV1().Pods(kube.AppNamespace)
	// Away: designated node-b (preferred affinity), running on node-a.
	const awayUUID = "d0c70000-0000-4000-8000-000000000001"
	away := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "doctor-away", Namespace: kube.AppNamespace,
		Labels: map[string]string{kube.LabelAppName: "doctor-away", kube.LabelAppUUID: awayUUID}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app", Image: "registry.local/web:1"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-b"}}}}}}}}}}
	// Pending: no node has the label it needs.
	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "doctor-pending", Namespace: kube.AppNamespace,
		Labels: map[string]string{kube.LabelAppName: "doctor-pending"}},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"doctor.sitecon.io/none": "x"},
			Containers: []corev1.Container{{Name: "app", Image: "registry.local/web:1"}}}}
	for _, p := range []*corev1.Pod{away, pending} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		name := p.Name
		del("pod "+name, func() error {
			return pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
	}
	// Overrides: one garbled, one for the away app to node-c while its
	// layout designates node-b (its config moved on).
	override := fmt.Sprintf(`{"node":"node-c","node_uuid":%q,"by":"tech","at":"2026-11-01T10:00:00Z","config_dnid":"old"}`, sitebox.NodeUUID("node-c"))
	const garbledKey = "d0c70000-0000-4000-8000-000000000002"
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{awayUUID: override, garbledKey: `{"node": "node-c"`}})
	cms := cs.CoreV1().ConfigMaps(kube.AppNamespace)
	if _, err := cms.Patch(ctx, kube.PlacementConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kube.PlacementConfigMapName, Namespace: kube.AppNamespace},
			Data: map[string]string{awayUUID: override, garbledKey: `{"node": "node-c"`}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	del("overrides", func() error {
		p := fmt.Sprintf(`{"data":{%q:null,%q:null}}`, awayUUID, garbledKey)
		_, err := cms.Patch(context.Background(), kube.PlacementConfigMapName, types.MergePatchType, []byte(p), metav1.PatchOptions{})
		return err
	})
	// A volume Longhorn cannot place a replica of: its Scheduled condition
	// as longhorn-manager writes it.
	volumes := lh.LonghornV1beta2().Volumes(kube.LonghornNamespace)
	if _, err := volumes.Create(ctx, sitebox.LonghornVolume("doctor-unsched", 1<<30, 4), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	del("volume", func() error { return volumes.Delete(context.Background(), "doctor-unsched", metav1.DeleteOptions{}) })
	_ = until(t, 30*time.Second, "the Scheduled condition written", func() (error, bool) {
		v, err := volumes.Get(ctx, "doctor-unsched", metav1.GetOptions{})
		if err != nil {
			return err, false
		}
		v.Status.Conditions = append(v.Status.Conditions, lhv1beta2.Condition{Type: lhv1beta2.VolumeConditionTypeScheduled,
			Status: lhv1beta2.ConditionStatusFalse, Reason: lhv1beta2.VolumeConditionReasonReplicaSchedulingFailure,
			Message: lhv1beta2.ErrorReplicaScheduleNodeUnavailable, LastTransitionTime: time.Now().UTC().Format(time.RFC3339)})
		_, err = volumes.UpdateStatus(ctx, v, metav1.UpdateOptions{})
		return err, err == nil
	}, func(err error) string { return fmt.Sprint(err) })
	// A support bundle and its manager left behind.
	bundles := lh.LonghornV1beta2().SupportBundles(kube.LonghornNamespace)
	if _, err := bundles.Create(ctx, &lhv1beta2.SupportBundle{ObjectMeta: metav1.ObjectMeta{Name: "doctor-bundle", Namespace: kube.LonghornNamespace},
		Spec: lhv1beta2.SupportBundleSpec{Description: "left"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	del("support bundle", func() error { return bundles.Delete(context.Background(), "doctor-bundle", metav1.DeleteOptions{}) })
	deps := cs.AppsV1().Deployments(kube.LonghornNamespace)
	manager := "longhorn-support-bundle-manager-doctor-bundle"
	sel := map[string]string{"app": manager}
	if _, err := deps.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: manager, Namespace: kube.LonghornNamespace},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "m", Image: "longhornio/support-bundle-kit"}}}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	del("manager", func() error { return deps.Delete(context.Background(), manager, metav1.DeleteOptions{}) })

	// The scheduler's verdict on the pending pod, made a minute old: a
	// reason younger than kube.UnschedulableAfter is not yet a problem
	// (a site booting), and this test does not wait the half minute out.
	until(t, 30*time.Second, "the scheduler's reason on the pending pod, backdated", func() (string, bool) {
		p, err := pods.Get(ctx, "doctor-pending", metav1.GetOptions{})
		if err != nil {
			return err.Error(), false
		}
		for i, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				p.Status.Conditions[i].LastTransitionTime = metav1.NewTime(time.Now().Add(-time.Minute))
				_, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{})
				return fmt.Sprint(err), err == nil
			}
		}
		return "no PodScheduled=False condition yet", false
	}, func(last string) string { return last })
	var verbs verbCounter
	r := until(t, 60*time.Second, "the doctor reports the away app running and the pending one's reason", func() (doctor.Report, bool) {
		r := diagnose(t, site, &verbs)
		got := findings(r)
		awayF, ok1 := got[doctor.IDAppAway]["doctor-away"]
		pendF, ok2 := got[doctor.IDAppPending]["doctor-pending"]
		return r, ok1 && awayF.Since != nil && ok2 && strings.Contains(strings.Join(pendF.Evidence, " "), "0/3 nodes are available") && pendF.Severity == doctor.Warn
	}, describeReport)
	verbs.assertReadOnly(t)
	got := findings(r)
	for _, want := range []struct {
		id, subject string
		sev         doctor.Severity
		text        string
	}{
		{doctor.IDAppAway, "doctor-away", doctor.Warn, "runs on node-a, not on its designated node node-b for"},
		{doctor.IDAppPending, "doctor-pending", doctor.Warn, "is Pending for"},
		{doctor.IDOverrideStale, garbledKey, doctor.Error, "not usable"},
		{doctor.IDOverrideStale, "doctor-away", doctor.Warn, "no longer applies: its layout designates node-b"},
		{doctor.IDReplicaUnschedulable, "doctor-unsched", doctor.Warn, "cannot schedule a replica"},
		{doctor.IDSupportBundleLeft, "doctor-bundle", doctor.Warn, "support bundle doctor-bundle left"},
		{doctor.IDSupportBundleLeft, manager, doctor.Warn, "left running"},
	} {
		f, ok := got[want.id][want.subject]
		if !ok || f.Severity != want.sev || !strings.Contains(f.Summary, want.text) || f.Next == "" {
			t.Errorf("%s %s: got %+v; want %s containing %q with a next step", want.id, want.subject, f, want.sev, want.text)
		}
	}
	if f := got[doctor.IDReplicaUnschedulable]["doctor-unsched"]; !strings.Contains(strings.Join(f.Evidence, " "), "ReplicaSchedulingFailure: nodes are unavailable") {
		t.Errorf("unschedulable replica without Longhorn's reason: %v", f.Evidence)
	}
	if f := got[doctor.IDAppAway]["doctor-away"]; !strings.Contains(f.Next, "sitecon return-home doctor-away") {
		t.Errorf("away app's next step %q: want the return home", f.Next)
	}
}

// An app file this node's agent rejects is a finding with the file and the
// agent's reason (the field that is wrong), read from the agent's socket.
func TestDoctorReportsTheConfigTheAgentRejects(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	appsDir, logDir := t.TempDir(), t.TempDir()
	bad := filepath.Join(appsDir, "apps", "doctor-bad.json")
	if err := os.MkdirAll(filepath.Dir(bad), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(`{"uuid": "not-a-uuid", "displayname": "doctor-bad"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// Stopped before its directories go; the stats-leader lease it may
	// have taken is cleared after it stopped.
	t.Cleanup(func() { clearStatsLeaderLease(t, clientset(t, site)) })
	a := startSiteAgent(t, site, "node-a", appsDir, logDir)
	t.Cleanup(a.stop)
	until(t, 30*time.Second, "node-a's agent reports the file on its socket", func() (string, bool) {
		var node apps.PublishedNode
		if err := getSocketErr(a.socket, localapi.PathNode, &node); err != nil {
			return err.Error(), false
		}
		return fmt.Sprint(node.ConfigErrors), node.ConfigErrors[bad] != ""
	}, func(s string) string { return s })
	out, code := runDoctorWith(t, site, "--agent-socket", a.socket)
	if code != doctor.ExitAttention || !strings.Contains(out, "SC-APP-CONFIG-REJECTED") || !strings.Contains(out, "this node's agent rejects "+bad) ||
		!strings.Contains(out, "uuid") {
		t.Errorf("sitecon doctor with a rejected app file: exit %d, want %d, the file and the field; output:\n%s", code, doctor.ExitAttention, out)
	}
}

// Without an API server: exit status 2 (as sitecon status), the cluster checks marked not run,
// this node's checks run all the same (a certificate 20 days from expiry).
func TestDoctorWithoutTheAPIExitsTwo(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "k3s")
	testcert.Write(t, filepath.Join(dataDir, "server", "tls", "client-admin.crt"), time.Now().Add(20*24*time.Hour))
	out, errOut, err := runSitecon(t, "doctor", "--kubeconfig", kubeconfig, "--timeout", "4s", "--k3s-data-dir", dataDir,
		"--agent-socket", filepath.Join(dir, "none.sock"), "--audit-log", filepath.Join(dir, "audit.jsonl"), "-o", "json")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != doctor.ExitAPIUnreachable {
		t.Fatalf("exit %v, want %d; %s%s", err, doctor.ExitAPIUnreachable, out, errOut)
	}
	var r doctor.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := findings(r)
	if f := got[doctor.IDAPIUnreachable][""]; f.Severity != doctor.Error || !strings.Contains(strings.Join(f.Evidence, " "), "127.0.0.1:1") {
		t.Errorf("API finding %+v", f)
	}
	if f := got[doctor.IDVolumeDegraded][""]; !strings.Contains(f.Summary, "not checked: the cluster API could not be read") {
		t.Errorf("a cluster check without the API: %+v", f)
	}
	for _, f := range got[doctor.IDCertExpiry] {
		if f.Severity != doctor.Error || !strings.Contains(f.Summary, "expires in 19 days") && !strings.Contains(f.Summary, "expires in 20 days") {
			t.Errorf("certificate 20 days from expiry: %+v", f)
		}
	}
	if len(got[doctor.IDCertExpiry]) != 1 {
		t.Errorf("certificate findings %v, want one", got[doctor.IDCertExpiry])
	}
}

// The doctor says whether a worker's identity is kept to its own node and
// apps: both node policies in force and the record of designations there
// (ok); a policy missing is an error while a worker is in the cluster,
// naming what is missing (docs/SECURITY.md, gap 7).
func TestDoctorSaysTheNodePolicies(t *testing.T) {
	site := sitebox.Shared(t)
	cs := clientset(t, site)
	grantAgentAccessAfresh(t, cs)
	var verbs verbCounter
	if fs := findings(diagnose(t, site, &verbs))[doctor.IDNodePolicy]; len(fs) != 1 || fs[""].Severity != doctor.OK {
		t.Errorf("%s with the policies in force: %+v, want one ok", doctor.IDNodePolicy, fs)
	}
	// The node policy's binding removed (it has no parameter: the apps
	// policy's and the record are not removed here, see
	// removeAgentAccess; TestNodePoliciesMissing holds those cases).
	actAsWorker(t, cs, "node-c")
	if err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(t.Context(), kube.NodePolicyName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fs := findings(diagnose(t, site, &verbs))[doctor.IDNodePolicy]
	if f := fs[kube.NodePolicyName]; f.Severity != doctor.Error || !strings.Contains(f.Summary, "node-c") {
		t.Errorf("%s with %s's binding missing and node-c a worker: %+v, want an error naming the worker", doctor.IDNodePolicy, kube.NodePolicyName, f)
	}
	if f, ok := fs[kube.NodeAppsPolicyName]; ok {
		t.Errorf("%s: the apps policy in force was reported: %+v", doctor.IDNodePolicy, f)
	}
	verbs.assertReadOnly(t)
}
