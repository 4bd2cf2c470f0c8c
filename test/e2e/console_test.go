package e2e

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/lipgloss"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/test/sitebox"
	"github.com/sitecon/sitecon/ui"
	"github.com/sitecon/sitecon/views"
)

// lineWith returns the screen's line whose first cell is word. A terminal
// without colour (NO_COLOR, as CI sets it) marks the selected row with "> "
// instead of a highlight, so the mark is not part of the first cell.
func lineWith(screen, word string) string {
	for _, l := range strings.Split(screen, "\n") {
		first := strings.TrimPrefix(strings.TrimSpace(l), "> ")
		if strings.HasPrefix(first, word) {
			return l
		}
	}
	return ""
}

func TestConsoleFollowsNodeFailure(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	// In use on node-a (Longhorn attaches only a volume in use); node-b fails.
	site.Volume(t, "vol-console", sitebox.VolumeOptions{Replicas: 3, Size: 5 << 30, UsedOn: "node-a"})
	c := startConsole(t, "--kubeconfig", site.Kubeconfig(), "--log-file", t.TempDir()+"/console.log")
	c.waitScreen(10*time.Second, "overview with 3/3 nodes", func(s string) bool {
		return strings.Contains(s, "sitebox-test") && strings.Contains(s, "3/3 ready")
	})
	c.keys("2")
	c.waitScreen(5*time.Second, "nodes screen", func(s string) bool {
		return strings.Contains(s, "ROLES") && strings.Contains(lineWith(s, "node-b"), "Ready")
	})
	c.keys("4")
	c.waitScreen(15*time.Second, "volumes screen with vol-console healthy", func(s string) bool {
		return strings.Contains(lineWith(s, "vol-console"), "healthy")
	})

	// What is shown of node-b is under test, not etcd's election.
	if err := site.MoveEtcdLeaderOff("node-b"); err != nil {
		t.Fatal(err)
	}
	if err := site.Fail("node-b"); err != nil {
		t.Fatal(err)
	}
	site.RecoverOnCleanup(t, "node-b")
	s := c.waitScreen(45*time.Second, "vol-console degraded", func(s string) bool {
		return strings.Contains(lineWith(s, "vol-console"), "degraded")
	})
	if !strings.Contains(lineWith(s, "vol-console"), "node-b✗") {
		t.Errorf("the failed replica is not marked:\n%s", s)
	}
	c.keys(":", "nodes", "Enter")
	s = c.waitScreen(10*time.Second, "node-b not ready", func(s string) bool {
		l := lineWith(s, "node-b")
		return strings.Contains(l, "Unknown") || strings.Contains(l, "NotReady")
	})
	if !strings.Contains(s, "nodes 2/3") {
		t.Errorf("the header should count 2/3 nodes:\n%s", s)
	}
	c.keys("1")
	c.waitScreen(5*time.Second, "alerts name the failure", func(s string) bool {
		return strings.Contains(s, "node node-b") && strings.Contains(s, "volume vol-console degraded for")
	})

	if err := site.Recover("node-b"); err != nil {
		t.Fatal(err)
	}
	c.keys("4")
	c.waitScreen(45*time.Second, "vol-console healthy again", func(s string) bool {
		return strings.Contains(lineWith(s, "vol-console"), "healthy")
	})
	c.keys("q")
	c.waitScreen(5*time.Second, "console quit", func(s string) bool { return !strings.Contains(s, "1 overview") })
}

// BenchmarkFirstFrame measures the console's start against a real API
// server: snapshot started, every informer synced, the first frame built
// and drawn.
func BenchmarkFirstFrame(b *testing.B) {
	site := sitebox.Shared(b)
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		snap, err := kube.NewSnapshot(site.Config, nil)
		if err != nil {
			b.Fatal(err)
		}
		snap.Start(ctx)
		if err := snap.WaitForSync(ctx); err != nil {
			b.Fatal(err)
		}
		uiCtx := ui.NewContext(lipgloss.NewRenderer(io.Discard), time.Now, nil)
		uiCtx.Width, uiCtx.Height = 80, 24
		app := views.NewApp(uiCtx)
		app.Update(views.FrameMsg(views.BuildFrame(snap, nil, "", time.Now())))
		if !strings.Contains(app.View(), "3/3 ready") {
			b.Fatal("first frame lacks the nodes")
		}
		cancel()
	}
}

