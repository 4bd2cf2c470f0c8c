package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	lhclientset "github.com/longhorn/longhorn-manager/k8s/pkg/client/clientset/versioned"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/chaos"
	"github.com/sitecon/sitecon/test/netns"
	"github.com/sitecon/sitecon/test/prereq"
	"github.com/sitecon/sitecon/test/sitebox"
	"github.com/sitecon/sitecon/test/sitebox/clockstep"
	"github.com/sitecon/sitecon/test/syncbuf"
)

// The fault explorer's harness (issue 36 §1): a bootstrap-mode site (each
// node's agent bootstrapping for real in its own namespace, the k3s
// stand-in running its etcd member, the fence on) with the demo's apps
// (auto and pinned, VMs and containers, each with a three-replica Longhorn
// volume) and one auto container app with no volume, and the container
// runtime simulator, so that every pod a node
// runs is a real process. A schedule (test/chaos) is staged step by step
// with sitebox's faults and sitecon's own commands, while a checker reads
// the invariants from outside the product: the processes in the nodes'
// cgroups, the API server, etcd's own member list.
//
//  1. no auto app has live processes on two nodes at once;
//  2. no sitecon action leaves etcd without quorum;
//  3. one cluster: etcd's cluster ID never changes, and no node's k3s
//     starts with cluster-init after the first bring-up;
//  4. no sitecon action takes away a volume's last healthy replica;
//  5. within chaosHealBound of the last heal every node is Ready, every
//     app runs exactly once (a live process on one node) and every volume
//     is healthy;
//  6. while 1-4 are broken, `sitecon status` does not say the site is
//     healthy.

// chaosHealBound is invariant 5's bound.
const chaosHealBound = 3 * time.Minute

// chaosTimings are the agents': apps move 8 s after their node is lost,
// the guard times 16 s and the fence's bound follows from it.
var chaosTimings = sitebox.QuickAgentTimings(8 * time.Second)

// chaosSite is a started site for schedules, one after the other.
type chaosSite struct {
	site   *sitebox.TestSite
	cs     kubernetes.Interface
	lh     lhclientset.Interface
	nodes  []string
	auto   []string          // the apps the cluster may move
	pinned map[string]string // pinned app → its node
	all    []string
	// uidApp maps every app pod ever seen to its app: a force-deleted
	// pod's process may outlive its object.
	mu     sync.Mutex
	uidApp map[string]string
	// clusterID is etcd's, read at the first bring-up.
	clusterID uint64
	// initStarts counts each node's k3s starts with cluster-init.
	initStarts map[string]int
	// inNodeKubeconfig is the site's admin kubeconfig as a command run in
	// a node's namespace reaches the API server: through the node's k3s
	// on 127.0.0.1:6443, as on a device.
	inNodeKubeconfig string
}

// chaosAppWithoutVolume is the chaos site's auto container app that has
// no volume.
const chaosAppWithoutVolume = "edge-cache"

// writeAppWithoutVolume writes the config of an auto container app with no
// volume, designated to node, into an apps directory.
func writeAppWithoutVolume(dir, name, node string) error {
	cfg := apps.AppConfig{
		UUID: "5b0f7c1e-2d3a-4b5c-8d9e-0f1a2b3c4d99", DisplayName: name, Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/" + name + ":1.0", DesignatedNodeID: sitebox.NodeUUID(node), Affinity: apps.AffinityPreferred,
		Resources: apps.AppResources{CPU: "100m", Memory: "64Mi"},
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "apps", name+".json"), append(data, '\n'), 0o644)
}

// startChaosSite starts a bootstrap-mode site of n nodes (the first three
// servers) with the demo apps and the runtime simulator, and waits until
// it is whole.
func startChaosSite(t *testing.T, n int) *chaosSite {
	t.Helper()
	return startChaosSiteWith(t, n, false)
}

