package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	lhclientset "github.com/longhorn/longhorn-manager/k8s/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/workloads"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/netns"
	"github.com/sitecon/sitecon/test/prereq"
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

// ---- In-process apps agents (--no-bootstrap), one per site node ----

// siteAgent is one node's agent, run in-process with --no-bootstrap.
type siteAgent struct {
	node    string
	agent   *agent.Agent
	counter *requestCounter
	cancel  context.CancelFunc
	done    chan struct{}
	socket  string // its local API
}

func startSiteAgent(t testing.TB, site *sitebox.TestSite, node, appsDir, logDir string) *siteAgent {
	t.Helper()
	return startAgentWith(t, site, node, appsDir, logDir, startSiteAgentTimings)
}

// startSiteAgentTimings are the tests' speed-ups over the shipped defaults
// (see the README).
func startSiteAgentTimings(o *agent.Options) {
	o.LeaderDurations = apps.LeaderDurations{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	o.Apps.Placement = apps.PlacementOptions{MoveAfter: 3 * time.Second}
	o.Apps.FailoverTimeout = 3 * time.Second
	o.Apps.FileAbsentGrace = 2 * time.Second
}

// startAgentWith runs an apps agent for node on sitebox, logging to
// logDir, with sitecon's shipped timings unless tune changes them.
func startAgentWith(t testing.TB, site *sitebox.TestSite, node, appsDir, logDir string, tune func(*agent.Options)) *siteAgent {
	t.Helper()
	logFile, err := os.OpenFile(filepath.Join(logDir, node+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	counter := &requestCounter{counts: map[string]int{}}
	// As on a device: the agent serves /status and its proof of life on
	// its node's cluster address, and its failover guard probes the other
	// nodes' agents there, every dial checked to stay on this machine.
	statusAddr, err := site.StatusAddr(node)
	if err != nil {
		t.Fatal(err)
	}
	token, err := site.ClusterToken()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { guardDials.checkNoneRefused(t) })
	opts := agent.Options{
		NoBootstrap: true, NodeName: node, RESTConfig: counter.wrap(site.Config),
		SocketPath: filepath.Join(logDir, node+".sock"),
		ClusterID:  site.ClusterID, ClusterToken: token, StatusAddr: statusAddr,
		Apps: apps.Options{
			AppsDir: appsDir, StateDir: filepath.Join(logDir, node+"-state"),
			ProbeDial: lostDevice(counter, guardDials.dial(node)),
			// kwok's pods run no process here to fence; a test of the
			// fence turns it on.
			Fence: apps.FenceOptions{Disabled: true},
		},
		Log: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if tune != nil {
		tune(&opts)
	}
	return runSiteAgent(t, node, logDir, logFile, counter, opts)
}

// runSiteAgent runs an in-process agent until the test stops or loses it.
func runSiteAgent(t testing.TB, node, logDir string, logFile *os.File, counter *requestCounter, opts agent.Options) *siteAgent {
	a := agent.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	sa := &siteAgent{node: node, agent: a, counter: counter, cancel: cancel, done: make(chan struct{}), socket: filepath.Join(logDir, node+".sock")}
	go func() {
		defer close(sa.done)
		defer logFile.Close()
		if err := a.Run(ctx); err != nil {
			t.Errorf("agent %s: %v", node, err)
		}
	}()
	return sa
}

func (s *siteAgent) stop() {
	s.cancel()
	<-s.done
}

// lose takes the agent away as a dead device goes: from now on nothing it
// sends reaches the API server, so it releases nothing (its stats-leader
// lease stays until it expires), then it stops.
func (s *siteAgent) lose() {
	s.counter.lost.Store(true)
	s.stop()
}

func (s *siteAgent) app(name string) (apps.PublishedApp, bool) {
	appsPart := s.agent.Apps()
	if appsPart == nil {
		return apps.PublishedApp{}, false
	}
	for _, st := range appsPart.Apps() {
		if st.Name == name {
			return st, true
		}
	}
	return apps.PublishedApp{}, false
}

// requestCounter counts an agent's requests to the API server that are not
// watches, by "VERB resource".
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
	// lost: the device is gone, every request fails (see siteAgent.lose).
	lost atomic.Bool
}

func (c *requestCounter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if c.lost.Load() {
				return nil, errors.New("the device is lost: nothing it sends arrives")
			}
			if req.URL.Query().Get("watch") != "true" {
				c.mu.Lock()
				what := resourceOf(req.URL.Path)
				if what == "leases" {
					what += "/" + path.Base(req.URL.Path)
				}
				c.counts[req.Method+" "+what]++
				c.mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg
}

func (c *requestCounter) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	c.counts = map[string]int{}
	return out
}

// leaseRenewal is the one request an idle agent makes: the stats-leader
// election reading and renewing its Lease.
func leaseRenewal(req string) bool {
	return req == "GET leases/"+kube.StatsLeaderLeaseName || req == "PUT leases/"+kube.StatsLeaderLeaseName
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// resourceOf turns /apis/apps/v1/namespaces/x/deployments/y into "deployments".
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			return parts[i+2]
		}
	}
	if len(parts) >= 3 && parts[0] == "api" {
		return parts[2]
	}
	if len(parts) >= 4 && parts[0] == "apis" {
		return parts[3]
	}
	return path
}