// The node actions through the console: cordon and uncordon, a drain the
// preflight refuses (node-b holds a volume's only healthy replica), and a
// drain that runs; each recorded in the audit log.
func TestConsoleNodeActions(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := t.Context()
	singleReplicaVolume(t, site, "vol-console-b", "node-b")
	t.Cleanup(func() { _, _ = change.Cordon(context.Background(), cs, "node-c", false) })
	// node-b and node-c are servers: their drains are judged on etcd's
	// member list, published before the console reads the cluster.
	publishEtcdMembers(t, site)
	auditLog := t.TempDir() + "/audit.jsonl"
	c := startConsoleNoColor(t, "--kubeconfig", site.Kubeconfig(), "--log-file", t.TempDir()+"/console.log", "--audit-log", auditLog)
	c.waitScreen(10*time.Second, "overview", func(s string) bool { return strings.Contains(s, "3/3 ready") })
	c.keys("2")
	c.waitScreen(5*time.Second, "nodes screen", func(s string) bool { return strings.Contains(lineWith(s, "node-c"), "Ready") })
	unschedulable := func(node string) bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && n.Spec.Unschedulable
	}

	c.keys("j", "j", "c") // node-a, node-b, node-c
	c.waitScreen(5*time.Second, "cordon dialog", func(s string) bool { return strings.Contains(s, "Cordon node-c? y to go on") })
	c.keys("y")
	c.waitScreen(10*time.Second, "cordon done", func(s string) bool { return strings.Contains(s, "done: cordon node-c") })
	if !unschedulable("node-c") {
		t.Fatal("the console's cordon did not cordon node-c")
	}
	// Escape alone: followed at once by another key, a terminal reads alt+key.
	// A dialog takes keys only once it has been on screen a moment, and
	// says so by showing them.
	closeDialog := func() {
		c.waitScreen(5*time.Second, "the dialog takes keys", func(s string) bool { return strings.Contains(s, "any key to close") })
		c.keys("Escape")
		c.waitScreen(5*time.Second, "dialog closed", func(s string) bool { return strings.Contains(s, "ROLES") })
	}
	closeDialog()
	s := c.waitScreen(5*time.Second, "node-c cordoned on screen", func(s string) bool { return strings.Contains(lineWith(s, "node-c"), "cordoned") })
	// Without colour, the cursor's row and the current tab are still told.
	if !strings.HasPrefix(strings.TrimSpace(lineWith(s, "node-c")), "> node-c") || !strings.Contains(s, "[2 nodes]") {
		t.Fatalf("no colour: want node-c marked \"> \" and the nodes tab bracketed:\n%s", s)
	}
	c.keys("u")
	c.waitScreen(5*time.Second, "uncordon dialog", func(s string) bool { return strings.Contains(s, "Uncordon node-c?") })
	c.keys("y")
	c.waitScreen(10*time.Second, "uncordon done", func(s string) bool { return strings.Contains(s, "done: uncordon node-c") })
	if unschedulable("node-c") {
		t.Fatal("the console's uncordon left node-c cordoned")
	}
	closeDialog()
	c.keys("k", "d") // node-b
	c.waitScreen(15*time.Second, "drain of node-b refused", func(s string) bool {
		return strings.Contains(s, "refused: nothing was changed") && strings.Contains(s, "only healthy replica")
	})
	if unschedulable("node-b") {
		t.Fatal("a refused drain cordoned node-b")
	}
	closeDialog()
	c.keys("j", "d") // node-c
	c.waitScreen(15*time.Second, "drain of node-c asks", func(s string) bool { return strings.Contains(s, "Drain node-c? y to go on") })
	c.keys("y")
	c.waitScreen(60*time.Second, "drain of node-c done", func(s string) bool { return strings.Contains(s, "done: drain node-c") })
	if !unschedulable("node-c") {
		t.Fatal("a drained node must stay cordoned")
	}
	// The drain's record says what it did, as the CLI's does.
	if rec := lastAudit(t, auditLog); rec.Action != "drain" || rec.Outcome != audit.OutcomeDone || !strings.HasPrefix(rec.Detail, "evicted ") {
		t.Fatalf("the console's drain record lacks what it evicted: %+v", rec)
	}
	closeDialog()
	c.keys("u")
	c.waitScreen(5*time.Second, "uncordon dialog", func(s string) bool { return strings.Contains(s, "Uncordon node-c?") })
	c.keys("y")
	c.waitScreen(10*time.Second, "uncordon done", func(s string) bool { return strings.Contains(s, "done: uncordon node-c") })

	// The seed moves to node-b and back, through the console.
	joinIP := func() string {
		cm, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.ClusterConfigMapName, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return cm.Data[kube.ClusterKeyJoinServerIP]
	}
	t.Cleanup(func() {
		if joinIP() != siteAddr(site, 1) {
			_, _, _ = runSitecon(t, "seed", "node-a", "--yes", "--kubeconfig", site.Kubeconfig(), "--audit-log", auditLog)
		}
	})
	for _, step := range []struct{ keys, node, ip string }{{"k", "node-b", siteAddr(site, 2)}, {"k", "node-a", siteAddr(site, 1)}} {
		closeDialog()
		c.keys(step.keys, "S")
		c.waitScreen(5*time.Second, "seed dialog", func(s string) bool { return strings.Contains(s, "Make "+step.node+" the seed? y to go on") })
		c.keys("y")
		c.waitScreen(10*time.Second, "seed done", func(s string) bool { return strings.Contains(s, "done: make "+step.node+" the seed") })
		if got := joinIP(); got != step.ip {
			t.Fatalf("join_server_ip = %q after making %s the seed, want %s", got, step.node, step.ip)
		}
	}

	// A spare node is removed: the name must be typed.
	spare := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-spare-c", Labels: map[string]string{"node-role.kubernetes.io/agent": "true"}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, spare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), spare.Name, metav1.DeleteOptions{}) })
	closeDialog()
	c.waitScreen(5*time.Second, "spare node listed", func(s string) bool { return lineWith(s, "node-spare-c") != "" })
	c.keys("G", "X")
	c.waitScreen(15*time.Second, "remove asks for the name", func(s string) bool { return strings.Contains(s, `Type "node-spare-c" and enter`) })
	c.keys("node-spare-c", "Enter")
	c.waitScreen(30*time.Second, "removed", func(s string) bool { return strings.Contains(s, "done: remove node-spare-c") })
	if _, err := cs.CoreV1().Nodes().Get(ctx, spare.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node-spare-c still there: %v", err)
	}

	recs, err := audit.Read(auditLog)
	if err != nil {
		t.Fatal(err)
	}
	// Each change's intent comes before its outcome, with the same id.
	var got []string
	intents := map[string]bool{}
	for _, r := range recs {
		if r.Via != "console" {
			t.Errorf("record without the console session: %+v", r)
		}
		if r.Outcome == audit.OutcomeIntent {
			intents[r.ID] = true
			continue
		}
		if r.Outcome == audit.OutcomeDone && !intents[r.ID] {
			t.Errorf("no intent before %+v", r)
		}
		got = append(got, r.Action+" "+r.Target+" "+r.Outcome)
	}
	want := []string{"cordon node-c done", "uncordon node-c done", "drain node-b refused", "drain node-c done", "uncordon node-c done", "seed node-b done", "seed node-a done", "remove-node node-spare-c done"}
	if !slices.Equal(got, want) {
		t.Fatalf("audit log:\n%v\nwant:\n%v", got, want)
	}
}