// startChaosSiteWith starts a chaos site whose nodes' clocks can be
// stepped (clocks: its sitecon and k3s stand-in built with sitebox's
// clock overlay) or not (the binaries the other tests run).
func startChaosSiteWith(t *testing.T, n int, clocks bool) *chaosSite {
	t.Helper()
	netns.Skip(t)
	_, v1 := os.Stat("/sys/fs/cgroup/pids/cgroup.procs")
	_, v2 := os.Stat("/sys/fs/cgroup/cgroup.procs")
	prereq.Need(t, v1 == nil || v2 == nil, "the runtime simulator needs a cgroup hierarchy (/sys/fs/cgroup/pids or cgroup v2)")
	bins := buildSiteboxCLI(t)
	opts := sitebox.TestOptions(t.TempDir())
	opts.Bootstrap, opts.Nodes = true, n
	opts.Runtime = filepath.Join(bins, "sitebox")
	opts.StateDisks = true
	site, err := sitebox.StartTestSite(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(site.Stop)
	cs := &chaosSite{site: site, cs: clientset(t, site), lh: longhornClient(t, site), pinned: map[string]string{}, uidApp: map[string]string{}, initStarts: map[string]int{}}
	for _, node := range site.Nodes {
		cs.nodes = append(cs.nodes, node.Name)
	}
	t.Cleanup(func() {
		var logs []string
		for _, node := range cs.nodes {
			logs = append(logs, "agent-"+node, "k3s-"+node, sitebox.RuntimeProcess(node))
		}
		logSiteOnFailure(t, site.Dir, logs...)
	})
	site.K3sStandin = filepath.Join(bins, "k3sstandin")
	agentBin := sitecon
	if clocks {
		agentBin, site.K3sStandin = buildClockedBinaries(t)
	}
	admin, err := os.ReadFile(site.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cs.inNodeKubeconfig = filepath.Join(t.TempDir(), "in-node.kubeconfig")
	inNode := strings.Replace(string(admin), fmt.Sprintf("https://127.0.0.1:%d", site.APIPort), "https://127.0.0.1:6443", 1)
	if err := os.WriteFile(cs.inNodeKubeconfig, []byte(inNode), 0o600); err != nil {
		t.Fatal(err)
	}
	appsDir := t.TempDir()
	if err := sitebox.WriteDemoApps(appsDir); err != nil {
		t.Fatal(err)
	}
	for _, a := range sitebox.DemoApps {
		cs.all = append(cs.all, a.Name)
		if a.Pinned {
			cs.pinned[a.Name] = a.Node
		} else {
			cs.auto = append(cs.auto, a.Name)
		}
	}
	// And an auto app with no volume: no attachment holds its
	// replacement, only the failover's own rule does.
	if err := writeAppWithoutVolume(appsDir, chaosAppWithoutVolume, "node-c"); err != nil {
		t.Fatal(err)
	}
	cs.all, cs.auto = append(cs.all, chaosAppWithoutVolume), append(cs.auto, chaosAppWithoutVolume)
	// Every app pod's UID to its app, from a watch kept all along.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory := informers.NewSharedInformerFactoryWithOptions(cs.cs, 0, informers.WithNamespace(kube.AppNamespace))
	remember := func(o any) {
		if p, ok := o.(*corev1.Pod); ok {
			if name := p.Labels[kube.LabelAppName]; name != "" {
				cs.mu.Lock()
				cs.uidApp[string(p.UID)] = name
				cs.mu.Unlock()
			}
		}
	}
	if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: remember, UpdateFunc: func(_, o any) { remember(o) },
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())

	began := time.Now()
	if err := site.StartAgents(agentBin, appsDir, chaosTimings); err != nil {
		t.Fatal(err)
	}
	until(t, 3*time.Minute, "the chaos site's first bring-up", func() (string, bool) {
		why := cs.whole(ctx)
		return why, why == ""
	}, func(s string) string { return s })
	t.Logf("chaos site: %d nodes whole %s after the agents started", n, time.Since(began).Round(100*time.Millisecond))
	id, err := cs.etcdClusterID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs.clusterID = id
	for _, node := range cs.nodes {
		cs.initStarts[node] = cs.clusterInits(t, node)
	}
	return cs
}

// buildClockedBinaries builds sitecon and the k3s stand-in with sitebox's
// clock overlay (test/sitebox/clockstep), once per test process: the
// first build compiles the whole tree again (minutes; go's build cache
// keeps it for the next).
func buildClockedBinaries(t *testing.T) (siteconBin, standinBin string) {
	t.Helper()
	clockedBuild.Do(func() {
		dir := filepath.Join(binDir, "clocked")
		overlay, err := clockstep.Overlay("go", filepath.Join(dir, "overlay"))
		if err != nil {
			clockedBuild.err = err
			return
		}
		clockedBuild.sitecon, clockedBuild.standin = filepath.Join(dir, "sitecon"), filepath.Join(dir, "k3s")
		for bin, pkg := range map[string]string{clockedBuild.sitecon: "github.com/sitecon/sitecon", clockedBuild.standin: "github.com/sitecon/sitecon/test/k3sstandin"} {
			if out, err := exec.Command("go", "build", "-overlay", overlay, "-o", bin, pkg).CombinedOutput(); err != nil {
				clockedBuild.err = fmt.Errorf("build %s with the clock overlay: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if clockedBuild.err != nil {
		t.Fatal(clockedBuild.err)
	}
	return clockedBuild.sitecon, clockedBuild.standin
}

var clockedBuild struct {
	sync.Once
	sitecon, standin string
	err              error
}

// clusterInits counts node's k3s starts with cluster-init.
func (c *chaosSite) clusterInits(t *testing.T, node string) int {
	n := 0
	for _, s := range standinStarts(t, c.site.K3sDataDir(node)) {
		if strings.Contains(s.line, "cluster-init") {
			n++
		}
	}
	return n
}

// copies are, per app, the nodes where it has a live process now.
func (c *chaosSite) copies() (map[string][]string, error) {
	out := map[string][]string{}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, node := range c.nodes {
		procs, err := c.site.RuntimeCopies(node)
		if err != nil {
			return nil, err
		}
		for uid := range procs {
			if app := c.uidApp[uid]; app != "" && !slices.Contains(out[app], node) {
				out[app] = append(out[app], node)
			}
		}
	}
	return out, nil
}

// etcdClient reaches the members on the machine's loopback, where they
// listen whatever the nodes' namespaces do.
func (c *chaosSite) etcdClient(ctx context.Context) (*clientv3.Client, error) {
	var endpoints []string
	for _, m := range c.site.Etcd {
		endpoints = append(endpoints, m.ClientURL())
	}
	// Its log (zap's) says nothing the checker does not: a member without
	// quorum is what the checker looks for.
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Context: ctx, Logger: zap.NewNop()})
}

// etcdClusterID is etcd's own cluster ID, from a linearizable member list
// (it needs a quorum).
func (c *chaosSite) etcdClusterID(ctx context.Context) (uint64, error) {
	cli, err := c.etcdClient(ctx)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return 0, err
	}
	return resp.Header.ClusterId, nil
}

// etcdQuorate: a linearizable read succeeds, which only a quorum serves.
func (c *chaosSite) etcdQuorate(ctx context.Context) bool {
	cli, err := c.etcdClient(ctx)
	if err != nil {
		return false
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "/sitecon-chaos-quorum-probe")
	return err == nil
}

// volumes are the volumes' robustness, by name; nil when they cannot be
// read.
func (c *chaosSite) volumes(ctx context.Context) map[string]string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	list, err := c.lh.LonghornV1beta2().Volumes(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, v := range list.Items {
		out[v.Name] = string(v.Status.Robustness)
	}
	return out
}

// whole says what is not yet as invariant 5 wants it; "" when all is.
func (c *chaosSite) whole(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nodes, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "nodes: " + err.Error()
	}
	if len(nodes.Items) != len(c.nodes) {
		return fmt.Sprintf("%d nodes, want %d", len(nodes.Items), len(c.nodes))
	}
	for i := range nodes.Items {
		if !kube.NodeIsReady(&nodes.Items[i]) {
			return "node " + nodes.Items[i].Name + " not Ready"
		}
	}
	// Every agent joined, READY, and seeing every app run: its cache
	// holds its node's pods (what its fence stops when cut off).
	for _, n := range c.nodes {
		st, err := bootAgentState(c.site, n)
		if err != nil {
			return n + "'s agent: " + err.Error()
		}
		if st.Phase != agent.PhaseJoined {
			return fmt.Sprintf("%s's agent is %s (%s)", n, st.Phase, st.LastError)
		}
		var ns apps.PublishedNode
		if err := getSocketErr(c.site.AgentSocket(n), localapi.PathNode, &ns); err != nil {
			return n + "'s agent: " + err.Error()
		}
		if ns.Status != apps.PublishedReady {
			return fmt.Sprintf("%s's agent says %s (%s)", n, ns.Status, ns.Reason)
		}
		var seen []apps.PublishedApp
		if err := getSocketErr(c.site.AgentSocket(n), localapi.PathApps, &seen); err != nil {
			return n + "'s agent apps: " + err.Error()
		}
		running := 0
		for _, a := range seen {
			if a.KubeStatus == apps.KubeRunning {
				running++
			}
		}
		if running < len(c.all) {
			return fmt.Sprintf("%s's agent sees %d of %d apps running", n, running, len(c.all))
		}
	}
	copies, err := c.copies()
	if err != nil {
		return err.Error()
	}
	for _, app := range c.all {
		where := copies[app]
		if len(where) != 1 {
			return fmt.Sprintf("app %s runs on %v, want one node", app, where)
		}
		if node, ok := c.pinned[app]; ok && where[0] != node {
			return fmt.Sprintf("pinned app %s runs on %s, want %s", app, where[0], node)
		}
	}
	vols, err := c.lh.LonghornV1beta2().Volumes(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "volumes: " + err.Error()
	}
	if len(vols.Items) < len(sitebox.DemoApps) {
		return fmt.Sprintf("%d volumes, want %d (one per demo app)", len(vols.Items), len(sitebox.DemoApps))
	}
	for _, v := range vols.Items {
		if v.Status.Robustness != "healthy" {
			return fmt.Sprintf("volume %s is %s (%s)", v.Name, v.Status.Robustness, v.Status.State)
		}
	}
	return ""
}

// violation is one invariant seen broken.
type violation struct {
	invariant int
	at        time.Duration // since the schedule began
	step      int           // the step staged last (1-based; 0 before any)
	what      string
}

func (v violation) String() string {
	return fmt.Sprintf("invariant %d at %s (during step %d): %s", v.invariant, v.at.Round(100*time.Millisecond), v.step, v.what)
}

// chaosRun is one schedule's outcome.
type chaosRun struct {
	schedule   chaos.Schedule
	violations []violation
	faults     map[chaos.Kind]int
	actions    map[string]int // "drain ok", "migrate refused", ...
	heal       time.Duration  // from the last heal to invariant 5
	healed     bool
	// ranOn are the nodes each app was seen running on.
	ranOn map[string][]string
	// notChecked counts, per invariant, the actions it could not be
	// checked for (etcd without quorum before, volumes unreadable): said,
	// never counted as held.
	notChecked map[int]int
}

// run stages s on the site and checks the invariants all along, then
// heals everything (every cut, drop and pause undone, every node powered
// on and uncordoned) and waits for invariant 5.
func (c *chaosSite) run(t *testing.T, s chaos.Schedule) chaosRun {
	t.Logf("%s", s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := chaosRun{schedule: s, faults: map[chaos.Kind]int{}, actions: map[string]int{}, ranOn: map[string][]string{}, notChecked: map[int]int{}}
	var mu sync.Mutex
	began := time.Now()
	step := 0
	// faultsSince counts the fault steps staged: an action is judged on
	// quorum and volumes only when no fault came while it ran.
	faultsStaged := 0
	report := func(inv int, what string) {
		mu.Lock()
		v := violation{invariant: inv, at: time.Since(began), step: step, what: what}
		res.violations = append(res.violations, v)
		mu.Unlock()
		t.Errorf("VIOLATION %s", v)
		if inv <= 4 {
			// Invariant 6: the site is not healthy, and sitecon must not
			// say it is.
			out, err := exec.Command(sitecon, "status", "--kubeconfig", c.site.Kubeconfig(), "--timeout", "10s").CombinedOutput()
			if err == nil {
				mu.Lock()
				res.violations = append(res.violations, violation{invariant: 6, at: time.Since(began), step: v.step, what: "sitecon status says healthy (exit 0) while " + v.String() + ":\n" + tail(string(out), 1500)})
				mu.Unlock()
				t.Errorf("VIOLATION invariant 6: sitecon status exits 0 while invariant %d is broken", inv)
			}
		}
	}

	// The checker: every 200 ms the processes (1), every 2 s etcd's
	// cluster ID (3).
	var checker sync.WaitGroup
	checker.Add(1)
	go func() {
		defer checker.Done()
		twice := map[string]bool{}
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		lastID := time.Time{}
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			copies, err := c.copies()
			if err != nil {
				t.Errorf("read the nodes' processes: %v", err)
				return
			}
			mu.Lock()
			for app, on := range copies {
				for _, n := range on {
					if !slices.Contains(res.ranOn[app], n) {
						res.ranOn[app] = append(res.ranOn[app], n)
					}
				}
			}
			mu.Unlock()
			for _, app := range c.auto {
				on := copies[app]
				if len(on) > 1 && !twice[app] {
					report(1, fmt.Sprintf("auto app %s has live processes on %v", app, on))
				}
				twice[app] = len(on) > 1
			}
			if time.Since(lastID) >= 2*time.Second {
				lastID = time.Now()
				if id, err := c.etcdClusterID(ctx); err == nil && id != c.clusterID {
					report(3, fmt.Sprintf("etcd's cluster ID is %x, was %x", id, c.clusterID))
				}
			}
		}
	}()

	var actions sync.WaitGroup
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	// removalsAsked are the nodes a removal was asked of: each is looked
	// for at the end, and joined anew if it went.
	removalsAsked := map[string]bool{}
	// actWith runs an action (run: its output and whether it failed) and
	// then checks invariants 2 and 4 across it.
	actWith := func(kind chaos.Kind, args []string, run func() ([]byte, error)) {
		mu.Lock()
		before := faultsStaged
		mu.Unlock()
		actions.Add(1)
		// In its own goroutine, the state before it read first: the
		// schedule's holds do not wait on those reads (3 s each when the
		// API server or etcd does not answer).
		go func() {
			defer actions.Done()
			quorate, vols := c.etcdQuorate(ctx), c.volumes(ctx)
			out, err := run()
			outcome := "ok"
			if err != nil {
				outcome = "refused or failed"
			}
			mu.Lock()
			res.actions[string(kind)+" "+outcome]++
			quiet := faultsStaged == before
			if kind == chaos.Remove {
				// Whatever it said: a removal may fail after the Node went.
				removalsAsked[args[2]] = true
			}
			mu.Unlock()
			// What it was: its command and its object ("node remove node-d").
			named := args[:2]
			if kind == chaos.Remove || kind == chaos.Leave {
				named = args[:3]
			}
			t.Logf("sitecon %s: %s: %s", strings.Join(named, " "), outcome, tail(strings.TrimSpace(string(out)), 1200))
			if err != nil || !quiet || ctx.Err() != nil {
				return
			}
			what := "sitecon " + strings.Join(named, " ")
			notChecked := func(inv int, why string) {
				mu.Lock()
				res.notChecked[inv]++
				mu.Unlock()
				t.Logf("invariant %d not checked for %s: %s", inv, what, why)
			}
			switch {
			case !quorate:
				notChecked(2, "etcd had no quorum before it")
			case !c.etcdQuorate(ctx):
				report(2, "etcd lost its quorum with "+what)
			}
			after := c.volumes(ctx)
			if vols == nil || after == nil {
				notChecked(4, "the volumes could not be read before or after it")
				return
			}
			for name, was := range vols {
				if was != "faulted" && after[name] == "faulted" {
					report(4, fmt.Sprintf("volume %s turned faulted with %s", name, what))
				}
			}
		}()
	}
	act := func(kind chaos.Kind, args ...string) {
		args = append(args, "--yes", "--kubeconfig", c.site.Kubeconfig(), "--audit-log", audit)
		actWith(kind, args, func() ([]byte, error) { return exec.CommandContext(ctx, sitecon, args...).CombinedOutput() })
	}

	for i, st := range s.Steps {
		mu.Lock()
		step = i + 1
		if !st.Kind.Action() {
			faultsStaged++
		}
		mu.Unlock()
		t.Logf("%s step %d: %s", time.Since(began).Round(100*time.Millisecond), i+1, st)
		var err error
		switch st.Kind {
		case chaos.Cut:
			err = c.site.Cut(st.Nodes)
		case chaos.Drop:
			err = c.site.Drop(st.Nodes[0], st.Nodes[1])
		case chaos.Pause, chaos.Resume:
			var part sitebox.PausePart
			if part, err = sitebox.ParsePausePart(st.Part); err == nil {
				if st.Kind == chaos.Pause {
					err = c.site.Pause(st.Nodes[0], part)
				} else {
					err = c.site.Resume(st.Nodes[0], part)
				}
			}
		case chaos.PowerOff:
			err = c.site.PowerOff(st.Nodes...)
		case chaos.PowerOn:
			err = c.site.PowerOn(st.Nodes[0])
		case chaos.RestartAgent:
			if err = c.site.KillAgent(st.Nodes[0]); err == nil {
				err = c.site.RestartAgentWith(st.Nodes[0], st.Flags...)
			}
		case chaos.FillDisk:
			err = c.site.FillDisk(st.Nodes[0])
		case chaos.StepClock:
			err = c.site.StepClock(st.Nodes[0], st.Clock)
		case chaos.Heal:
			err = c.site.Heal()
		case chaos.Drain:
			act(st.Kind, "drain", st.Nodes[0], "--timeout", "60s")
		case chaos.Uncordon:
			act(st.Kind, "uncordon", st.Nodes[0])
		case chaos.Migrate:
			act(st.Kind, "migrate", st.App, st.Nodes[0], "--timeout", "60s")
		case chaos.ReturnHome:
			act(st.Kind, "return-home", st.App, "--timeout", "60s")
		case chaos.DrainRequest:
			node := st.Nodes[0]
			actWith(st.Kind, []string{"drain-request", node}, func() ([]byte, error) { return c.drainRequestAndReboot(ctx, t, node) })
		case chaos.Maintenance:
			target := []string{"--all"}
			if len(st.Nodes) > 0 {
				target = st.Nodes[:1]
			}
			args := append(append([]string{"maintenance"}, target...), "--yes", "--step-timeout", "90s", "--kubeconfig", c.site.Kubeconfig(), "--audit-log", audit)
			actWith(st.Kind, args, func() ([]byte, error) { return c.maintenanceWalk(ctx, t, args) })
		case chaos.Remove:
			// The name typed, as every removal asks; --force not given.
			act(st.Kind, "node", "remove", st.Nodes[0], "--confirm", st.Nodes[0], "--timeout", "60s")
		case chaos.Leave:
			node := st.Nodes[0]
			actWith(st.Kind, []string{"agent", "leave", node}, func() ([]byte, error) { return c.leave(ctx, node, audit) })
		}
		if err != nil {
			// A shrunk schedule may hold a step that no longer applies
			// (a node powered on that was never off): said, not staged.
			t.Logf("step %d not staged: %v", i+1, err)
		} else if !st.Kind.Action() {
			res.faults[st.Kind]++
			if st.Kind == chaos.RestartAgent && len(st.Flags) > 0 {
				res.faults["restart-agent with "+chaos.Kind(strings.Join(st.Flags, " "))]++
			}
		}
		select {
		case <-time.After(st.Hold): // the schedule's own hold, not a wait for a condition
		case <-ctx.Done():
		}
	}

	// The last heal: faults undone, every node on, the actions done, every
	// node uncordoned (the technician's end of the incident).
	mu.Lock()
	step = len(s.Steps) + 1
	mu.Unlock()
	healStart := time.Now()
	if err := c.site.Heal(); err != nil {
		t.Errorf("heal: %v", err)
	}
	for _, n := range c.nodes {
		if err := c.site.PowerOn(n); err != nil {
			t.Errorf("power on %s: %v", n, err)
		}
	}
	actions.Wait()
	for _, n := range c.nodes {
		if err := c.joinAgain(ctx, t, n, removalsAsked[n]); err != nil {
			t.Errorf("%s joining again: %v", n, err)
		}
	}
	for _, n := range c.nodes {
		_ = exec.Command(sitecon, "uncordon", n, "--yes", "--kubeconfig", c.site.Kubeconfig(), "--audit-log", audit).Run()
	}
	var last, said string
	for time.Since(healStart) < chaosHealBound {
		if last = c.whole(ctx); last == "" {
			res.healed, res.heal = true, time.Since(healStart)
			break
		}
		// What the site waits for, each time it changes: where a slow
		// heal spends its time.
		if last != said {
			t.Logf("%s after the last heal: %s", time.Since(healStart).Round(100*time.Millisecond), last)
			said = last
		}
		time.Sleep(time.Second) // polling the site's state, bounded by chaosHealBound
	}
	if !res.healed {
		report(5, fmt.Sprintf("not whole %s after the last heal: %s", chaosHealBound, last))
	}
	for _, n := range c.nodes {
		if got := c.clusterInits(t, n); got != c.initStarts[n] {
			report(3, fmt.Sprintf("%s's k3s started with cluster-init %d more times", n, got-c.initStarts[n]))
		}
	}
	cancel()
	checker.Wait()
	t.Logf("schedule of seed %d: %d violations, whole %s after the last heal", s.Seed, len(res.violations), res.heal.Round(100*time.Millisecond))
	return res
}

// chaosTable is make chaos's summary of runs.
func chaosTable(runs []chaosRun) string {
	var b strings.Builder
	faults, actions := map[string]int{}, map[string]int{}
	perInvariant, notChecked := map[int]int{}, map[int]int{}
	var heals []time.Duration
	for _, r := range runs {
		for k, n := range r.faults {
			faults[string(k)] += n
		}
		for k, n := range r.actions {
			actions[k] += n
		}
		for _, v := range r.violations {
			perInvariant[v.invariant]++
		}
		for inv, n := range r.notChecked {
			notChecked[inv] += n
		}
		if r.healed {
			heals = append(heals, r.heal)
		}
	}
	row := func(k, v string) { fmt.Fprintf(&b, "| %s | %s |\n", k, v) }
	b.WriteString("| | |\n|---|---|\n")
	row("schedules", fmt.Sprint(len(runs)))
	row("faults injected", joinCounts(faults))
	row("actions", joinCounts(actions))
	for inv := 1; inv <= 6; inv++ {
		v := fmt.Sprint(perInvariant[inv])
		if n := notChecked[inv]; n > 0 {
			v += fmt.Sprintf(" (not checked for %d actions: could not look)", n)
		}
		row(fmt.Sprintf("violations of invariant %d", inv), v)
	}
	slices.Sort(heals)
	if len(heals) > 0 {
		row("whole after the last heal, p50 / max", fmt.Sprintf("%s / %s", heals[len(heals)/2].Round(100*time.Millisecond), heals[len(heals)-1].Round(100*time.Millisecond)))
	}
	return b.String()
}

func joinCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// drainRequestAndReboot is a device's drain request and its reboot, as
// EVE's base OS update makes them: the request to node's agent through its
// socket, waited for; drained, the node powered off and on again (a new
// boot ID, which ends the request and its cordon). A request that failed
// or took too long is called off, as the requester gives up.
func (c *chaosSite) drainRequestAndReboot(ctx context.Context, t *testing.T, node string) ([]byte, error) {
	socket := c.site.AgentSocket(node)
	out, err := exec.CommandContext(ctx, sitecon, "agent", "drain-request", "--socket", socket, "--requester", "chaos", "--reason", "base OS update", "--wait", "--timeout", "90s").CombinedOutput()
	if err != nil {
		cancelOut, _ := exec.CommandContext(ctx, sitecon, "agent", "drain-request", "--socket", socket, "--requester", "chaos", "--cancel").CombinedOutput()
		return append(out, cancelOut...), err
	}
	if err := c.site.PowerOff(node); err != nil {
		return append(out, "reboot: "+err.Error()...), err
	}
	select {
	case <-time.After(5 * time.Second): // the device's reboot, not a wait for a condition
	case <-ctx.Done():
	}
	if err := c.site.PowerOn(node); err != nil {
		// Cut off or paused meanwhile: it boots at the last heal.
		t.Logf("drain-request %s: the reboot's power-on waits for the heal: %v", node, err)
	}
	return append(out, "rebooted"...), nil
}

// leave runs sitecon agent leave on node itself, in its namespace as on
// the device: its own config, state directory, agent socket and k3s data
// (a server's etcd member through its k3s), the cluster read through its
// k3s. Without --force: a leave the preflight only warns about is
// stopped, as one it refuses.
func (c *chaosSite) leave(ctx context.Context, node, audit string) ([]byte, error) {
	args := []string{"netns", "exec", c.site.Netns(node), sitecon, "agent", "leave",
		"--config", c.site.ClusterConfig(node), "--state-dir", c.site.StateDir(node),
		"--agent-socket", c.site.AgentSocket(node), "--k3s-data-dir", c.site.K3sDataDir(node),
		"--etcd-endpoint", "http://127.0.0.1:2379", "--kubeconfig", c.inNodeKubeconfig,
		"--audit-log", audit, "--timeout", "60s", "--yes"}
	return exec.CommandContext(ctx, "ip", args...).CombinedOutput()
}

// joinAgain brings node back after the schedule took it out of the
// cluster, as the technician does once the incident is over: a node that
// left is let join again (its leave request removed: its agent joins at
// its next poll); a node removed is joined anew as the same device: its
// power cut (the device wiped), its records of the old membership gone,
// its Node registered again by its kubelet, then booted. Nothing for a
// node that is a member. askedRemoved: a removal of node was asked; only
// then is its Node looked for, once the API server answers again (the
// last heal may have just brought its quorum back).
func (c *chaosSite) joinAgain(ctx context.Context, t *testing.T, node string, askedRemoved bool) error {
	records := formation.Records{Dir: c.site.StateDir(node)}
	if _, err := os.Stat(records.LeaveRequestFile()); err == nil {
		t.Logf("%s left: its leave request removed, it joins again", node)
		if err := os.Remove(records.LeaveRequestFile()); err != nil {
			return err
		}
	}
	if !askedRemoved {
		return nil
	}
	var err error
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		getCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = c.cs.CoreV1().Nodes().Get(getCtx, node, metav1.GetOptions{})
		cancel()
		if err == nil || apierrors.IsNotFound(err) {
			break
		}
		time.Sleep(time.Second) // polling the API server's return, bounded by the deadline
	}
	if !apierrors.IsNotFound(err) {
		return err
	}
	t.Logf("%s was removed: joined anew", node)
	if err := c.site.PowerOff(node); err != nil {
		return err
	}
	for _, f := range []string{records.RemovedMarkerFile(), records.LeaveRequestFile()} {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	if err := c.site.RegisterNode(ctx, node); err != nil {
		return err
	}
	return c.site.PowerOn(node)
}

// maintenanceWalk runs sitecon maintenance with args as the technician
// does: each time the walk says to power a node off or reboot it, the
// node is rebooted (power off, on 5 s later: a new boot ID).
func (c *chaosSite) maintenanceWalk(ctx context.Context, t *testing.T, args []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, sitecon, args...)
	var out syncbuf.Buffer
	cmd.Stderr = &out
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := bufio.NewScanner(pipe)
	for lines.Scan() {
		line := lines.Text()
		fmt.Fprintln(&out, line)
		rest, ok := strings.CutPrefix(line, "step 2/5: power ")
		if !ok {
			continue
		}
		node, _, _ := strings.Cut(rest, " ")
		if err := c.site.PowerOff(node); err != nil {
			fmt.Fprintf(&out, "[explorer] reboot %s: %v\n", node, err)
			continue
		}
		select {
		case <-time.After(5 * time.Second): // the device's reboot, not a wait for a condition
		case <-ctx.Done():
		}
		if err := c.site.PowerOn(node); err != nil {
			// Cut off or paused meanwhile: it boots at the last heal.
			t.Logf("maintenance: %s's power-on waits for the heal: %v", node, err)
		}
		fmt.Fprintf(&out, "[explorer] rebooted %s\n", node)
	}
	err = cmd.Wait()
	return []byte(out.String()), err
}
