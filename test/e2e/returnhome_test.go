package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
	"github.com/sitecon/sitecon/views"
)

// Apps away from home (issue 22 §5): three apps fail over from node-b, their
// designated node. While node-b is down, return-home is refused, one app or
// all, and nothing changes. node-b back, `sitecon status` says each app is
// away and since when; `sitecon migrate` to the designated node and
// `sitecon return-home --all` bring them back, each move with its own
// record; then status says nothing is away, and asking again is nothing to
// do.
func TestReturnHome(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs, dyn := clientset(t, site), dynClient(t, site)
	ctx := context.Background()
	appsDir, logDir, auditLog := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "audit.jsonl")
	b := sitebox.NodeUUID("node-b")
	vol := apps.VolumeConfig{UUID: "e7000000-0000-4000-8000-00000000000a", Name: "rh-data", DesignatedNodeID: b, Size: "1Gi", ReplicaCount: 3}
	appConfigs := map[string]apps.AppConfig{
		"rh-web": {UUID: "e7000000-0000-4000-8000-000000000001", DisplayName: "rh-web", Activate: true, Kind: apps.KindContainer,
			Image: "registry.local/web:1", DesignatedNodeID: b, Affinity: apps.AffinityPreferred, VolumeRefs: []string{vol.UUID}},
		"rh-plain": {UUID: "e7000000-0000-4000-8000-000000000002", DisplayName: "rh-plain", Activate: true, Kind: apps.KindContainer,
			Image: "registry.local/plain:1", DesignatedNodeID: b, Affinity: apps.AffinityPreferred},
		"rh-vm": {UUID: "e7000000-0000-4000-8000-000000000003", DisplayName: "rh-vm", Activate: true, Kind: apps.KindVM,
			Image: "registry.local/vm:1", DesignatedNodeID: b, Affinity: apps.AffinityPreferred, Resources: apps.AppResources{Memory: "512Mi"}},
	}
	writeJSON(t, filepath.Join(appsDir, "volumes", vol.Name+".json"), vol)
	for name, a := range appConfigs {
		writeJSON(t, filepath.Join(appsDir, "apps", name+".json"), a)
	}
	agents := map[string]*siteAgent{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		agents[n] = startSiteAgent(t, site, n, appsDir, logDir)
	}
	t.Cleanup(func() {
		logAgentsOnFailure(t, logDir, "node-a", "node-b", "node-c")
		cleanupApps(t, cs, dyn, agents, appsDir, appConfigs)
		_ = cs.CoreV1().PersistentVolumeClaims(kube.AppNamespace).Delete(context.Background(), apps.ClaimName(vol), metav1.DeleteOptions{})
	})
	all := func() []*siteAgent { return []*siteAgent{agents["node-a"], agents["node-b"], agents["node-c"]} }
	names := []string{"rh-plain", "rh-vm", "rh-web"}
	for _, name := range names {
		waitAgents(t, all(), name, 90*time.Second, "running on node-b", runningOn("node-b"))
	}

	// node-b is lost with its agent; the apps fail over.
	agents["node-b"].lose()
	site.RecoverOnCleanup(t, "node-b")
	if err := site.Fail("node-b"); err != nil {
		t.Fatal(err)
	}
	live := []*siteAgent{agents["node-a"], agents["node-c"]}
	for _, name := range names {
		view := waitAgents(t, live, name, 180*time.Second, "running on node-a or node-c", func(v agentView) bool {
			return v["node-a"].Node != "node-b" && (runningOn("node-a")(v) || runningOn("node-c")(v))
		})
		t.Logf("%s failed over to %s", name, view["node-a"].Node)
	}

	// While node-b is down: refused, one app or all, nothing changed.
	objects := func() map[string]string {
		out := map[string]string{}
		for _, name := range names {
			pods, err := cs.CoreV1().Pods(kube.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + appConfigs[name].UUID})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil {
					out[p.Name] = string(p.UID) + " on " + p.Spec.NodeName
				}
			}
		}
		return out
	}
	// overrides are this test's apps' entries in the placement ConfigMap
	// (other tests on the shared site leave theirs).
	overrides := func() map[string]string {
		out := map[string]string{}
		cm, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.PlacementConfigMapName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range appConfigs {
			if v, ok := cm.Data[a.UUID]; ok {
				out[a.DisplayName] = v
			}
		}
		return out
	}
	before := objects()
	out, err := act(t, site, auditLog, "return-home", "rh-web", "--yes")
	if err == nil || !strings.Contains(out, "node-b, the designated node of rh-web, is not Ready: rh-web stays on") {
		t.Fatalf("return-home with node-b down: %v\n%s", err, out)
	}
	if rec := lastAudit(t, auditLog); rec.Action != "return-home" || rec.Outcome != audit.OutcomeRefused {
		t.Fatalf("the refusal's record: %+v", rec)
	}
	out, err = act(t, site, auditLog, "return-home", "--all", "--yes")
	if err == nil || !strings.Contains(out, "app(s) not returned home") {
		t.Fatalf("return-home --all with node-b down: %v\n%s", err, out)
	}
	recs, err := audit.Read(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	refused := map[string]bool{}
	for _, r := range recs[1:] {
		if r.Action == "return-home" && r.Outcome == audit.OutcomeRefused {
			refused[strings.Fields(r.Target)[0]] = true
		}
	}
	if !refused["rh-plain"] || !refused["rh-vm"] || !refused["rh-web"] {
		t.Fatalf("--all: want one refused record per app, got %v in %+v", refused, recs)
	}
	if after := objects(); !maps.Equal(before, after) {
		t.Fatalf("a refused return-home changed the apps' pods: %v → %v", before, after)
	}
	if o := overrides(); len(o) > 0 {
		t.Fatalf("a refused return-home wrote placement overrides: %v", o)
	}

	// node-b back, its volume copy rebuilt.
	if err := site.Recover("node-b"); err != nil {
		t.Fatal(err)
	}
	agents["node-b"] = startSiteAgent(t, site, "node-b", appsDir, logDir)
	waitClaimHealthyOn(t, site, apps.ClaimName(vol), "node-b", 90*time.Second)

	// sitecon status says each app is away, and since when.
	report := until(t, 60*time.Second, "sitecon status shows the three apps away from home", func() (views.StatusReport, bool) {
		out, _, _ := runSitecon(t, "status", "-o", "json", "--kubeconfig", site.Kubeconfig())
		var r views.StatusReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			return r, false
		}
		away := 0
		for _, a := range r.Apps {
			if slices.Contains(names, a.Name) && a.Away() && a.DesignatedNode == "node-b" && a.Started != nil {
				away++
			}
		}
		// Other tests' apps on the shared site may be away too: the count
		// is theirs and ours.
		return r, away == 3 && slices.ContainsFunc(r.Problems, func(p string) bool { return strings.Contains(p, "apps away from home (") })
	}, func(r views.StatusReport) string { return fmt.Sprintf("apps %+v, problems %q", r.Apps, r.Problems) })
	t.Logf("status problems: %q", report.Problems)
	out, _, _ = runSitecon(t, "status", "--kubeconfig", site.Kubeconfig())
	if !strings.Contains(out, " apps away from home (") {
		t.Fatalf("sitecon status (table) does not say the apps are away:\n%s", out)
	}

	// A dry run says the plan and the preflight, and changes nothing.
	before = objects()
	out, err = act(t, site, auditLog, "return-home", "rh-web", "--dry-run")
	if err != nil || !strings.Contains(out, "  ok       node-b is Ready and schedulable") || !strings.Contains(out, "node-b holds a healthy replica") ||
		!strings.Contains(out, "would move rh-web from node-") || !strings.Contains(out, "to node-b: restart pod rh-web-") {
		t.Fatalf("return-home --dry-run: %v\n%s", err, out)
	}
	if rec := lastAudit(t, auditLog); rec.Action != "return-home" || rec.Outcome != audit.OutcomeDryRun {
		t.Fatalf("the dry run's record: %+v", rec)
	}
	if after := objects(); !maps.Equal(before, after) {
		t.Fatalf("a dry run changed the apps' pods: %v → %v", before, after)
	}

	// migrate to the designated node: the app is started again and comes home.
	out, err = act(t, site, auditLog, "migrate", "rh-vm", "node-b", "--yes", "--timeout", "120s")
	if err != nil || !strings.Contains(out, "rh-vm runs on node-b") {
		t.Fatalf("migrate rh-vm to its designated node: %v\n%s", err, out)
	}
	// return-home --all walks the other two, one record each.
	n := len(mustRead(t, auditLog))
	out, err = act(t, site, auditLog, "return-home", "--all", "--yes", "--timeout", "120s", "--reason", "e2e")
	if err != nil || !strings.Contains(out, "app(s) away from home") || !strings.Contains(out, "rh-web runs on node-b") || !strings.Contains(out, "rh-plain runs on node-b") {
		t.Fatalf("return-home --all: %v\n%s", err, out)
	}
	done := 0
	for _, r := range mustRead(t, auditLog)[n:] {
		if r.Action == "return-home" && r.Outcome == audit.OutcomeDone && strings.HasPrefix(r.Target, "rh-") && strings.Contains(r.Detail, `"reason":"e2e"`) {
			done++
		}
	}
	if done != 2 {
		t.Fatalf("want two return-home records done, got %d: %+v", done, mustRead(t, auditLog)[n:])
	}
	for _, name := range names {
		waitAgents(t, all(), name, 60*time.Second, "running home on node-b", runningOn("node-b"))
	}
	if o := overrides(); len(o) > 0 {
		t.Fatalf("going home wrote placement overrides (the layouts name node-b already): %v", o)
	}
	out, err = act(t, site, auditLog, "return-home", "rh-web", "--yes")
	if err != nil || !strings.Contains(out, "rh-web runs on its designated node node-b already; nothing to do") {
		t.Fatalf("return-home of an app at home: %v\n%s", err, out)
	}
	until(t, 30*time.Second, "sitecon status shows the three apps home", func() (views.StatusReport, bool) {
		out, _, _ := runSitecon(t, "status", "-o", "json", "--kubeconfig", site.Kubeconfig())
		var r views.StatusReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			return r, false
		}
		home := 0
		for _, a := range r.Apps {
			if slices.Contains(names, a.Name) && !a.Away() && a.Node == "node-b" {
				home++
			}
		}
		return r, home == 3 && !slices.ContainsFunc(r.Problems, func(p string) bool { return strings.Contains(p, "rh-") })
	}, func(r views.StatusReport) string { return fmt.Sprintf("apps %+v, problems %q", r.Apps, r.Problems) })
}

