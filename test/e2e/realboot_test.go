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

func readPIDFile(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
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