// ---- The nodes' cluster addresses: the failover guard's probes ----

// guardDials records every address the in-process agents dial on the
// cluster network (their failover guard's probes) and refuses every one
// that is not on this machine: a test sends nothing off it.
var guardDials = &dialRecorder{}

type dialRecorder struct {
	mu sync.Mutex
	// dialled are the addresses dialled, by the agent's node.
	dialled map[string][]string
	// refused are the dials to addresses not on this machine, as
	// "NODE's agent dialled ADDR", until reported.
	refused map[string]bool
}

// dial is node's agent's dialer for its probes.
func (r *dialRecorder) dial(node string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		r.mu.Lock()
		if r.dialled == nil {
			r.dialled = map[string][]string{}
		}
		r.dialled[node] = append(r.dialled[node], addr)
		local := onThisMachine(addr)
		if !local {
			if r.refused == nil {
				r.refused = map[string]bool{}
			}
			r.refused[node+"'s agent dialled "+addr] = true
		}
		r.mu.Unlock()
		if !local {
			return nil, fmt.Errorf("%s is not an address on this machine: the test does not send traffic there", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
}

// lostDevice is a lost device's dialer: while counter says the device is
// lost, nothing it sends arrives, so every dial finds no route (silence to
// the failover guard and to the fence), as the API requests fail.
func lostDevice(counter *requestCounter, dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if counter.lost.Load() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}
		}
		return dial(ctx, network, addr)
	}
}

// onThisMachine: addr's host is a loopback address (all of 127.0.0.0/8 and
// ::1 stay on this machine without any configuration).
func onThisMachine(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// checkNoneRefused fails t if an agent dialled an address off this machine
// since the last check.
func (r *dialRecorder) checkNoneRefused(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.refused) > 0 {
		t.Errorf("agents dialled addresses that are not on this machine: %s", strings.Join(slices.Sorted(maps.Keys(r.refused)), "; "))
		clear(r.refused)
	}
}

// answerForPartitioned makes node's device answer on its cluster address
// as a partitioned node's agent does (its proof of life with the site's
// cluster token) after its in-process agent was lost, until the returned
// stop is called (or the test ends). Then sitebox holds the address silent
// if the node is failed, as a powered-off device's.
func answerForPartitioned(t *testing.T, site *sitebox.TestSite, node string) (stop func()) {
	t.Helper()
	addr, err := site.StatusAddr(node)
	if err != nil {
		t.Fatal(err)
	}
	token, err := site.ClusterToken()
	if err != nil {
		t.Fatal(err)
	}
	key, err := config.NewLifeKey(site.ClusterID, token)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s's address: %v", node, err)
	}
	srv := httptest.NewUnstartedServer(config.LifeProofHandler(key, node))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	var once sync.Once
	stop = func() { once.Do(srv.Close) }
	t.Cleanup(stop)
	return stop
}

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