func mustRead(t *testing.T, path string) []audit.Record {
	t.Helper()
	recs, err := audit.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// waitClaimHealthyOn waits until the Longhorn volume of claim is healthy
// and holds an up-to-date replica on node.
func waitClaimHealthyOn(t testing.TB, site *sitebox.TestSite, claim, node string, within time.Duration) {
	t.Helper()
	lh := site.Clients(t).Longhorn.LonghornV1beta2()
	until(t, within, claim+"'s volume healthy with an up-to-date replica on "+node, func() (string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		vols, err := lh.Volumes(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err.Error(), false
		}
		i := slices.IndexFunc(vols.Items, func(v lhv1beta2.Volume) bool { return v.Status.KubernetesStatus.PVCName == claim })
		if i < 0 {
			return "no volume for the claim", false
		}
		v := vols.Items[i]
		reps, err := lh.Replicas(kube.LonghornNamespace).List(ctx, metav1.ListOptions{LabelSelector: "longhornvolume=" + v.Name})
		if err != nil {
			return err.Error(), false
		}
		on := slices.ContainsFunc(reps.Items, func(r lhv1beta2.Replica) bool {
			return r.Spec.NodeID == node && r.Spec.HealthyAt != "" && r.Spec.FailedAt == ""
		})
		return fmt.Sprintf("%s, healthy replica on %s: %v", v.Status.Robustness, node, on), v.Status.Robustness == lhv1beta2.VolumeRobustnessHealthy && on
	}, func(s string) string { return s })
}
