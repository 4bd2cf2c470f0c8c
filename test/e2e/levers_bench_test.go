//go:build peers

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/test/sitebox"
)

// BenchmarkLevers measures builds of sitecon against each other on one
// site in the same minutes, so that a change meant to save memory or CPU
// (issue 23's levers) is measured on its own: SITECON_LEVER_BINS is
// "LABEL=PATH,..." (a build before the change and one after, or one per
// step), SITECON_PEER_SCALES names the one site (the first scale is used).
// Each build's console starts in turn (first screen), then all run side
// by side for the RSS and the idle minute; each build's agent runs as a
// node's agent (the first build node-a's, the next node-b's...); then
// each build's `sitecon status` is timed. With SITECON_LEVER_PERF set to a
// directory, each console and agent is profiled with perf(1) over the
// idle minute (LABEL-console.data, LABEL-agent.data) and each status run
// once (LABEL-status.data).
func BenchmarkLevers(b *testing.B) {
	spec := os.Getenv("SITECON_LEVER_BINS")
	if spec == "" {
		b.Skip("SITECON_LEVER_BINS names no builds (LABEL=PATH,...)")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		b.Fatal("the lever benchmarks need tmux")
	}
	type build struct{ label, path string }
	var builds []build
	for _, f := range strings.Split(spec, ",") {
		label, path, ok := strings.Cut(f, "=")
		if !ok {
			b.Fatalf("SITECON_LEVER_BINS: %q is not LABEL=PATH", f)
		}
		builds = append(builds, build{label, path})
	}
	perfDir := os.Getenv("SITECON_LEVER_PERF")
	sc := peerScales(b)[0]
	load := sampleLoad()
	defer load.report(b)
	site, _, _ := startBenchSite(b, "bench-levers", max(sc.nodes, len(builds)), sc)
	defer site.Stop()

	agents := map[string]int{}
	for i, bd := range builds {
		node := site.Nodes[i].Name
		agents[bd.label] = startLeverAgent(b, site, bd.path, node)
		socket := site.AgentSocket(node)
		until(b, time.Minute, node+"'s agent answering on its socket", func() (bool, bool) {
			_, err := os.Stat(socket)
			return err == nil, err == nil
		}, nil)
	}
	readyNodes := regexp.MustCompile(fmt.Sprintf(`Nodes\s+%d/%d ready`, len(site.Nodes), len(site.Nodes)))
	consoles := map[string]*pane{}
	for i, bd := range builds {
		console := startPane(b, "lever-"+bd.label, bd.path, []string{"HOME=" + b.TempDir(), "KUBECONFIG="},
			"--kubeconfig", site.Kubeconfig(), "--agent-socket", site.AgentSocket(site.Nodes[i].Name),
			"--log-file", filepath.Join(b.TempDir(), "console.log"), "--audit-log", filepath.Join(b.TempDir(), "audit.jsonl"))
		first := console.firstScreen(b, 2*time.Minute, bd.label+"'s overview with every node", readyNodes.MatchString)
		reportMetric(b, first.Seconds(), bd.label+"-first-screen-s")
		// A build that draws the basics first (the nodes, VIP and leader)
		// shows its alerts once the whole cluster is read: compare builds
		// on that too.
		whole := console.firstScreen(b, 2*time.Minute, bd.label+"'s overview with its alerts", wholeOverview(readyNodes))
		reportMetric(b, whole.Seconds(), bd.label+"-whole-screen-s")
		consoles[bd.label] = console
	}
	for _, bd := range builds {
		waitUntil(consoles[bd.label].started.Add(rssAfter))
		reportMetric(b, residentMiB(consoles[bd.label].pid), bd.label+"-rss-MiB")
		reportMetric(b, anonMiB(consoles[bd.label].pid), bd.label+"-anon-MiB")
	}
	pids := map[string]int{}
	for _, bd := range builds {
		pids[bd.label+"-console"] = consoles[bd.label].pid
		pids[bd.label+"-agent"] = agents[bd.label]
	}
	var perfs []*exec.Cmd
	if perfDir != "" {
		for who, pid := range pids {
			p := exec.Command("perf", "record", "-F", "199", "-g", "-p", fmt.Sprint(pid), "-o", filepath.Join(perfDir, who+".data"), "--", "sleep", fmt.Sprint(int(cpuWindow.Seconds())))
			if err := p.Start(); err != nil {
				b.Fatal(err)
			}
			perfs = append(perfs, p)
		}
	}
	for who, cpu := range cpuOver(b, pids, cpuWindow) {
		reportMetric(b, cpu, who+"-idle-cpu-s/min")
	}
	for _, p := range perfs {
		_ = p.Wait()
	}
	for _, bd := range builds {
		reportMetric(b, residentMiB(agents[bd.label]), bd.label+"-agent-rss-MiB")
		reportMetric(b, anonMiB(agents[bd.label]), bd.label+"-agent-anon-MiB")
	}
	for i, bd := range builds {
		socket := site.AgentSocket(site.Nodes[i].Name)
		logDir := b.TempDir()
		var took []time.Duration
		for run := range 3 {
			args := []string{"status", "--kubeconfig", site.Kubeconfig(), "--agent-socket", socket,
				"--log-file", filepath.Join(logDir, fmt.Sprintf("%s-%d-status.log", bd.label, run)), "--log-level", "debug"}
			var cmd *exec.Cmd
			if perfDir != "" && run == 0 {
				cmd = exec.Command("perf", append([]string{"record", "-F", "499", "-g", "-o", filepath.Join(perfDir, bd.label+"-status.data"), "--", bd.path}, args...)...)
			} else {
				cmd = exec.Command(bd.path, args...)
			}
			cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+b.TempDir())
			start := time.Now()
			out, err := cmd.CombinedOutput()
			took = append(took, time.Since(start))
			if err != nil && !strings.Contains(string(out), "node-a") {
				b.Errorf("%s status: %v\n%s", bd.label, err, out)
			}
		}
		reportMetric(b, took[1].Seconds(), bd.label+"-status-wall-s")
		// The status runs' debug logs say when each kind's cache synced.
		if perfDir != "" {
			logs, _ := filepath.Glob(filepath.Join(logDir, "*-status.log"))
			for _, l := range logs {
				if data, err := os.ReadFile(l); err == nil {
					_ = os.WriteFile(filepath.Join(perfDir, filepath.Base(l)), data, 0o644)
				}
			}
		}
		b.Logf("%s status runs: %v", bd.label, took)
	}
	// SITECON_LEVER_STATUS_ENV (NAME=VALUE): each build's status again,
	// five runs with that environment interleaved with five without, e.g.
	// a client-go feature gate (KUBE_FEATURE_WatchListClient=false).
	if extra := os.Getenv("SITECON_LEVER_STATUS_ENV"); extra != "" {
		for i, bd := range builds {
			socket := site.AgentSocket(site.Nodes[i].Name)
			var with, without []time.Duration
			for range 5 {
				for _, env := range []string{extra, ""} {
					cmd := exec.Command(bd.path, "status", "--kubeconfig", site.Kubeconfig(), "--agent-socket", socket)
					cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+b.TempDir())
					if env != "" {
						cmd.Env = append(cmd.Env, env)
					}
					start := time.Now()
					out, err := cmd.CombinedOutput()
					took := time.Since(start)
					if err != nil && !strings.Contains(string(out), "node-a") {
						b.Logf("%s status (%q): %v\n%s", bd.label, env, err, out)
					}
					if env != "" {
						with = append(with, took)
					} else {
						without = append(without, took)
					}
				}
			}
			slices.Sort(with)
			slices.Sort(without)
			b.Logf("%s status with %s: %v; without: %v", bd.label, extra, with, without)
			reportMetric(b, with[2].Seconds(), bd.label+"-status-env-wall-s")
			reportMetric(b, without[2].Seconds(), bd.label+"-status-noenv-wall-s")
		}
	}
	for _, bd := range builds {
		if !readyNodes.MatchString(consoles[bd.label].screen()) {
			b.Errorf("%s's console lost the overview:\n%s", bd.label, consoles[bd.label].screen())
		}
	}
}