// startOlderConfigAgents runs three agents where node-b holds an older
// version of one app (older) than node-a and node-c (newer); it returns
// the agents and node-b's config file. The app and its agents are cleaned
// up after the test, node-b's file first (with it, node-b would lay the
// app out again).
func startOlderConfigAgents(t *testing.T, site *sitebox.TestSite, newer, older apps.AppConfig) (map[string]*siteAgent, []*siteAgent, string) {
	t.Helper()
	newDir, oldDir, logDir := t.TempDir(), t.TempDir(), t.TempDir()
	oldFile := filepath.Join(oldDir, "apps", older.DisplayName+".json")
	writeJSON(t, filepath.Join(newDir, "apps", newer.DisplayName+".json"), newer)
	writeJSON(t, oldFile, older)
	agents := map[string]*siteAgent{
		"node-a": startSiteAgent(t, site, "node-a", newDir, logDir),
		"node-b": startSiteAgent(t, site, "node-b", oldDir, logDir),
		"node-c": startSiteAgent(t, site, "node-c", newDir, logDir),
	}
	t.Cleanup(func() {
		_ = os.Remove(oldFile)
		cleanupApps(t, clientset(t, site), dynClient(t, site), agents, newDir, map[string]apps.AppConfig{newer.DisplayName: newer})
	})
	return agents, []*siteAgent{agents["node-a"], agents["node-b"], agents["node-c"]}, oldFile
}

// cleanupApps removes the test's apps through the agents (the config goes,
// the DNId agents delete their workloads), then what is left of them.
func cleanupApps(t *testing.T, cs kubernetes.Interface, dyn dynamic.Interface, agents map[string]*siteAgent, appsDir string, appConfigs map[string]apps.AppConfig) {
	ctx := context.Background()
	for name := range appConfigs {
		_ = os.Remove(filepath.Join(appsDir, "apps", name+".json"))
	}
	// Best effort: what is left after 30 s goes below, by force.
	if left, gone := poll(200*time.Millisecond, 30*time.Second, func() (int, bool) {
		deps, err := cs.AppsV1().Deployments(kube.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: apps.LabelManagedBy + "=" + apps.FieldManager})
		return len(deps.Items), err == nil && len(deps.Items) == 0
	}); !gone {
		t.Logf("cleanup: %d Deployments of sitecon's still there after 30 s; removing them by force", left)
	}
	for _, a := range agents {
		a.stop()
	}
	_ = cs.CoreV1().ConfigMaps(kube.AppNamespace).Delete(ctx, apps.PlacementConfigMapName, metav1.DeleteOptions{})
	for _, a := range appConfigs {
		sel := metav1.ListOptions{LabelSelector: kube.LabelAppUUID + "=" + a.UUID}
		for _, gvr := range apps.WorkloadGVRs {
			_ = dyn.Resource(gvr).Namespace(kube.AppNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
		}
		pods, _ := cs.CoreV1().Pods(kube.AppNamespace).List(ctx, sel)
		for _, p := range pods.Items {
			err := cs.CoreV1().Pods(kube.AppNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Logf("cleanup pod %s: %v", p.Name, err)
			}
		}
	}
}

type agentView map[string]apps.PublishedApp // by node

func waitAgents(t *testing.T, agents []*siteAgent, app string, within time.Duration, what string, cond func(agentView) bool) agentView {
	t.Helper()
	return until(t, within, app+": "+what, func() (agentView, bool) {
		view := agentView{}
		for _, a := range agents {
			if st, ok := a.app(app); ok {
				view[a.node] = st
			}
		}
		return view, len(view) == len(agents) && cond(view)
	}, func(view agentView) string {
		var b strings.Builder
		b.WriteString("agents see:")
		for node, st := range view {
			fmt.Fprintf(&b, "\n  %s: dnid=%s is_dnid=%v sched=%v running=%v status=%s node=%s lost=%v err=%q",
				node, st.DNIdNode, st.IsDNIdNode, st.ScheduledOnThisNode, st.ClusterAppRunning, st.KubeStatus, st.Node, st.Lost, st.Error)
		}
		return b.String()
	})
}

