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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/drainrequest"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/test/sitebox"
)

// Issue 21 §4: the drains an on-device service asks the agent for.

// runSiteconFor runs the binary for up to within; output combined.
func runSiteconFor(t *testing.T, within time.Duration, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, sitecon, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// drainAgent runs node's agent with drain requests recorded in auditLog
// and retried every second; its state directory is stateDir, kept across
// the agent's restarts as a device's is.
func drainAgent(t *testing.T, site *sitebox.TestSite, node, logDir, stateDir, auditLog string) *siteAgent {
	t.Helper()
	sa := startAgentWith(t, site, node, t.TempDir(), logDir, func(o *agent.Options) {
		startSiteAgentTimings(o)
		o.Apps.StateDir, o.AuditLog = stateDir, auditLog
		o.DrainAttempts, o.DrainRetryInterval = 1000, time.Second
	})
	t.Cleanup(sa.stop)
	return sa
}

func drainStatus(t *testing.T, sa *siteAgent) drainrequest.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := localapi.Get[drainrequest.Status](ctx, sa.socket, localapi.PathDrain)
	if err != nil {
		return drainrequest.Status{State: drainrequest.State("unreadable: " + err.Error())}
	}
	return st
}

func waitDrainState(t *testing.T, sa *siteAgent, within time.Duration, want drainrequest.State, also func(drainrequest.Status) bool) drainrequest.Status {
	t.Helper()
	return until(t, within, fmt.Sprintf("%s's drain request %s", sa.node, want), func() (drainrequest.Status, bool) {
		st := drainStatus(t, sa)
		return st, st.State == want && (also == nil || also(st))
	}, func(st drainrequest.Status) string { return fmt.Sprintf("last status %+v", st) })
}

func cordonedNow(t *testing.T, cs kubernetes.Interface, node string) bool {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Spec.Unschedulable
}

// pinnedDeployment runs one pod on node (a nodeSelector), removed after
// the test.
func pinnedDeployment(t *testing.T, cs kubernetes.Interface, name, node string) {
	t.Helper()
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				NodeSelector: map[string]string{corev1.LabelHostname: node},
				Containers:   []corev1.Container{{Name: "c", Image: "registry.local/x:1"}},
			}},
		},
	}
	if _, err := cs.AppsV1().Deployments("default").Create(context.Background(), dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AppsV1().Deployments("default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	waitPods(t, cs, "default", metav1.ListOptions{LabelSelector: "app=" + name}, 30*time.Second, name+" Ready on "+node, onlyPodReadyOn(node))
}

func auditActions(t *testing.T, path string) []audit.Record {
	t.Helper()
	recs, err := audit.Read(path)
	if err != nil {
		t.Fatalf("audit log %s: %v", path, err)
	}
	return recs
}

func hasAudit(recs []audit.Record, action, outcome, detail string) bool {
	return slices.ContainsFunc(recs, func(r audit.Record) bool {
		return r.Action == action && r.Outcome == outcome && strings.Contains(r.Detail, detail)
	})
}

// A drain request runs to complete (the pod on the node evicted, the
// node cordoned, each step in the audit log); the device goes down with
// its agent and boots: the new agent finds its record, sees the node back
// and Ready, and uncordons its own cordon.
func TestDrainRequestCompletesAndUncordonsAfterBoot(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	const node = "node-c"
	uncordonAfter(t, site, node)
	site.RecoverOnCleanup(t, node)
	pinnedDeployment(t, cs, "dr-on-c", node)
	// node-c is a server: its drain is judged on etcd's member list.
	publishEtcdMembers(t, site)
	logDir, stateDir := t.TempDir(), t.TempDir()
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	sa := drainAgent(t, site, node, logDir, stateDir, auditLog)
	waitDrainState(t, sa, 30*time.Second, drainrequest.NotRequested, nil)

	out, err := runSiteconFor(t, 2*time.Minute, "agent", "drain-request", "--socket", sa.socket,
		"--requester", "baseosmgr", "--reason", "base OS update", "--wait", "--timeout", "90s")
	if err != nil || !strings.Contains(out, "drain request: complete (requested by baseosmgr: base OS update)") {
		t.Fatalf("drain-request --wait: %v\n%s", err, out)
	}
	if !cordonedNow(t, cs, node) {
		t.Fatalf("%s is not cordoned after a complete drain request", node)
	}
	pods := listPods(cs, "default", metav1.ListOptions{LabelSelector: "app=dr-on-c"})
	for _, p := range pods.items {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			t.Fatalf("a complete drain left a pod on %s: %s", node, pods)
		}
	}
	st := drainStatus(t, sa)
	if st.State != drainrequest.Complete || !st.CordonedByAgent || st.Requester != "baseosmgr" || st.Reason != "base OS update" {
		t.Fatalf("published status: %+v", st)
	}
	if ast, err := localapi.Get[agent.State](context.Background(), sa.socket, localapi.PathAgent); err != nil || ast.Drain.State != drainrequest.Complete {
		t.Fatalf("the agent's state does not publish the drain: %+v, %v", ast.Drain, err)
	}
	if recs := auditActions(t, auditLog); !hasAudit(recs, "drain-request", audit.OutcomeDone, "requested by baseosmgr: base OS update") {
		t.Fatalf("no drain-request record done in the audit log: %+v", recs)
	}

	// The device powers off (its agent with it) and boots.
	sa.lose()
	if err := site.Fail(node); err != nil {
		t.Fatal(err)
	}
	waitNode(t, cs, node, false)
	if err := site.Recover(node); err != nil {
		t.Fatal(err)
	}
	sa = drainAgent(t, site, node, logDir, stateDir, auditLog)
	st = waitDrainState(t, sa, 120*time.Second, drainrequest.NotRequested, func(st drainrequest.Status) bool {
		return slices.ContainsFunc(st.Did, func(d string) bool { return strings.Contains(d, "uncordoned (the agent's own cordon)") })
	})
	if cordonedNow(t, cs, node) {
		t.Fatalf("%s still cordoned after its return: %+v", node, st)
	}
	if recs := auditActions(t, auditLog); !hasAudit(recs, "uncordon", audit.OutcomeDone, "the agent's own cordon") {
		t.Fatalf("no uncordon record in the audit log: %+v", recs)
	}
	if _, err := os.Stat(filepath.Join(stateDir, drainrequest.RecordFile)); !os.IsNotExist(err) {
		t.Fatalf("the request's record outlived it: %v", err)
	}
}