// startLeverAgent runs node's agent from the build at path as
// startPeerAgent runs node-a's, and returns its PID.
func startLeverAgent(b *testing.B, site *sitebox.TestSite, path, node string) int {
	m, ok := site.EtcdMemberOf(node)
	var etcd []string
	if ok {
		etcd = []string{"--etcd-endpoint=" + m.ClientURL()}
	}
	statusAddr, err := site.StatusAddr(node)
	if err != nil {
		b.Fatal(err)
	}
	host, _, _ := strings.Cut(statusAddr, ":")
	dir := site.Dir
	args := append([]string{"agent", "--no-bootstrap"}, etcd...)
	args = append(args, "--cluster-id", site.ClusterID, "--cluster-token-file", site.ClusterTokenFile(), "--status-addr", statusAddr,
		"--node-name", node, "--kubeconfig", site.Kubeconfig(), "--vnc-address", host,
		"--apps-dir", b.TempDir(), "--state-dir", filepath.Join(dir, "state", node),
		"--socket", site.AgentSocket(node), "--metrics-addr", "127.0.0.1:0",
		"--move-after", sitebox.ShippedAgentTimings.MoveAfter.String(), "--failover-timeout", sitebox.ShippedAgentTimings.FailoverTimeout.String(),
		"--no-fence", "--log-file", filepath.Join(dir, "logs", "agent-"+node+".log"))
	if err := site.StartProcess("agent-"+node, path, args...); err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "run", "agent-"+node+".pid"))
	if err != nil {
		b.Fatal(err)
	}
	var pid int
	if _, err := fmt.Sscan(strings.TrimSpace(string(data)), &pid); err != nil {
		b.Fatal(err)
	}
	return pid
}