// Replace a device through the console: :replace drains and removes the old
// node (its name typed) and shows the new node's bundle, which carries the
// old node's address.
func TestConsoleReplaceNode(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := t.Context()
	agentNodeAt(t, cs, "node-old-c", siteAddr(site, 10))
	_, configPath := formedConfig(t, site)
	auditLog := t.TempDir() + "/audit.jsonl"
	c := startConsole(t, "--kubeconfig", site.Kubeconfig(), "--log-file", t.TempDir()+"/console.log", "--audit-log", auditLog, "--config", configPath)
	c.waitScreen(10*time.Second, "overview", func(s string) bool { return strings.Contains(s, "sitebox-test") })
	c.keys("2")
	c.waitScreen(5*time.Second, "node-old-c listed", func(s string) bool { return lineWith(s, "node-old-c") != "" })
	const newUUID = "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4e"
	c.keys(":", "replace node-old-c node-new-c "+newUUID+" agent", "Enter")
	c.waitScreen(15*time.Second, "the name asked", func(s string) bool { return strings.Contains(s, `Type "node-old-c" and enter`) })
	c.keys("node-old-c", "Enter")
	s := c.waitScreen(30*time.Second, "replaced", func(s string) bool { return strings.Contains(s, "done: replace node-old-c") })
	if _, err := cs.CoreV1().Nodes().Get(ctx, "node-old-c", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node-old-c still there: %v", err)
	}
	// The bundle, as a technician copies it off the screen: the wrapped
	// lines joined, the padding gone.
	flat := strings.Join(strings.Fields(s), "")
	i := strings.Index(flat, "sitecon-join.")
	if i < 0 || !strings.Contains(s, "node-new-c joins at "+siteAddr(site, 10)) {
		t.Fatalf("no bundle at node-old-c's address on screen:\n%s", s)
	}
	token := flat[i:]
	if j := strings.Index(token, "done:"); j > 0 {
		token = token[:j]
	}
	bundle, err := formation.DecodeBundle(token)
	if err != nil {
		t.Fatalf("the bundle on screen does not decode (%v):\n%s", err, s)
	}
	if bundle.NodeName != "node-new-c" || bundle.NodeUUID != newUUID || !strings.HasPrefix(bundle.ClusterIPPrefix, siteAddr(site, 10)+"/") {
		t.Fatalf("bundle: %+v", bundle)
	}
	if rec := lastAudit(t, auditLog); rec.Action != "replace-node" || rec.Outcome != audit.OutcomeDone || rec.Target != "node-old-c → node-new-c" {
		t.Fatalf("audit record: %+v", rec)
	}
}

