package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/netns"
	"github.com/sitecon/sitecon/test/sitebox"
)

// parentPID is the parent of pid, from /proc.
func parentPID(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

func readPIDFile(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

// Issue 19 §1: sitebox's bootstrap mode. Each node's agent runs without
// --no-bootstrap, in a network namespace sitebox made for the node, with
// its own cluster config (formation.Plan), its own cluster address and /status,
// and the k3s stand-in as its k3s; the stand-in brings up the node's etcd
// member (its data kept across restarts) and its API endpoint. First boot:
// the seed initialises, the joiners wait for its /status. Then the whole
// site loses power and boots again, the seed last: the joiners start k3s
// without waiting on the seed (that is what brings etcd's quorum back), and
// within powerCutRecoveryBound of the seed's power-on every node is Ready
// and every agent joined and READY, the app running on its node. The same for two of three servers, the
// seed among them. The times are logged.
func TestSiteboxBootstrapModeComesBackAfterAPowerCut(t *testing.T) {
	// Its own site: the power cut takes etcd's quorum from the whole site.
	// One app, designated to node-b: it runs there again after each cut.
	web := apps.AppConfig{UUID: "e2e00000-0000-4000-8000-0000000000f3", DisplayName: "boot-web", Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/web:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), Affinity: apps.AffinityPreferred}
	site, appsDir := startBootSite(t, web)
	seed, joiners := "node-a", []string{"node-b", "node-c"}
	nodes := append([]string{seed}, joiners...)
	whole := func() (string, bool) { return bootSiteWhole(t, site, nodes, web.DisplayName, "node-b") }
	agentState := func(node string) (agent.State, error) { return bootAgentState(site, node) }

	began := time.Now()
	if err := site.StartAgents(sitecon, appsDir, sitebox.QuickAgentTimings(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	until(t, 90*time.Second, "the site's first bring-up", whole, func(s string) string { return s })
	t.Logf("bootstrap mode, first boot: every agent joined and READY, every node Ready, the app running %s after the agents started",
		time.Since(began).Round(100*time.Millisecond))

	// Each agent really ran its bring-up: the stand-in recorded one start,
	// the seed's with cluster-init, the joiners' after it and after a wait
	// for the seed's /status.
	firstStart := map[string]standinStart{}
	for _, n := range nodes {
		starts := standinStarts(t, site.K3sDataDir(n))
		if len(starts) != 1 {
			t.Fatalf("%s's k3s started %d times on first boot, want 1: %v", n, len(starts), starts)
		}
		firstStart[n] = starts[0]
	}
	if l := firstStart[seed].line; !strings.Contains(l, "cluster-init") {
		t.Errorf("the seed's k3s did not initialise the cluster: %s", l)
	}
	for _, j := range joiners {
		if l := firstStart[j].line; strings.Contains(l, "cluster-init") || !firstStart[j].at.After(firstStart[seed].at) {
			t.Errorf("%s's k3s start (%s) is not a join after the seed's (%s)", j, l, firstStart[seed].line)
		}
		log, _ := os.ReadFile(filepath.Join(site.Dir, "logs", "agent-"+j+".log"))
		if !bytes.Contains(log, []byte("phase="+string(agent.PhaseWaitingSeed))) {
			t.Errorf("%s's agent never waited for the seed on its first join (its log has no %s phase)", j, agent.PhaseWaitingSeed)
		}
	}
	// The stand-in runs the node's etcd member, whose data it keeps where
	// k3s keeps it.
	membersRunUnderK3s := func(nodes []string) {
		t.Helper()
		for _, n := range nodes {
			standin := readPIDFile(filepath.Join(site.K3sDataDir(n), "sitecon-k3s.pid"))
			member := readPIDFile(filepath.Join(site.Dir, "run", "etcd-"+n+".pid"))
			if standin == 0 || member == 0 || parentPID(member) != standin {
				t.Errorf("%s's etcd member (pid %d) is not run by its k3s stand-in (pid %d)", n, member, standin)
			}
			if _, err := os.Stat(filepath.Join(site.K3sDataDir(n), "server", "db", "etcd", "member")); err != nil {
				t.Errorf("%s's k3s data dir has no etcd member data: %v", n, err)
			}
		}
	}
	membersRunUnderK3s(nodes)

	// Power cuts: the whole site, then two of the three servers with the
	// seed among them (either takes etcd's quorum). Every node's agent,
	// stand-in, etcd member and kubelet die at once; the seed boots last.
	for _, c := range []struct {
		name string
		off  []string
	}{
		{"the whole site", nodes},
		{"two of three servers, the seed among them", []string{seed, "node-b"}},
	} {
		before := map[string]int{}
		for _, n := range c.off {
			before[n] = len(standinStarts(t, site.K3sDataDir(n)))
		}
		if err := site.PowerOff(c.off...); err != nil {
			t.Fatal(err)
		}
		for _, n := range c.off {
			if _, err := agentState(n); err == nil {
				t.Fatalf("%s is powered off, but its agent answers", n)
			}
			if pid := readPIDFile(filepath.Join(site.K3sDataDir(n), "sitecon-k3s.pid")); pid != 0 {
				if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.Contains(cmdline, []byte(site.Dir)) {
					t.Fatalf("%s is powered off, but its k3s stand-in (pid %d) runs", n, pid)
				}
			}
		}
		cs := clientset(t, site)
		_ = until(t, 30*time.Second, "the API without etcd quorum", func() (error, bool) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err, err != nil
		}, func(error) string { return "a quorum read still succeeds" })
		<-time.After(powerCutLength)

		// The others boot first and start k3s without the seed: their
		// etcd members bring the quorum back.
		for _, n := range c.off[1:] {
			if err := site.PowerOn(n); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range c.off[1:] {
			until(t, 30*time.Second, n+" starts k3s again with the seed still off", func() ([]standinStart, bool) {
				starts := standinStarts(t, site.K3sDataDir(n))
				return starts, len(starts) == before[n]+1
			}, func(s []standinStart) string {
				var lines []string
				for _, start := range s {
					lines = append(lines, start.line)
				}
				st, err := agentState(n)
				return fmt.Sprintf("k3s starts:\n%s\nagent %+v %v", strings.Join(lines, "\n"), st, err)
			})
		}
		if err := site.PowerOn(seed); err != nil {
			t.Fatal(err)
		}
		on := time.Now()
		until(t, powerCutRecoveryBound, c.name+" back after a power cut (seed last)", whole, func(s string) string { return s })
		t.Logf("bootstrap mode, power cut of %s: every node Ready, every agent joined and READY, the app running %s after the seed's power-on",
			c.name, time.Since(on).Round(100*time.Millisecond))
		// The members came back through the agents' bring-up, each under
		// its node's k3s.
		membersRunUnderK3s(c.off)
		if starts := standinStarts(t, site.K3sDataDir(seed)); len(starts) != before[seed]+1 || strings.Contains(starts[len(starts)-1].line, "cluster-init") {
			t.Errorf("the seed's k3s after the power cut: %v (want one more start, without cluster-init)", starts)
		}
	}
}

// The same mode from sitebox's command line, as a person stages a power
// cut by hand: `sitebox up --bootstrap` brings every agent to joined,
// `power-off all` and `power-on` (the seed last) bring the site back, and
// `down` leaves no process and no namespace behind.
func TestSiteboxCLIBootstrapMode(t *testing.T) {
	netns.Skip(t)
	bin := buildSiteboxCLI(t)
	dir := t.TempDir()
	sb := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(filepath.Join(bin, "sitebox"), append(args, "--dir", dir)...).CombinedOutput()
		if err != nil {
			t.Fatalf("sitebox %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	sb("up", "--bootstrap", "--runtime", "--state-disks", "--agents", sitecon, "--no-simulators", "--node-monitor-grace-period", "12s", "--node-lease-duration", "12s")
	downed := false
	defer func() {
		if !downed {
			_, _ = exec.Command(filepath.Join(bin, "sitebox"), "down", "--dir", dir).CombinedOutput()
		}
	}()
	site, err := sitebox.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	joined := func() (string, bool) {
		for _, n := range []string{"node-a", "node-b", "node-c"} {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			st, err := localapi.Get[agent.State](ctx, site.AgentSocket(n), localapi.PathAgent)
			cancel()
			if err != nil || st.Phase != agent.PhaseJoined {
				return fmt.Sprintf("%s's agent: %s %s %v", n, st.Phase, st.LastError, err), false
			}
		}
		return "", true
	}
	until(t, 90*time.Second, "every agent joined after sitebox up --bootstrap", joined, func(s string) string { return s })

	// --runtime: the pods the nodes run are processes, each in its pod's
	// cgroup.
	copies := func(node string) map[string][]int {
		t.Helper()
		c, err := site.RuntimeCopies(node)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	until(t, 60*time.Second, "node-a's pods running as processes", func() (int, bool) {
		n := len(copies("node-a"))
		return n, n > 0
	}, func(n int) string { return fmt.Sprintf("%d pods with a process", n) })

	// The faults a person stages by hand: a cut-off pair and a paused
	// agent, then the heal.
	state := func(name string) byte {
		t.Helper()
		pid := readPIDFile(filepath.Join(dir, "run", name+".pid"))
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		return fields[0][0]
	}
	chaosTable := func(node string) string {
		out, _ := exec.Command("ip", "netns", "exec", site.Netns(node), "nft", "list", "table", "inet", "sitebox_chaos").CombinedOutput()
		return string(out)
	}
	sb("cut", "node-b", "node-c")
	sb("pause", "node-a", "--part", "agent")
	sb("fill-disk", "node-c")
	if out := sb("faults"); !strings.Contains(out, "cut off: [node-b node-c]") || !strings.Contains(out, "paused: node-a [agent]") || !strings.Contains(out, "disk full: node-c") {
		t.Errorf("sitebox faults:\n%s", out)
	}
	// A full state disk: the agent's next write there fails; node-b's,
	// a disk of its own, does not.
	probeWrite := func(node string) error {
		path := filepath.Join(site.StateDir(node), "sitebox-test-probe")
		err := os.WriteFile(path, bytes.Repeat([]byte("x"), 8192), 0o600)
		_ = os.Remove(path)
		return err
	}
	if err := probeWrite("node-c"); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a write on node-c's full state disk: %v, want ENOSPC", err)
	}
	if err := probeWrite("node-b"); err != nil {
		t.Errorf("a write on node-b's state disk, not full: %v", err)
	}
	addr := map[string]string{}
	for _, n := range site.Nodes {
		addr[n.Name] = n.IP
	}
	for n, other := range map[string]string{"node-b": "node-c", "node-c": "node-b"} {
		if table := chaosTable(n); !strings.Contains(table, "ip saddr "+addr["node-a"]+" drop") || strings.Contains(table, "ip saddr "+addr[other]+" drop") {
			t.Errorf("%s's chaos table does not cut it off from node-a alone (%s stays reachable):\n%s", n, other, table)
		}
		if st := state("kwok-" + n); st != 'T' {
			t.Errorf("%s's kubelet runs (state %c) while it is cut off", n, st)
		}
	}
	if st := state("agent-node-a"); st != 'T' {
		t.Errorf("node-a's agent runs (state %c) while paused", st)
	}
	sb("heal")
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		if table := chaosTable(n); strings.Contains(table, "drop") {
			t.Errorf("%s keeps a chaos table after the heal:\n%s", n, table)
		}
	}
	if err := probeWrite("node-c"); err != nil {
		t.Errorf("a write on node-c's state disk after the heal: %v", err)
	}
	for _, name := range []string{"kwok-node-b", "kwok-node-c", "agent-node-a"} {
		if st := state(name); st == 'T' {
			t.Errorf("%s still stopped after the heal", name)
		}
	}
	until(t, 90*time.Second, "every agent joined again after the heal", joined, func(s string) string { return s })

	sb("power-off", "all")
	if _, ok := joined(); ok {
		t.Fatal("the agents answer after power-off all")
	}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		if c := copies(n); len(c) > 0 {
			t.Errorf("%s is off, but %d of its pods' processes run", n, len(c))
		}
	}
	sb("power-on", "node-c", "node-b")
	sb("power-on", "node-a")
	until(t, powerCutRecoveryBound, "every agent joined again after power-off all, power-on (seed last)", joined, func(s string) string { return s })

	sb("down")
	downed = true
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		if c := copies(n); len(c) > 0 {
			t.Errorf("sitebox down left %d of %s's pods' processes", len(c), n)
		}
	}
	if mounts, err := os.ReadFile("/proc/self/mounts"); err != nil || strings.Contains(string(mounts), site.StateDir("node-a")) {
		t.Errorf("sitebox down left the state disks mounted (%v)", err)
	}
	if dir, err := site.RuntimeCgroupDir("node-a"); err == nil {
		if _, err := os.Stat(filepath.Dir(dir)); err == nil {
			t.Errorf("sitebox down left the site's cgroups (%s)", filepath.Dir(dir))
		}
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	if prefix := strings.TrimSuffix(site.Netns("node-a"), "-a"); strings.Contains(string(out), prefix) {
		t.Errorf("sitebox down left namespaces:\n%s", out)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if cmdline, err := os.ReadFile(p); err == nil && bytes.Contains(cmdline, []byte(dir)) {
			t.Errorf("sitebox down left %s: %s", p, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
}

// bootAgentState is a bootstrap-mode node's agent state, from its socket.
func bootAgentState(site *sitebox.TestSite, node string) (agent.State, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return localapi.Get[agent.State](ctx, site.AgentSocket(node), localapi.PathAgent)
}

// bootSiteWhole: every node Ready, every agent joined (its bring-up done)
// and READY on its socket (connected to its cluster), and each sees app
// running on appNode. Else it says what is not yet so.
func bootSiteWhole(t *testing.T, site *sitebox.TestSite, nodes []string, app, appNode string) (string, bool) {
	cs := clientset(t, site)
	for _, n := range nodes {
		node, err := cs.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			return "node " + n + ": " + err.Error(), false
		}
		if !kube.NodeIsReady(node) {
			return "node " + n + " not Ready", false
		}
		st, err := bootAgentState(site, n)
		if err != nil {
			return n + "'s agent: " + err.Error(), false
		}
		if st.Phase != agent.PhaseJoined {
			return fmt.Sprintf("%s's agent is %s (%s)", n, st.Phase, st.LastError), false
		}
		var ns apps.PublishedNode
		if err := getSocketErr(site.AgentSocket(n), localapi.PathNode, &ns); err != nil {
			return n + "'s agent: " + err.Error(), false
		}
		if ns.Status != apps.PublishedReady {
			return fmt.Sprintf("%s's agent says %s (%s)", n, ns.Status, ns.Reason), false
		}
		var seen []apps.PublishedApp
		if err := getSocketErr(site.AgentSocket(n), localapi.PathApps, &seen); err != nil {
			return n + "'s agent apps: " + err.Error(), false
		}
		running := false
		for _, a := range seen {
			running = running || (a.Name == app && a.KubeStatus == apps.KubeRunning && a.Node == appNode)
		}
		if !running {
			return fmt.Sprintf("%s's agent does not see %s running on %s: %+v", n, app, appNode, seen), false
		}
	}
	return "", true
}

// startBootSite starts a bootstrap-mode site (each node's agent in its own
// namespace, the k3s stand-in as its k3s; the agents not started yet) with
// app's config in its apps directory; the site stops when the test ends,
// after its agents' and k3s's logs are shown on a failure.
func startBootSite(t *testing.T, app apps.AppConfig) (site *sitebox.TestSite, appsDir string) {
	t.Helper()
	netns.Skip(t)
	opts := sitebox.TestOptions(t.TempDir())
	opts.Bootstrap = true
	site, err := sitebox.StartTestSite(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(site.Stop)
	// Run before the stop (cleanups run last first): what each device's
	// agent and k3s said, and how each ended.
	t.Cleanup(func() {
		logSiteOnFailure(t, site.Dir, "agent-node-a", "agent-node-b", "agent-node-c", "k3s-node-a", "k3s-node-b", "k3s-node-c")
	})
	site.K3sStandin = buildStandin(t)
	appsDir = t.TempDir()
	for _, sub := range []string{"apps", "volumes"} {
		if err := os.MkdirAll(filepath.Join(appsDir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeJSON(t, filepath.Join(appsDir, "apps", app.DisplayName+".json"), app)
	return site, appsDir
}
