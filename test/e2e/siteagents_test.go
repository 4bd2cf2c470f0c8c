package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

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
// (see docs/SITEBOX.md, where the tests run faster than the field).
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
	// The VM consoles on the node's own address, as 127.0.0.1 is on a
	// device: the simulated nodes share this machine's.
	vncAddr, _, err := net.SplitHostPort(statusAddr)
	if err != nil {
		t.Fatal(err)
	}
	opts := agent.Options{
		VNCBindAddress: vncAddr, NodeKubeconfig: site.NodeKubeconfig(node), NodeClientCA: site.NodeClientCA(node),
		NoBootstrap: true, NodeName: node, RESTConfig: counter.wrap(site.Config),
		SocketPath: filepath.Join(logDir, node+".sock"),
		ClusterID:  site.ClusterID, ClusterToken: token, StatusAddr: statusAddr,
		Apps: apps.Options{
			AppsDir: appsDir, StateDir: filepath.Join(logDir, node+"-state"),
			ProbeDial: lostDevice(counter, guardDials.dial(node)),
			// The fence on, as on a device (the leader counts on it):
			// kwok's pods run no process here, so it stops nothing but a
			// test's stand-in workloads (podWorkload).
		},
		Log: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if tune != nil {
		tune(&opts)
	}
	return runSiteAgent(t, node, logDir, logFile, counter, opts)
}

// liveAgents are the in-process agents running, with the top-level test
// that started each: an agent a finished test left running leads (as
// "node-a" beside the next test's node-a) and writes the cluster-wide
// state from its own config, which the next test then fights.
var liveAgents = struct {
	sync.Mutex
	by map[*siteAgent]string
}{by: map[*siteAgent]string{}}

// stopAgentsLeftRunning fails t for each agent an earlier top-level test
// left running, and stops it.
func stopAgentsLeftRunning(t testing.TB) {
	t.Helper()
	mine := strings.SplitN(t.Name(), "/", 2)[0]
	liveAgents.Lock()
	var left []*siteAgent
	for sa, test := range liveAgents.by {
		if test != mine {
			t.Errorf("an agent for %s that %s started still runs: a test stops the agents it starts (stopAgentsWithTest)", sa.node, test)
			left = append(left, sa)
		}
	}
	liveAgents.Unlock()
	for _, sa := range left {
		sa.stop()
	}
}

// runSiteAgent runs an in-process agent until the test stops or loses it.
func runSiteAgent(t testing.TB, node, logDir string, logFile *os.File, counter *requestCounter, opts agent.Options) *siteAgent {
	stopAgentsLeftRunning(t)
	a := agent.New(opts)
	ctx, cancel := context.WithCancel(context.Background())
	sa := &siteAgent{node: node, agent: a, counter: counter, cancel: cancel, done: make(chan struct{}), socket: filepath.Join(logDir, node+".sock")}
	liveAgents.Lock()
	liveAgents.by[sa] = strings.SplitN(t.Name(), "/", 2)[0]
	liveAgents.Unlock()
	go func() {
		defer close(sa.done)
		defer func() {
			liveAgents.Lock()
			delete(liveAgents.by, sa)
			liveAgents.Unlock()
		}()
		defer logFile.Close()
		if err := a.Run(ctx); err != nil {
			t.Errorf("agent %s: %v", node, err)
		}
	}()
	return sa
}

// stopAgentsWithTest stops agents when t ends, before the directories t
// made for them are removed (an agent running on writes into them as they
// go). An agent started in a subtest is the caller's to stop: later
// subtests may use it.
func stopAgentsWithTest(t testing.TB, agents map[string]*siteAgent) {
	t.Cleanup(func() {
		for _, a := range agents {
			a.stop()
		}
	})
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
	// cutOff, when set, is the rest of the device's cut-off group: the
	// API server does not answer it, and of the other devices it reaches
	// only these addresses (host:port); the rest are silent to it.
	cutOff atomic.Pointer[[]string]
}

func (c *requestCounter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if c.lost.Load() {
				return nil, errors.New("the device is lost: nothing it sends arrives")
			}
			if c.cutOff.Load() != nil {
				return nil, errors.New("the device is cut off from the API server")
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

// fenceContactCheck is the fence watch's readiness check of the API
// server, once a second whatever the cluster does (apps.FenceWatch): not
// a sign of work, and no LIST.
func fenceContactCheck(req string) bool { return req == "GET /readyz" }

// leaseRenewal is the one request an idle agent makes besides the fence's
// contact check: the stats-leader election reading and renewing its Lease.
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
		if group := counter.cutOff.Load(); group != nil && !slices.Contains(*group, addr) {
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
	srv := httptest.NewUnstartedServer(config.LifeProofHandler(key, node, nil))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	var once sync.Once
	stop = func() { once.Do(srv.Close) }
	t.Cleanup(stop)
	return stop
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

func waitAgents(t testing.TB, agents []*siteAgent, app string, within time.Duration, what string, cond func(agentView) bool) agentView {
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
				if !leaseRenewal(req) && !fenceContactCheck(req) && !strings.HasSuffix(req, " events") {
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