// Migrate through the console: filter to the app, m, down to the first
// eligible node, enter, y; the dialog follows the app to its new node and the agents agree.
func TestConsoleMigrate(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	appsDir, logDir := t.TempDir(), t.TempDir()
	appConfigs := map[string]apps.AppConfig{
		"cons-mig": {UUID: "f2000000-0000-4000-8000-000000000001", DisplayName: "cons-mig", Activate: true, Kind: apps.KindContainer,
			Image: "registry.local/cons:1", DesignatedNodeID: sitebox.NodeUUID("node-c"), Affinity: apps.AffinityPreferred},
	}
	writeJSON(t, filepath.Join(appsDir, "apps", "cons-mig.json"), appConfigs["cons-mig"])
	agents := map[string]*siteAgent{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		agents[n] = startSiteAgent(t, site, n, appsDir, logDir)
	}
	all := []*siteAgent{agents["node-a"], agents["node-b"], agents["node-c"]}
	t.Cleanup(func() { cleanupApps(t, cs, dynClient(t, site), agents, appsDir, appConfigs) })
	waitAgents(t, all, "cons-mig", 60*time.Second, "running on node-c", runningOn("node-c"))

	auditLog := t.TempDir() + "/audit.jsonl"
	c := startConsole(t, "--kubeconfig", site.Kubeconfig(), "--log-file", t.TempDir()+"/console.log", "--audit-log", auditLog)
	c.waitScreen(10*time.Second, "overview", func(s string) bool { return strings.Contains(s, "3/3 ready") })
	c.keys("5")
	c.waitScreen(10*time.Second, "apps screen", func(s string) bool { return strings.Contains(lineWith(s, "cons-mig"), "node-c") })
	c.keys("/", "cons-mig", "Enter")
	c.waitScreen(5*time.Second, "filtered", func(s string) bool { return strings.Contains(s, "filter /cons-mig") })
	c.keys("m")
	s := c.waitScreen(5*time.Second, "targets", func(s string) bool { return strings.Contains(s, "Move to (↑/↓ to choose, enter; esc to cancel)") })
	if !strings.Contains(s, "node-c  (the app runs here)") || strings.Contains(s, "> node-") {
		t.Fatalf("targets: want none chosen yet and node-c explained:\n%s", s)
	}
	// Nothing moves until a node is chosen: down marks the first that may take it.
	c.keys("Down")
	c.waitScreen(5*time.Second, "node-a chosen", func(s string) bool { return strings.Contains(s, "> node-a") })
	c.keys("Enter")
	c.waitScreen(5*time.Second, "confirm", func(s string) bool {
		return strings.Contains(s, "Move cons-mig from node-c to node-a.") && strings.Contains(s, "Migrate cons-mig? y to go on")
	})
	c.keys("y")
	// The dialog ends saying it is done, in the CLI's words.
	c.waitScreen(60*time.Second, "moved", func(s string) bool { return strings.Contains(s, "done: cons-mig runs on node-a") })
	waitAgents(t, all, "cons-mig", 30*time.Second, "agreed on node-a", runningOn("node-a"))
	if rec := lastAudit(t, auditLog); rec.Action != "migrate" || rec.Outcome != audit.OutcomeDone || rec.Target != "cons-mig → node-a" {
		t.Fatalf("audit record: %+v", rec)
	}
	// The intent names the override about to be written, as the CLI's does:
	// cut off after it, the log still says what was under way.
	recs, err := audit.Read(auditLog)
	if err != nil || len(recs) != 2 || recs[0].Outcome != audit.OutcomeIntent || !strings.Contains(recs[0].Detail, `"node":"node-a"`) {
		t.Fatalf("the migrate's intent lacks the override: %+v (%v)", recs, err)
	}
}