// runningOn: every agent agrees the app runs on node, and only node's agent
// reports cluster_app_running.
func runningOn(node string) func(agentView) bool {
	return func(v agentView) bool {
		for n, st := range v {
			if st.KubeStatus != apps.KubeRunning || st.Node != node || st.ClusterAppRunning != (n == node) {
				return false
			}
		}
		return true
	}
}

func waitTimeline(t *testing.T, a *siteAgent, within time.Duration, what string, match func(apps.TimelineEvent) bool) apps.TimelineEvent {
	t.Helper()
	return waitAnyTimeline(t, []*siteAgent{a}, within, a.node+": "+what, match)
}

// waitAnyTimeline waits until one of the agents' timelines holds a matching
// event (the stats leader may move between them) and returns it.
func waitAnyTimeline(t *testing.T, agents []*siteAgent, within time.Duration, what string, match func(apps.TimelineEvent) bool) apps.TimelineEvent {
	t.Helper()
	return until(t, within, what, func() (apps.TimelineEvent, bool) {
		for _, a := range agents {
			// A restarted agent has no apps part until it reaches the cluster.
			if appsPart := a.agent.Apps(); appsPart != nil {
				for _, e := range appsPart.Timeline() {
					if match(e) {
						return e, true
					}
				}
			}
		}
		return apps.TimelineEvent{}, false
	}, func(apps.TimelineEvent) string {
		var b strings.Builder
		b.WriteString("timelines:")
		for _, a := range agents {
			if appsPart := a.agent.Apps(); appsPart != nil {
				for _, e := range appsPart.Timeline() {
					fmt.Fprintf(&b, "\n  %s: %s %s %s %s", a.node, e.Time.Format(time.TimeOnly), e.Kind, e.App, e.Message)
				}
			}
		}
		return b.String()
	})
}

// waitSettled waits until every agent says it has nothing pending (no pass
// running, no retry or failover timer armed, no change queued: see
// apps.Pending), five looks in a row, with no request by any agent but
// its lease renewals and events between them. Quiet alone is no witness:
// a write held back by a timer (a failed apply retried after 5 s, a
// failover timer) comes after any quiet spell shorter than the timer; an
// armed timer shows here. The looks in a row only cover a write still in
// flight to another agent's watch.
func waitSettled(t *testing.T, agents map[string]*siteAgent) {
	t.Helper()
	const within = 120 * time.Second
	if last, ok := waitSettledFor(agents, within, 0, nil); !ok {
		t.Fatalf("the agents settled: not within %s; %s", within, last)
	}
}

// settling is what waitSettledFor saw on its last look.
type settling struct {
	pending map[string]apps.Pending // by node
	busy    []string                // what kept it from counting as quiet
}

func (s settling) String() string {
	return fmt.Sprintf("last look: pending %+v; busy %v", s.pending, s.busy)
}