// A node a technician cordoned by hand stays cordoned after the drain
// request's boot: the agent uncordons only its own cordon.
func TestDrainRequestLeavesAHandCordonAlone(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	const node = "node-c"
	uncordonAfter(t, site, node)
	site.RecoverOnCleanup(t, node)
	// node-c is a server: its drain is judged on etcd's member list.
	publishEtcdMembers(t, site)
	if _, err := change.Cordon(context.Background(), cs, node, true); err != nil {
		t.Fatal(err)
	}
	logDir, stateDir := t.TempDir(), t.TempDir()
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	sa := drainAgent(t, site, node, logDir, stateDir, auditLog)
	out, err := runSiteconFor(t, 2*time.Minute, "agent", "drain-request", "--socket", sa.socket, "--reason", "reboot", "--wait", "--timeout", "90s")
	if err != nil || !strings.Contains(out, "drain request: complete") {
		t.Fatalf("drain-request --wait: %v\n%s", err, out)
	}
	if st := drainStatus(t, sa); st.CordonedByAgent {
		t.Fatalf("the agent claims a cordon made by hand: %+v", st)
	}
	// The agent stays up through the outage and sees its node go and come back.
	if err := site.Fail(node); err != nil {
		t.Fatal(err)
	}
	waitNode(t, cs, node, false)
	if err := site.Recover(node); err != nil {
		t.Fatal(err)
	}
	st := waitDrainState(t, sa, 120*time.Second, drainrequest.NotRequested, func(st drainrequest.Status) bool {
		return slices.ContainsFunc(st.Did, func(d string) bool { return strings.Contains(d, "left cordoned") })
	})
	if !cordonedNow(t, cs, node) {
		t.Fatalf("the agent uncordoned a node cordoned by hand: %+v", st)
	}
	if recs := auditActions(t, auditLog); slices.ContainsFunc(recs, func(r audit.Record) bool { return r.Action == "uncordon" }) {
		t.Fatalf("an uncordon was recorded: %+v", recs)
	}
}