// The console starts with the API server down (NO DATA and why, and it
// stays up), shows the cluster once the server is back without being told,
// keeps the last data under a STALE badge through an outage, and leaves
// only when asked.
func TestConsoleRidesOutAPIServerOutage(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	restart := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := site.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = site.StartAPIServer(ctx) // refused when it already runs
		site.WaitSettled(t, 90*time.Second)
		site.WaitSimulatorsLive(t, 90*time.Second)
	})
	if err := site.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	c := startConsole(t, "--kubeconfig", site.Kubeconfig(), "--log-file", t.TempDir()+"/console.log")
	c.waitScreen(15*time.Second, "NO DATA with the reason", func(s string) bool {
		return strings.Contains(s, "NO DATA") && strings.Contains(s, "No cluster data:")
	})
	restart()
	c.waitScreen(30*time.Second, "the cluster, once the API server is back", func(s string) bool {
		return strings.Contains(s, "sitebox-test") && strings.Contains(s, "3/3 ready") && !strings.Contains(s, "NO DATA")
	})
	if err := site.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	s := c.waitScreen(30*time.Second, "STALE over the last data", func(s string) bool {
		return strings.Contains(s, "STALE") && strings.Contains(s, "3/3 ready")
	})
	if !regexp.MustCompile(`STALE \d+s`).MatchString(s) || !strings.Contains(s, "Cluster API down") {
		t.Errorf("the badge should say for how long:\n%s", s)
	}
	restart()
	c.waitScreen(30*time.Second, "fresh again", func(s string) bool {
		return !strings.Contains(s, "STALE") && strings.Contains(s, "3/3 ready")
	})
	if err := exec.Command("tmux", "has-session", "-t", c.session).Run(); err != nil {
		t.Fatal("the console exited on its own")
	}
	c.keys("q")
	until(t, 5*time.Second, "q ends the console", func() (string, bool) {
		return c.screen(), exec.Command("tmux", "has-session", "-t", c.session).Run() != nil
	}, func(s string) string { return "it still runs; screen:\n" + s })
}

// Keys read at once do not answer the dialog they open (safety rule 5):
// "GSy" typed in one go on the nodes screen, as a script or a laggy link
// delivers it, opens the seed dialog for the last node and leaves the seed
// where it was; the dialog then shows its keys, still asking. A bracketed
// paste of "y" answers nothing either: the n typed after it cancels.
func TestConsoleBurstDoesNotConfirm(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	// Read with its own context: the cleanup reads it too, after the
	// test's context has ended.
	joinIP := func() string {
		cm, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(context.Background(), kube.ClusterConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Errorf("the cluster ConfigMap: %v", err)
			return ""
		}
		return cm.Data[kube.ClusterKeyJoinServerIP]
	}
	seed := joinIP()
	if seed == "" || seed == siteAddr(site, 3) {
		t.Fatalf("join_server_ip is %q: the test needs a seed other than node-c", seed)
	}
	auditLog := t.TempDir() + "/audit.jsonl"
	t.Cleanup(func() {
		if got := joinIP(); got != "" && got != seed {
			_, _, _ = runSitecon(t, "seed", "node-a", "--yes", "--kubeconfig", site.Kubeconfig(), "--audit-log", auditLog)
		}
	})
	c := startConsole(t, "--kubeconfig", site.Kubeconfig(), "--log-file", t.TempDir()+"/console.log", "--audit-log", auditLog)
	c.waitScreen(10*time.Second, "overview", func(s string) bool { return strings.Contains(s, "3/3 ready") })
	c.keys("2")
	c.waitScreen(5*time.Second, "nodes screen", func(s string) bool { return strings.Contains(lineWith(s, "node-c"), "Ready") })

	c.keys("-l", "GSy")
	// Had the y confirmed, the dialog would be running or done by now and
	// never ask again.
	s := c.waitScreen(10*time.Second, "the seed dialog still asking", func(s string) bool {
		return strings.Contains(s, "Make node-c the seed? y to go on")
	})
	if strings.Contains(s, "done:") || strings.Contains(s, "running...") {
		t.Fatalf("the burst answered the dialog:\n%s", s)
	}
	if got := joinIP(); got != seed {
		t.Fatalf("join_server_ip moved from %s to %s on a burst of keys", seed, got)
	}

	// Bracketed paste: the console asked the terminal for it, so tmux
	// wraps the buffer in paste brackets (-p).
	if out, err := exec.Command("tmux", "set-buffer", "-b", c.session, "y").CombinedOutput(); err != nil {
		t.Fatalf("set-buffer: %v\n%s", err, out)
	}
	if out, err := exec.Command("tmux", "paste-buffer", "-p", "-d", "-b", c.session, "-t", c.session).CombinedOutput(); err != nil {
		t.Fatalf("paste-buffer: %v\n%s", err, out)
	}
	// Keys are read in order: n comes after the paste, and cancels only a
	// dialog the paste did not answer.
	c.keys("n")
	c.waitScreen(10*time.Second, "dialog cancelled", func(s string) bool { return strings.Contains(s, "ROLES") })
	if got := joinIP(); got != seed {
		t.Fatalf("join_server_ip moved from %s to %s on a paste", seed, got)
	}
	if rec := lastAudit(t, auditLog); rec.Action != "seed" || rec.Outcome != audit.OutcomeCancelled {
		t.Fatalf("the seed dialog should be recorded as cancelled: %+v", rec)
	}
}