// waitSettledFor is waitSettled within a time, with look called at every
// look (200 ms apart). A timer armed to fire more than beyond from now
// counts as settled: a hold that lapses later (a conflict's window) is no
// work in hand for a test that ends before it. It returns its last look
// and whether the agents settled.
func waitSettledFor(agents map[string]*siteAgent, within, beyond time.Duration, look func()) (settling, bool) {
	idleLooks := 0
	return poll(200*time.Millisecond, within, func() (settling, bool) {
		if look != nil {
			look()
		}
		last := settling{pending: map[string]apps.Pending{}}
		for n, a := range agents {
			appsPart := a.agent.Apps()
			if appsPart == nil {
				last.busy = append(last.busy, n+": not at the cluster yet") // a restarted agent
				continue
			}
			p := appsPart.Pending()
			last.pending[n] = p
			if beyond > 0 && p.RetryAt.After(time.Now().Add(beyond)) {
				p.RetryAt = time.Time{}
			}
			if !p.Idle() || p.Passes == 0 {
				last.busy = append(last.busy, n+": work pending")
			}
			for req := range a.counter.reset() {
				// Events trail the writes they report: not a sign of work.
				if !leaseRenewal(req) && !strings.HasSuffix(req, " events") {
					last.busy = append(last.busy, n+": "+req)
				}
			}
		}
		if len(last.busy) > 0 {
			idleLooks = 0
			return last, false
		}
		idleLooks++
		return last, idleLooks >= 5
	})
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

// logAgentsOnFailure logs the end of the nodes' agent logs in logDir, when
// the test has failed.
func logAgentsOnFailure(t *testing.T, logDir string, nodes ...string) {
	if !t.Failed() {
		return
	}
	for _, n := range nodes {
		if data, err := os.ReadFile(filepath.Join(logDir, n+".log")); err == nil {
			t.Logf("agent %s log (last 3000 bytes):\n%s", n, tail(string(data), 3000))
		}
	}
}

// logSiteOnFailure logs the end of each named process's log in a sitebox
// site's logs directory when the test failed: a site started for one test
// is removed with the test's temporary directory.
func logSiteOnFailure(t *testing.T, siteDir string, processes ...string) {
	if !t.Failed() {
		return
	}
	for _, name := range processes {
		data, err := os.ReadFile(filepath.Join(siteDir, "logs", name+".log"))
		if err != nil {
			t.Logf("%s: no log: %v", name, err)
			continue
		}
		t.Logf("%s log (last 4000 bytes):\n%s", name, tail(string(data), 4000))
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// waitPodJudged waits until the pod either runs (Running and Ready: nil) or
// carries a FailedAttachVolume event (returned): the simulators decided on it.
func waitPodJudged(t *testing.T, site *sitebox.TestSite, ns, name string, within time.Duration) *corev1.Event {
	t.Helper()
	core := site.Clients(t).Core.CoreV1()
	type judged struct {
		pod  *corev1.Pod
		held *corev1.Event
		err  error
	}
	return until(t, within, fmt.Sprintf("pod %s/%s ran or was held", ns, name), func() (judged, bool) {
		p, err := core.Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return judged{err: err}, false
		}
		if p.Status.Phase == corev1.PodRunning && kube.PodReady(p) {
			return judged{pod: p}, true
		}
		events, err := core.Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(p.UID) + ",reason=FailedAttachVolume"})
		if err != nil || len(events.Items) == 0 {
			return judged{pod: p, err: err}, false
		}
		return judged{pod: p, held: &events.Items[0]}, true
	}, func(j judged) string {
		if j.pod == nil {
			return fmt.Sprintf("the pod: %v", j.err)
		}
		return "the pod, no FailedAttachVolume event: " + podLine(*j.pod)
	}).held
}

// ---- What the site's pods and Events are, as waits see them ----

// podLine is one pod as a wait's failure shows it.
func podLine(p corev1.Pod) string {
	line := fmt.Sprintf("%s on %q %s ready=%v", p.Name, p.Spec.NodeName, p.Status.Phase, kube.PodReady(&p))
	if p.DeletionTimestamp != nil {
		line += " deleting"
	}
	return line
}

// podList is a listing of pods as a wait saw it.
type podList struct {
	items []corev1.Pod
	err   error
}

func listPods(cs kubernetes.Interface, ns string, opts metav1.ListOptions) podList {
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), opts)
	if err != nil {
		return podList{err: err}
	}
	return podList{items: pods.Items}
}

func (l podList) String() string {
	if l.err != nil {
		return "listing the pods: " + l.err.Error()
	}
	if len(l.items) == 0 {
		return "no pods"
	}
	lines := make([]string, len(l.items))
	for i, p := range l.items {
		lines[i] = podLine(p)
	}
	return "pods: " + strings.Join(lines, "; ")
}