// A request held because the node holds the last healthy replica of a
// volume: nothing is cordoned, the reason is published and each attempt
// refused in the audit log; once Longhorn has rebuilt a replica on
// another node, the next attempt drains.
func TestDrainRequestHeldForTheLastReplica(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	const node = "node-b"
	uncordonAfter(t, site, node)
	singleReplicaVolume(t, site, "vol-dr-b", node)
	// node-b is a server: its drain is judged on etcd's member list, so
	// that the last replica alone holds it, and once rebuilt, nothing.
	publishEtcdMembers(t, site)
	logDir, stateDir := t.TempDir(), t.TempDir()
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	sa := drainAgent(t, site, node, logDir, stateDir, auditLog)
	out, err := runSiteconFor(t, 30*time.Second, "agent", "drain-request", "--socket", sa.socket, "--requester", "zedagent", "--reason", "shutdown")
	if err != nil || !strings.Contains(out, "drain request: requested (requested by zedagent: shutdown)") {
		t.Fatalf("drain-request: %v\n%s", err, out)
	}
	const why = "node-b holds the only healthy replica of vol-dr-b"
	held := func(st drainrequest.Status) bool {
		return st.Attempt >= 2 && slices.ContainsFunc(st.Why, func(w string) bool { return strings.Contains(w, why) })
	}
	waitDrainState(t, sa, 60*time.Second, drainrequest.Retrying, held)
	if cordonedNow(t, cs, node) {
		t.Fatal("a held drain request cordoned the node")
	}
	out, err = runSiteconFor(t, 30*time.Second, "agent", "drain-request", "--socket", sa.socket, "--status")
	if err != nil || !strings.Contains(out, "drain request: drain retrying (requested by zedagent: shutdown)") || !strings.Contains(out, "why: "+why) {
		t.Fatalf("drain-request --status: %v\n%s", err, out)
	}
	// A second request while this one runs is refused, saying this one.
	out, err = runSiteconFor(t, 30*time.Second, "agent", "drain-request", "--socket", sa.socket, "--requester", "other")
	if err == nil || !strings.Contains(out, "409") || !strings.Contains(out, "requested by zedagent") {
		t.Fatalf("a second request: %v\n%s", err, out)
	}
	if recs := auditActions(t, auditLog); !hasAudit(recs, "drain-request", audit.OutcomeRefused, "requested by zedagent: shutdown") {
		t.Fatalf("no refused attempt in the audit log: %+v", recs)
	}

	// Longhorn gets a second replica to make: it rebuilds it elsewhere.
	lh := longhornClient(t, site).LonghornV1beta2().Volumes(kube.LonghornNamespace)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		v, err := lh.Get(context.Background(), "vol-dr-b", metav1.GetOptions{})
		if err != nil {
			return err
		}
		v.Spec.NumberOfReplicas = 2
		_, err = lh.Update(context.Background(), v, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitDrainState(t, sa, 90*time.Second, drainrequest.Complete, nil)
	if !cordonedNow(t, cs, node) {
		t.Fatal("a complete drain request left the node uncordoned")
	}
	if recs := auditActions(t, auditLog); !hasAudit(recs, "drain-request", audit.OutcomeDone, "requested by zedagent: shutdown") {
		t.Fatalf("no drain-request done in the audit log: %+v", recs)
	}
}

// uncordonAfter takes node back into service when the test ends.
func uncordonAfter(t *testing.T, site *sitebox.TestSite, node string) {
	t.Cleanup(func() {
		if _, err := change.Cordon(context.Background(), site.Clients(t).Core, node, false); err != nil {
			t.Errorf("uncordon %s: %v", node, err)
		}
	})
}

// Every node asks at once (a whole-site power-down): two nodes that hold
// a volume's two copies request drains together. One drains; the other
// does not count the first's copy as a home (it is cordoned, on its way
// down), holds, uncordoned, and says so.
func TestDrainRequestsAllAtOnce(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	nodes := []string{"node-b", "node-c"}
	site.Volume(t, "vol-dr-bc", sitebox.VolumeOptions{Replicas: 2, UsedOn: "node-a"})
	lh := longhornClient(t, site).LonghornV1beta2().Replicas(kube.LonghornNamespace)
	reps, err := lh.List(context.Background(), metav1.ListOptions{LabelSelector: "longhornvolume=vol-dr-bc"})
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]bool{}
	for _, r := range reps.Items {
		on[r.Spec.NodeID] = true
	}
	if !on["node-b"] || !on["node-c"] {
		// Longhorn placed them elsewhere: put them on b and c.
		for i, n := range nodes {
			r := reps.Items[i]
			if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, err := lh.Get(context.Background(), r.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Spec.NodeID, cur.Labels["longhornnode"] = n, n
				_, err = lh.Update(context.Background(), cur, metav1.UpdateOptions{})
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Both are servers: their drains are judged on etcd's member list.
	publishEtcdMembers(t, site)
	agents := map[string]*siteAgent{}
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	for _, n := range nodes {
		uncordonAfter(t, site, n)
		agents[n] = drainAgent(t, site, n, t.TempDir(), t.TempDir(), auditLog)
		waitDrainState(t, agents[n], 30*time.Second, drainrequest.NotRequested, nil)
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := runSiteconFor(t, 30*time.Second, "agent", "drain-request", "--socket", agents[n].socket, "--requester", "zedagent", "--reason", "site power-down"); err != nil {
				t.Errorf("%s: %v\n%s", n, err, out)
			}
		}()
	}
	wg.Wait()
	type verdict struct{ complete, held string }
	v := until(t, 90*time.Second, "one drain complete, the other held by the first's cordon", func() (verdict, bool) {
		var v verdict
		for _, n := range nodes {
			switch st := drainStatus(t, agents[n]); {
			case st.State == drainrequest.Complete:
				v.complete = n
			case st.State == drainrequest.Retrying && st.Attempt >= 2 && slices.ContainsFunc(st.Why, func(w string) bool {
				return strings.Contains(w, "is cordoned (draining or out of service) does not count")
			}):
				v.held = n
			}
		}
		return v, v.complete != "" && v.held != ""
	}, func(v verdict) string {
		return fmt.Sprintf("%+v; node-b %+v; node-c %+v", v, drainStatus(t, agents["node-b"]), drainStatus(t, agents["node-c"]))
	})
	st := drainStatus(t, agents[v.held])
	why := strings.Join(st.Why, "\n")
	for _, want := range []string{
		v.held + " holds the only healthy replica of vol-dr-bc",
		"the copy on " + v.complete + " is cordoned (draining or out of service) does not count",
	} {
		if !strings.Contains(why, want) {
			t.Errorf("the held request does not say %q:\n%s", want, why)
		}
	}
	if cordonedNow(t, cs, v.held) {
		t.Errorf("the held node %s is cordoned", v.held)
	}
	if !cordonedNow(t, cs, v.complete) {
		t.Errorf("the drained node %s is not cordoned", v.complete)
	}
}

// A worker's drain request, its agent on its node's own identity (as on a
// device): the drain cordons its Node, reads the DaemonSets whose pods it
// leaves and evicts the others, all as its node may. The chaos explorer
// found every worker's request failing on the DaemonSets it could not read.
func TestWorkerDrainRequestWithItsNodeIdentity(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	const node = "node-c"
	actAsWorker(t, cs, node)
	grantAgentAccessAfresh(t, cs)
	uncordonAfter(t, site, node)
	pinnedDeployment(t, cs, "dr-worker-on-c", node)
	logDir := t.TempDir()
	sa := startAgentWith(t, site, node, t.TempDir(), logDir, func(o *agent.Options) {
		startSiteAgentTimings(o)
		o.RESTConfig = workerIdentity(t, site, node)
		o.Apps.StateDir, o.AuditLog = t.TempDir(), filepath.Join(t.TempDir(), "audit.jsonl")
		o.DrainAttempts, o.DrainRetryInterval = 1000, time.Second
	})
	t.Cleanup(sa.stop)
	defer logAgentsOnFailure(t, logDir, node)
	waitDrainState(t, sa, 30*time.Second, drainrequest.NotRequested, nil)
	out, err := runSiteconFor(t, 2*time.Minute, "agent", "drain-request", "--socket", sa.socket,
		"--requester", "baseosmgr", "--reason", "base OS update", "--wait", "--timeout", "90s")
	if err != nil || !strings.Contains(out, "drain request: complete") {
		t.Fatalf("a worker's drain-request --wait: %v\n%s", err, out)
	}
	if !cordonedNow(t, cs, node) {
		t.Fatalf("%s is not cordoned after its complete drain request", node)
	}
	for _, p := range listPods(cs, "default", metav1.ListOptions{LabelSelector: "app=dr-worker-on-c"}).items {
		if p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			t.Fatalf("the worker's complete drain left its pod %s", p.Name)
		}
	}
}