// An Event whose message carries escape sequences (OSC 0 sets the window
// title, OSC 52 writes the clipboard) reaches the console through the real
// API server and is drawn as text: tmux, the terminal here, keeps its pane
// title and its paste buffers, and the words around the sequences show.
func TestConsoleDrawsEventTextSafely(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	name := fmt.Sprintf("hostile-%d", time.Now().UnixNano())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: "default"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "raw-text", Namespace: "default"},
		Reason:         "RawText",
		Type:           corev1.EventTypeWarning,
		Count:          1,
		Message:        "before\x1b]0;pwned-title\x07\x1b]52;c;cHduZWQtY2xpcGJvYXJk\x07\x1b[2Jafter",
		FirstTimestamp: metav1.Now(),
		LastTimestamp:  metav1.Now(),
		Source:         corev1.EventSource{Component: "sitecon-e2e"},
	}
	if _, err := cs.CoreV1().Events("default").Create(t.Context(), ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Events("default").Delete(context.Background(), name, metav1.DeleteOptions{}) })

	// tmux takes OSC 52 into a paste buffer only with set-clipboard on (a
	// server option): on for this test, so a clipboard write would show.
	if prev, err := exec.Command("tmux", "show-options", "-s", "-v", "set-clipboard").Output(); err == nil {
		t.Cleanup(func() {
			_ = exec.Command("tmux", "set-option", "-s", "set-clipboard", strings.TrimSpace(string(prev))).Run()
		})
	}
	c := startConsole(t, "--kubeconfig", site.Kubeconfig(), "--log-file", t.TempDir()+"/console.log")
	if out, err := exec.Command("tmux", "set-option", "-s", "set-clipboard", "on").CombinedOutput(); err != nil {
		t.Fatalf("set-clipboard: %v\n%s", err, out)
	}
	paneTitle := func() string {
		out, err := exec.Command("tmux", "display-message", "-p", "-t", c.session, "#{pane_title}").CombinedOutput()
		if err != nil {
			t.Fatalf("pane title: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	buffers := func() string {
		out, _ := exec.Command("tmux", "list-buffers", "-F", "#{buffer_sample}").CombinedOutput()
		return string(out)
	}
	c.waitScreen(10*time.Second, "overview", func(s string) bool { return strings.Contains(s, "3/3 ready") })
	c.keys("6")
	s := c.waitScreen(10*time.Second, "the event on the events screen", func(s string) bool { return strings.Contains(s, "RawText") })
	if !strings.Contains(s, "beforeafter") {
		t.Errorf("the message's words should show, joined where the sequences were:\n%s", s)
	}
	if title := paneTitle(); strings.Contains(title, "pwned") {
		t.Errorf("the event set the terminal's title to %q", title)
	}
	if b := buffers(); strings.Contains(b, "pwned") {
		t.Errorf("the event wrote the clipboard:\n%s", b)
	}
	// The screen was not cleared under the console: the header is there.
	if !strings.Contains(s, "1 overview") {
		t.Errorf("the tabs are gone:\n%s", s)
	}
}