// podsInDetail lists the pods in ns with each one's conditions and
// container states: a failing wait's evidence of why a pod is not running.
func podsInDetail(cs kubernetes.Interface, ns string) string {
	l := listPods(cs, ns, metav1.ListOptions{})
	if l.err != nil || len(l.items) == 0 {
		return l.String()
	}
	lines := make([]string, len(l.items))
	for i, p := range l.items {
		line := podLine(p)
		for _, c := range p.Status.Conditions {
			line += fmt.Sprintf(" %s=%s", c.Type, c.Status)
			if c.Reason != "" || c.Message != "" {
				line += fmt.Sprintf("(%s: %s)", c.Reason, c.Message)
			}
		}
		for _, cst := range p.Status.ContainerStatuses {
			line += fmt.Sprintf(" container %s restarts=%d state=%+v", cst.Name, cst.RestartCount, cst.State)
		}
		lines[i] = line
	}
	return "pods in " + ns + ": " + strings.Join(lines, "; ")
}

// waitPods waits until the pods in ns that opts selects satisfy cond, and
// returns them.
func waitPods(t *testing.T, cs kubernetes.Interface, ns string, opts metav1.ListOptions, within time.Duration, what string, cond func([]corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	return until(t, within, what, func() (podList, bool) {
		l := listPods(cs, ns, opts)
		return l, l.err == nil && cond(l.items)
	}, podList.String).items
}

// onlyPodReadyOn: one pod, Ready on node.
func onlyPodReadyOn(node string) func([]corev1.Pod) bool {
	return func(pods []corev1.Pod) bool {
		return len(pods) == 1 && pods[0].Spec.NodeName == node && kube.PodReady(&pods[0])
	}
}

// waitEvent waits until an Event in ns that opts selects matches, and
// returns it.
func waitEvent(t *testing.T, cs kubernetes.Interface, ns string, opts metav1.ListOptions, within time.Duration, what string, match func(corev1.Event) bool) corev1.Event {
	t.Helper()
	type seen struct {
		events []corev1.Event
		found  *corev1.Event
		err    error
	}
	return *until(t, within, what, func() (seen, bool) {
		evs, err := cs.CoreV1().Events(ns).List(context.Background(), opts)
		if err != nil {
			return seen{err: err}, false
		}
		for i, e := range evs.Items {
			if match(e) {
				return seen{found: &evs.Items[i]}, true
			}
		}
		return seen{events: evs.Items}, false
	}, func(s seen) string {
		if s.err != nil {
			return "listing the Events: " + s.err.Error()
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d Events (%s):", len(s.events), opts.FieldSelector)
		for _, e := range s.events {
			fmt.Fprintf(&b, "\n  %s %s from %s/%s: %s", e.Type, e.Reason, e.Source.Component, e.Source.Host, e.Message)
		}
		return b.String()
	}).found
}

// ---- Node agents (bootstrap) in network namespaces, with the k3s stand-in ----

// nodeAgent is one agent running in-process for a netns host.
type nodeAgent struct {
	host    *netns.Host
	dir     string
	agent   *agent.Agent
	config  string
	dataDir string
	socket  string
	// workloads are the directories its leave stops containers from.
	workloads workloads.Dirs
	// opts start the agent again on the same device (restart).
	opts agent.Options
}

// starts reads the stand-in's record of its starts.
func (n *nodeAgent) starts(t *testing.T) []time.Time {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(n.dataDir, "standin-starts"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	// Only whole lines count: the stand-in creates the file and then
	// writes its line, and a read between the two sees it empty (or a
	// line cut short).
	var out []time.Time
	whole := string(data[:bytes.LastIndexByte(data, '\n')+1])
	for _, line := range strings.Split(whole, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, strings.Fields(line)[0])
		if err != nil {
			t.Fatalf("stand-in record %q: %v", line, err)
		}
		out = append(out, ts)
	}
	return out
}

// waitK3sStarted waits until the stand-in has recorded a start of k3s (its
// first act), and returns the starts recorded.
func (n *nodeAgent) waitK3sStarted(t *testing.T) []time.Time {
	t.Helper()
	return until(t, 10*time.Second, n.host.Name+"'s k3s records its start", func() ([]time.Time, bool) {
		starts := n.starts(t)
		return starts, len(starts) > 0
	}, func([]time.Time) string {
		return fmt.Sprintf("no start recorded; the agent's state %+v", n.agent.State())
	})
}

func buildStandin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "k3s")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/sitecon/sitecon/test/k3sstandin").CombinedOutput()
	if err != nil {
		t.Fatalf("build k3s stand-in: %v\n%s", err, out)
	}
	return bin
}

