package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/drainrequest"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/test/sitebox"
)

// A device that asked for a drain and then thinks better of it (the base
// OS update aborted, the reboot called off) cancels the request: the agent
// stops evicting, takes back its own cordon (never one made by hand),
// forgets the request, and says so; what it had not evicted keeps running
// where it is. Harvester users ask for exactly that (harvester #5306).
func TestDrainRequestCancelled(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	const node = "node-c"
	uncordonAfter(t, site, node)
	pinnedDeployment(t, cs, "dr-cancel", node)
	// node-c is a server: its drain is judged on etcd's member list.
	publishEtcdMembers(t, site)
	// A budget that allows no disruption: the eviction is refused for as
	// long as it stands, so the drain is caught mid-way.
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "dr-cancel", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "dr-cancel"}}},
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(context.Background(), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.PolicyV1().PodDisruptionBudgets("default").Delete(context.Background(), "dr-cancel", metav1.DeleteOptions{})
	})
	logDir, stateDir := t.TempDir(), t.TempDir()
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	// Retried only every ten minutes: a cancel that waited for the next
	// attempt would miss the test's deadlines by far.
	sa := startAgentWith(t, site, node, t.TempDir(), logDir, func(o *agent.Options) {
		startSiteAgentTimings(o)
		o.Apps.StateDir, o.AuditLog = stateDir, auditLog
		o.DrainAttempts, o.DrainRetryInterval = 5, 10*time.Minute
	})
	t.Cleanup(sa.stop)
	waitDrainState(t, sa, 30*time.Second, drainrequest.NotRequested, nil)
	podOnNode := func() string {
		pods := listPods(cs, "default", metav1.ListOptions{LabelSelector: "app=dr-cancel"})
		for _, p := range pods.items {
			if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
				return p.Name
			}
		}
		return ""
	}
	before := podOnNode()

	// 1. Caught mid-drain: cordoned, its one pod's eviction refused.
	if out, err := runSiteconFor(t, 30*time.Second, "agent", "drain-request", "--socket", sa.socket, "--requester", "baseosmgr", "--reason", "update"); err != nil {
		t.Fatalf("drain-request: %v\n%s", err, out)
	}
	waitDrainState(t, sa, 60*time.Second, drainrequest.Cordoned, func(st drainrequest.Status) bool { return st.CordonedByAgent })
	if !cordonedNow(t, cs, node) {
		t.Fatal("the drain under way has not cordoned the node")
	}
	// Someone else's cancel is refused and changes nothing: the requester
	// may be about to reboot on the drain.
	out, err := runSiteconFor(t, 30*time.Second, "agent", "drain-request", "--socket", sa.socket, "--cancel", "--requester", "zedagent")
	if err == nil || !strings.Contains(out, "cancelled by its requester (baseosmgr)") {
		t.Fatalf("a cancel by another caller: %v\n%s", err, out)
	}
	if st := drainStatus(t, sa); st.CancelledBy != "" || !cordonedNow(t, cs, node) {
		t.Fatalf("a refused cancel changed the request: %+v", st)
	}
	out, err = runSiteconFor(t, 60*time.Second, "agent", "drain-request", "--socket", sa.socket, "--cancel", "--requester", "baseosmgr", "--wait", "--timeout", "30s")
	if err != nil || !strings.Contains(out, "drain request: not requested") || !strings.Contains(out, "cancelled by baseosmgr") {
		t.Fatalf("drain-request --cancel --wait: %v\n%s", err, out)
	}
	if cordonedNow(t, cs, node) {
		t.Fatalf("a cancelled drain left the agent's cordon:\n%s", out)
	}
	if now := podOnNode(); now != before {
		t.Fatalf("the pod the drain had not evicted is gone: %q before, %q after", before, now)
	}
	if _, err := os.Stat(filepath.Join(stateDir, drainrequest.RecordFile)); !os.IsNotExist(err) {
		t.Fatalf("the cancelled request's record outlived it: %v", err)
	}
	if recs := auditActions(t, auditLog); !hasAudit(recs, "drain-request", audit.OutcomeCancelled, "cancelled by baseosmgr") ||
		!hasAudit(recs, "uncordon", audit.OutcomeDone, "cancelled") {
		t.Fatalf("the cancel and its uncordon are not in the audit log: %+v", recs)
	}
	// A second cancel has nothing to cancel, says so, and changes nothing.
	out, err = runSiteconFor(t, 30*time.Second, "agent", "drain-request", "--socket", sa.socket, "--cancel")
	if err != nil || !strings.Contains(out, "no drain request to cancel") {
		t.Fatalf("a cancel with nothing to cancel: %v\n%s", err, out)
	}

	// 2. A complete drain, the node waiting for its reboot, called off:
	// the node comes back into service without a boot.
	if err := cs.PolicyV1().PodDisruptionBudgets("default").Delete(context.Background(), "dr-cancel", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := runSiteconFor(t, 2*time.Minute, "agent", "drain-request", "--socket", sa.socket, "--requester", "baseosmgr", "--wait", "--timeout", "90s"); err != nil {
		t.Fatalf("drain-request --wait: %v\n%s", err, out)
	}
	if !cordonedNow(t, cs, node) {
		t.Fatal("a complete drain left the node uncordoned")
	}
	out, err = runSiteconFor(t, 60*time.Second, "agent", "drain-request", "--socket", sa.socket, "--cancel", "--requester", "baseosmgr", "--wait", "--timeout", "30s")
	if err != nil || !strings.Contains(out, "drain request: not requested") {
		t.Fatalf("cancelling a complete drain: %v\n%s", err, out)
	}
	if cordonedNow(t, cs, node) {
		t.Fatal("a cancelled complete drain left the agent's cordon")
	}

	// 3. A node cordoned by hand stays cordoned: the agent takes back
	// only its own cordon.
	if _, err := change.Cordon(context.Background(), cs, node, true); err != nil {
		t.Fatal(err)
	}
	if out, err := runSiteconFor(t, 2*time.Minute, "agent", "drain-request", "--socket", sa.socket, "--wait", "--timeout", "90s"); err != nil {
		t.Fatalf("drain-request --wait on a node cordoned by hand: %v\n%s", err, out)
	}
	out, err = runSiteconFor(t, 60*time.Second, "agent", "drain-request", "--socket", sa.socket, "--cancel", "--wait", "--timeout", "30s")
	if err != nil || !strings.Contains(out, "left cordoned") {
		t.Fatalf("cancelling the drain of a node cordoned by hand: %v\n%s", err, out)
	}
	if !cordonedNow(t, cs, node) {
		t.Fatal("cancelling a drain uncordoned a node cordoned by hand")
	}
	st := drainStatus(t, sa)
	if st.State != drainrequest.NotRequested || !slices.ContainsFunc(st.Did, func(d string) bool { return strings.Contains(d, "cancelled") }) {
		t.Fatalf("status after the cancel: %+v", st)
	}
}