func waitState(t *testing.T, n *nodeAgent, within time.Duration, what string, cond func(agent.State) bool) agent.State {
	t.Helper()
	return until(t, within, n.host.Name+" ("+what+")", func() (agent.State, bool) {
		st := n.agent.State()
		return st, cond(st)
	}, func(st agent.State) string {
		dump, _ := json.MarshalIndent(st, "", "  ")
		return "state:\n" + string(dump)
	})
}

// deviceRecords are the agent's records of the test device whose config
// is at configPath (its state directory: never the machine's own).
func deviceRecords(configPath string) formation.Records {
	return formation.Records{Dir: filepath.Join(filepath.Dir(configPath), "state")}
}

// startNodeAgent writes bundle's files for host h (after prepare, if set,
// has put whatever else the device holds beside them) and runs its agent
// with the k3s stand-in, reaching the cluster through kubeconfig, at the
// tests' short timings (tune changes them), until ctx ends.
func startNodeAgent(t *testing.T, ctx context.Context, wg *sync.WaitGroup, kubeconfig, standin string, h *netns.Host,
	bundle formation.JoinBundle, prepare func(configPath string), tune func(*agent.Options)) *nodeAgent {
	t.Helper()
	dir := t.TempDir()
	files, err := bundle.Files(dir, "")
	if err == nil {
		err = files.Write()
	}
	if err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(files.ConfigPath)
	}
	n := &nodeAgent{host: h, dir: dir, config: files.ConfigPath, dataDir: filepath.Join(dir, "k3s-data")}
	// Never the host's own k3s directories: a node that leaves stops the
	// containers run from there.
	n.workloads = workloads.Dirs{DataDir: n.dataDir, RunDir: filepath.Join(dir, "run", "k3s"),
		KubeletDir: filepath.Join(dir, "kubelet"), NetnsDir: filepath.Join(dir, "netns")}
	opts := agent.Options{
		ConfigPath: files.ConfigPath,
		StateDir:   deviceRecords(files.ConfigPath).Dir,
		K3sBin:     standin,
		K3sPaths:   k3s.Paths{ConfigFile: filepath.Join(dir, "k3s", "config.yaml"), DataDir: n.dataDir},
		K3sLogFile: filepath.Join(dir, "k3s.log"),
		Workloads:  n.workloads,
		SocketPath: filepath.Join(dir, "agent.sock"),
		Kubeconfig: kubeconfig,
		Env: config.Environment{
			InterfaceExists: func(name string) bool {
				return h.Do(func() error { _, err := net.InterfaceByName(name); return err }) == nil
			},
			ReadFile: os.ReadFile,
		},
		InNetNS:            h.Do,
		ConfigPollInterval: 100 * time.Millisecond,
		SeedBackoffMin:     100 * time.Millisecond,
		SeedBackoffMax:     500 * time.Millisecond,
		K3sBackoffMin:      100 * time.Millisecond,
		LeaderDurations:    apps.LeaderDurations{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 300 * time.Millisecond},
	}
	if tune != nil {
		tune(&opts)
	}
	n.socket = opts.SocketPath
	n.opts = opts
	n.run(t, ctx, wg)
	return n
}

// run starts (or starts again, after the last run's ctx ended and its wg
// was waited on) the device's agent with the same options, until ctx ends.
func (n *nodeAgent) run(t *testing.T, ctx context.Context, wg *sync.WaitGroup) {
	n.agent = agent.New(n.opts)
	a := n.agent
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := a.Run(ctx); err != nil {
			t.Errorf("agent %s: %v", n.host.Name, err)
		}
	}()
}

// ---- The console (or a command that asks questions) in tmux ----

// tmuxConsole runs the console in a detached tmux session, as a technician
// on an 80x24 terminal would see it.
type tmuxConsole struct {
	t       *testing.T
	session string
}

// startConsole runs the console on a colour terminal, whatever the
// environment of the test says about colour.
func startConsole(t *testing.T, args ...string) *tmuxConsole {
	t.Helper()
	return startConsoleWith(t, []string{"-u", "NO_COLOR"}, args...)
}

// startConsoleNoColor runs the console as a terminal with NO_COLOR set
// shows it: the selected row is marked "> " and the current tab bracketed.
func startConsoleNoColor(t *testing.T, args ...string) *tmuxConsole {
	t.Helper()
	return startConsoleWith(t, []string{"NO_COLOR=1"}, args...)
}

// startCommand runs a sitecon command on a terminal (its questions need
// one) and keeps the pane after it ends, with "exited N" as its last line.
func startCommand(t *testing.T, args ...string) *tmuxConsole {
	t.Helper()
	// The joined line is a shell command: what follows sitecon's arguments
	// runs once sitecon has exited.
	return startConsoleWith(t, []string{"-u", "NO_COLOR"}, append(args, ";", "echo", "exited", "$?;", "sleep", "3600")...)
}

func startConsoleWith(t *testing.T, colourEnv []string, args ...string) *tmuxConsole {
	t.Helper()
	_, err := exec.LookPath("tmux")
	prereq.Need(t, err == nil, "the console end-to-end test needs tmux")
	session := fmt.Sprintf("sitecon-e2e-%d", time.Now().UnixNano())
	// One shell command: tmux runs it with sh -c. The tmux server's own
	// environment (CI's, or an earlier session's) must not decide colour.
	cmdline := append([]string{"env", "-u", "CLICOLOR", "-u", "CLICOLOR_FORCE"}, colourEnv...)
	cmdline = append(cmdline, "HOME="+t.TempDir(), "KUBECONFIG=", "TERM=xterm-256color", sitecon)
	// The machine's own audit log (root-owned, under /var/log) is neither
	// read nor written by a test that does not name one: its records would
	// show on the events screen, and a demo's would change what a test sees.
	if !slices.Contains(args, "--audit-log") {
		end := slices.Index(args, ";")
		if end < 0 {
			end = len(args)
		}
		args = slices.Insert(slices.Clone(args), end, "--audit-log", filepath.Join(t.TempDir(), "audit.jsonl"))
	}
	cmdline = append(cmdline, args...)
	cmd := exec.Command("tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", strings.Join(cmdline, " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "kill-session", "-t", session).Run() })
	return &tmuxConsole{t: t, session: session}
}

func (c *tmuxConsole) keys(keys ...string) {
	c.t.Helper()
	if out, err := exec.Command("tmux", append([]string{"send-keys", "-t", c.session}, keys...)...).CombinedOutput(); err != nil {
		c.t.Fatalf("send-keys: %v\n%s", err, out)
	}
}

func (c *tmuxConsole) screen() string {
	out, err := exec.Command("tmux", "capture-pane", "-p", "-t", c.session).CombinedOutput()
	if err != nil {
		return ""
	}
	return string(out)
}

// waitScreen waits until the screen satisfies cond.
func (c *tmuxConsole) waitScreen(within time.Duration, what string, cond func(string) bool) string {
	c.t.Helper()
	return until(c.t, within, what, func() (string, bool) {
		s := c.screen()
		return s, cond(s)
	}, func(s string) string { return "screen:\n" + s })
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
