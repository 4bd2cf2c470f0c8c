//go:build peers

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
	"github.com/sitecon/sitecon/views"
)

// The benchmarks against the peers (issue 23 §2), run by make bench-peers:
// sitecon's console on its overview beside k9s headless on its pods view,
// on the same sitebox site in the same run, at each scale; and the agent's
// detection latency and API load beside a reference that polls as EVE's
// zedkube does. They need the k9s binary (SITECON_K9S, which make
// bench-peers builds into its cache) and tmux, and take minutes: only the
// peers build tag compiles them, so make test and make bench do not.
//
// Each figure is a metric of its own (b.ReportMetric), sitecon's and the
// peer's side by side; the load average of the machine during the run is
// reported with them, since other work may share it.

// peerScale is one site the peers are measured on.
type peerScale struct{ nodes, pods, volumes int }

// peerScales are the sites BenchmarkPeers measures, from
// SITECON_PEER_SCALES ("NODESxPODSxVOLUMES,..."), else 3 nodes with 1,000
// pods and 200 Longhorn volumes, 10 nodes with 10,000 pods and 2,000
// volumes (the scale issue 23 sets its goals at), and 30 nodes with 30,000
// pods and 2,000 volumes.
func peerScales(b *testing.B) []peerScale {
	spec := os.Getenv("SITECON_PEER_SCALES")
	if spec == "" {
		spec = "3x1000x200,10x10000x2000,30x30000x2000"
	}
	var scales []peerScale
	for _, s := range strings.Split(spec, ",") {
		var sc peerScale
		if _, err := fmt.Sscanf(s, "%dx%dx%d", &sc.nodes, &sc.pods, &sc.volumes); err != nil {
			b.Fatalf("SITECON_PEER_SCALES: %q is not NODESxPODSxVOLUMES: %v", s, err)
		}
		scales = append(scales, sc)
	}
	return scales
}

// How long each figure is measured over.
const (
	rssAfter       = 30 * time.Second
	cpuWindow      = time.Minute
	churnPerSecond = 20
	// churnKept is how many churned pods exist at once: each is deleted
	// this many creations after it was made.
	churnKept = 200
)

// BenchmarkPeers measures, on one site per scale: the first screen with
// data (from the start of the process to the pane showing the cluster's
// data: sitecon's overview with every node counted, which it draws once
// the nodes, leases and config maps are read, and then whole, with its
// alerts, once every informer has synced; k9s's pods view titled with
// every pod), the
// resident memory 30 s after start, the CPU seconds used in an idle minute
// and in a minute of 20 pod creations and 20 deletions a second, for
// sitecon's console and k9s; the same CPU and memory for node-a's agent
// (shipped timings, a separate process); and the wall time of sitecon
// status.
func BenchmarkPeers(b *testing.B) {
	k9s := os.Getenv("SITECON_K9S")
	if k9s == "" {
		b.Skip("SITECON_K9S names no k9s binary: run make bench-peers")
	}
	if _, err := exec.LookPath("tmux"); err != nil {
		b.Fatal("the peer benchmarks need tmux")
	}
	for _, sc := range peerScales(b) {
		b.Run(fmt.Sprintf("%dnodes-%dpods-%dvolumes", sc.nodes, sc.pods, sc.volumes), func(b *testing.B) {
			benchPeersAt(b, k9s, sc)
		})
	}
}

func benchPeersAt(b *testing.B, k9s string, sc peerScale) {
	load := sampleLoad()
	defer load.report(b)
	site, cs, made := startBenchSite(b, "bench-peers", sc.nodes, sc)
	defer site.Stop()
	reportMetric(b, made.Seconds(), "populate-s")

	agentPID := startPeerAgent(b, site)
	socket := site.AgentSocket("node-a")
	until(b, time.Minute, "node-a's agent answering on its socket", func() (bool, bool) {
		_, err := os.Stat(socket)
		return err == nil, err == nil
	}, nil)

	// First screens, one after the other so that neither start competes
	// with the other's; both then run to the end.
	readyNodes := regexp.MustCompile(fmt.Sprintf(`Nodes\s+%d/%d ready`, sc.nodes, sc.nodes))
	console := startPane(b, "sitecon", sitecon, []string{"HOME=" + b.TempDir(), "KUBECONFIG="},
		"--kubeconfig", site.Kubeconfig(), "--agent-socket", socket,
		"--log-file", filepath.Join(b.TempDir(), "console.log"), "--audit-log", filepath.Join(b.TempDir(), "audit.jsonl"))
	consoleFirst := console.firstScreen(b, 2*time.Minute, "sitecon's overview with every node", readyNodes.MatchString)
	// The overview shows the nodes, the VIP and the stats leader as soon
	// as those are read, and its alerts once the pods, volumes and apps
	// are: the whole screen is measured too.
	consoleWhole := console.firstScreen(b, 2*time.Minute, "sitecon's overview with its alerts", wholeOverview(readyNodes))
	k9sHome := b.TempDir()
	k9sConfig := filepath.Join(k9sHome, "k9s")
	if err := os.MkdirAll(k9sConfig, 0o755); err != nil {
		b.Fatal(err)
	}
	// k9s asks GitHub for its latest release unless told not to: nothing
	// here leaves the machine.
	if err := os.WriteFile(filepath.Join(k9sConfig, "config.yaml"), []byte("k9s:\n  skipLatestRevCheck: true\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	wantPods := sc.pods
	peer := startPane(b, "k9s", k9s, []string{"HOME=" + k9sHome, "K9S_CONFIG_DIR=" + k9sConfig, "KUBECONFIG=" + site.Kubeconfig()},
		"--headless", "--logoless", "--readonly", "--all-namespaces", "--command", "pods", "--kubeconfig", site.Kubeconfig())
	peerFirst := peer.firstScreen(b, 5*time.Minute, fmt.Sprintf("k9s's pods view with at least %d pods", wantPods), func(s string) bool {
		return k9sPodCount(s) >= wantPods
	})
	reportMetric(b, consoleFirst.Seconds(), "sitecon-first-screen-s")
	reportMetric(b, consoleWhole.Seconds(), "sitecon-whole-screen-s")
	reportMetric(b, peerFirst.Seconds(), "k9s-first-screen-s")

	waitUntil(console.started.Add(rssAfter))
	reportMetric(b, residentMiB(console.pid), "sitecon-rss-MiB")
	reportMetric(b, anonMiB(console.pid), "sitecon-anon-MiB")
	waitUntil(peer.started.Add(rssAfter))
	reportMetric(b, residentMiB(peer.pid), "k9s-rss-MiB")
	reportMetric(b, anonMiB(peer.pid), "k9s-anon-MiB")

	pids := map[string]int{"sitecon": console.pid, "k9s": peer.pid, "agent": agentPID}
	for who, cpu := range cpuOver(b, pids, cpuWindow) {
		reportMetric(b, cpu, who+"-idle-cpu-s/min")
	}
	reportMetric(b, residentMiB(agentPID), "agent-rss-MiB")
	reportMetric(b, anonMiB(agentPID), "agent-anon-MiB")

	stopChurn, rate := churn(b, cs, site)
	// The churned pods reach their steady number before the minute counts.
	waitUntil(time.Now().Add(churnKept / churnPerSecond * time.Second))
	for who, cpu := range cpuOver(b, pids, cpuWindow) {
		reportMetric(b, cpu, who+"-churn-cpu-s/min")
	}
	stopChurn()
	reportMetric(b, rate(), "churn-pods/s")
	reportMetric(b, residentMiB(console.pid), "sitecon-rss-after-churn-MiB")
	reportMetric(b, residentMiB(peer.pid), "k9s-rss-after-churn-MiB")
	reportMetric(b, residentMiB(agentPID), "agent-rss-after-churn-MiB")
	reportMetric(b, anonMiB(console.pid), "sitecon-anon-after-churn-MiB")
	reportMetric(b, anonMiB(peer.pid), "k9s-anon-after-churn-MiB")
	reportMetric(b, anonMiB(agentPID), "agent-anon-after-churn-MiB")

	reportMetric(b, statusWall(b, site, socket).Seconds(), "status-wall-s")
	// Both still show the site: a process that died mid-run measured nothing.
	if !readyNodes.MatchString(console.screen()) {
		b.Fatalf("sitecon's console lost the overview:\n%s", console.screen())
	}
	if k9sPodCount(peer.screen()) < wantPods {
		b.Fatalf("k9s lost its pods view:\n%s", peer.screen())
	}
}

// reportMetric reports a figure and logs it at once: a run that fails
// later still leaves what it measured in its output.
func reportMetric(b *testing.B, v float64, unit string) {
	b.ReportMetric(v, unit)
	b.Logf("%s %.4g", unit, v)
}

// fastClient is an admin client that the defaults (5 QPS) do not throttle:
// the site is filled with thousands of objects.
// startBenchSite starts a site of nodes named cluster, filled to sc's
// pods and volumes, and says how long the filling took. The caller stops
// the site.
func startBenchSite(b *testing.B, cluster string, nodes int, sc peerScale) (*sitebox.TestSite, kubernetes.Interface, time.Duration) {
	opts := sitebox.TestOptions(b.TempDir())
	opts.Nodes = nodes
	opts.ClusterName = cluster
	// Kubernetes's own timings, not the tests' quick ones: thousands of
	// pods load a two-core machine, and a heartbeat late by seconds must
	// not evict them all in the middle of a measurement.
	opts.NodeMonitorGracePeriod, opts.NodeLeaseDuration, opts.EvictionToleration = 40*time.Second, 40*time.Second, 300*time.Second
	site, err := sitebox.StartTestSite(opts)
	if err != nil {
		b.Fatal(err)
	}
	site.WaitSettled(b, 2*time.Minute)
	cs := fastClient(b, site)
	began := time.Now()
	populate(b, site, cs, sc)
	made := time.Since(began)
	b.Logf("%d nodes, %d pods, %d volumes made in %.1fs", nodes, sc.pods, sc.volumes, made.Seconds())
	return site, cs, made
}

func fastClient(b *testing.B, site *sitebox.TestSite) kubernetes.Interface {
	cfg := rest.CopyConfig(site.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

// benchNamespace holds the pods the site is filled with; churnNamespace
// the pods that come and go.
const (
	benchNamespace = "bench"
	churnNamespace = "bench-churn"
)

// populate fills the site: sc.pods pods spread over the nodes (bound to
// them, as the scheduler would), Running once kwok says so, and sc.volumes
// Longhorn volumes of three replicas (fewer on a smaller site), detached.
func populate(b *testing.B, site *sitebox.TestSite, cs kubernetes.Interface, sc peerScale) {
	ctx := context.Background()
	for _, ns := range []string{benchNamespace, churnNamespace} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	parallel(b, sc.pods, func(i int) error {
		_, err := cs.CoreV1().Pods(benchNamespace).Create(ctx, benchPod(fmt.Sprintf("bench-%05d", i), site.Nodes[i%len(site.Nodes)].Name), metav1.CreateOptions{})
		return err
	})
	// ResourceVersion 0: from the API server's cache, not a quorum read
	// of thousands of pods every look.
	until(b, 15*time.Minute, "every bench pod Running", func() (int, bool) {
		l, err := cs.CoreV1().Pods(benchNamespace).List(ctx, metav1.ListOptions{FieldSelector: "status.phase!=Running", ResourceVersion: "0"})
		if err != nil {
			return -1, false
		}
		return len(l.Items), len(l.Items) == 0
	}, func(n int) string { return fmt.Sprintf("%d not Running", n) })

	lh := site.Clients(b).Longhorn
	replicas := min(3, sc.nodes)
	parallel(b, sc.volumes, func(i int) error {
		_, err := lh.LonghornV1beta2().Volumes(kube.LonghornNamespace).Create(ctx, sitebox.LonghornVolume(fmt.Sprintf("bench-vol-%04d", i), 1<<30, replicas), metav1.CreateOptions{})
		return err
	})
	until(b, 10*time.Minute, "every bench volume's replicas made", func() (int, bool) {
		l, err := lh.LonghornV1beta2().Replicas(kube.LonghornNamespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return -1, false
		}
		return len(l.Items), len(l.Items) >= sc.volumes*replicas
	}, func(n int) string { return fmt.Sprintf("%d of %d replicas", n, sc.volumes*replicas) })
	// Made is not settled: Longhorn (the simulator) starts each replica,
	// then stops it as its volume is detached (nothing attaches a bench
	// volume), a write each, and then drops the replica from its engine's
	// modes, a write per volume. At 2,000 volumes that goes on for minutes
	// after the last replica is made, and an idle minute measured then
	// measures the volumes settling. A replica running as it is meant to
	// is not settled: it is about to be stopped.
	until(b, 15*time.Minute, "every bench replica stopped and every engine without replica modes", func() (int, bool) {
		replicas, err := lh.LonghornV1beta2().Replicas(kube.LonghornNamespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return -1, false
		}
		engines, err := lh.LonghornV1beta2().Engines(kube.LonghornNamespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return -1, false
		}
		moving := 0
		for _, r := range replicas.Items {
			if r.Spec.DesireState != lhv1beta2.InstanceStateStopped || r.Status.CurrentState != lhv1beta2.InstanceStateStopped {
				moving++
			}
		}
		for _, e := range engines.Items {
			if len(e.Status.ReplicaModeMap) > 0 {
				moving++
			}
		}
		return moving, moving == 0 && len(engines.Items) >= sc.volumes
	}, func(n int) string { return fmt.Sprintf("%d replicas and engines not yet settled", n) })
}

func benchPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": "peers"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.local/bench:1"}},
			TerminationGracePeriodSeconds: ptr.To[int64](0)},
	}
}

// parallel runs do(0..n-1) on 16 workers and fails on the first error.
func parallel(b *testing.B, n int, do func(i int) error) {
	const workers = 16
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if err := do(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// startPeerAgent runs node-a's agent as the site runs its agents
// (Site.StartAgents: a separate process, the shipped failover timings)
// and returns its PID: its memory and CPU are its own.
func startPeerAgent(b *testing.B, site *sitebox.TestSite) int {
	m, ok := site.EtcdMemberOf("node-a")
	if !ok {
		b.Fatal("node-a runs no etcd member")
	}
	dir := site.Dir
	statusAddr, err := site.StatusAddr("node-a")
	if err != nil {
		b.Fatal(err)
	}
	host, _, _ := strings.Cut(statusAddr, ":")
	appsDir := b.TempDir()
	err = site.StartProcess("agent-node-a", sitecon, "agent", "--no-bootstrap", "--etcd-endpoint="+m.ClientURL(),
		"--cluster-id", site.ClusterID, "--cluster-token-file", site.ClusterTokenFile(), "--status-addr", statusAddr,
		"--node-name", "node-a", "--kubeconfig", site.Kubeconfig(), "--vnc-address", host,
		"--apps-dir", appsDir, "--state-dir", filepath.Join(dir, "state", "node-a"),
		"--socket", site.AgentSocket("node-a"), "--metrics-addr", "127.0.0.1:0",
		"--move-after", sitebox.ShippedAgentTimings.MoveAfter.String(), "--failover-timeout", sitebox.ShippedAgentTimings.FailoverTimeout.String(),
		"--no-fence", "--log-file", filepath.Join(dir, "logs", "agent-node-a.log"))
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "run", "agent-node-a.pid"))
	if err != nil {
		b.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		b.Fatal(err)
	}
	return pid
}

// pane is a program running in its own detached tmux session on an 80x24
// terminal, as the console tests run sitecon.
type pane struct {
	session string
	pid     int
	started time.Time
}

// startPane runs path with args under env (env(1)'s arguments) in a new
// tmux session. The command is exec'd: the pane's process is the program
// itself, whose memory and CPU are read from /proc.
func startPane(b *testing.B, name, path string, env []string, args ...string) *pane {
	session := fmt.Sprintf("sitecon-peers-%s-%d", name, time.Now().UnixNano())
	// env(1) takes its -u options before any NAME=VALUE. Both programs
	// draw in colour, whatever the environment of the run says.
	cmdline := append([]string{"exec", "env", "-u", "CLICOLOR", "-u", "CLICOLOR_FORCE", "-u", "NO_COLOR", "TERM=xterm-256color"}, env...)
	cmdline = append(append(cmdline, path), args...)
	p := &pane{session: session, started: time.Now()}
	if out, err := exec.Command("tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", strings.Join(cmdline, " ")).CombinedOutput(); err != nil {
		b.Fatalf("tmux: %v\n%s", err, out)
	}
	b.Cleanup(func() { _ = exec.Command("tmux", "kill-session", "-t", session).Run() })
	out, err := exec.Command("tmux", "display-message", "-p", "-t", session, "#{pane_pid}").Output()
	if err != nil {
		b.Fatalf("tmux: the pane's process: %v", err)
	}
	if p.pid, err = strconv.Atoi(strings.TrimSpace(string(out))); err != nil {
		b.Fatalf("tmux: the pane's process: %q", out)
	}
	return p
}

func (p *pane) screen() string {
	out, err := exec.Command("tmux", "capture-pane", "-p", "-t", p.session).Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// firstScreen is how long after its start the pane first satisfied cond,
// looked at every 50 ms.
func (p *pane) firstScreen(b *testing.B, within time.Duration, what string, cond func(string) bool) time.Duration {
	var at time.Time
	exited := false
	s, ok := poll(50*time.Millisecond, within, func() (string, bool) {
		s := p.screen()
		at = time.Now()
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", p.pid)); err != nil {
			exited = true
			return s, true
		}
		return s, cond(s)
	})
	if exited {
		b.Fatalf("%s: the program exited; screen:\n%s", what, s)
	}
	if !ok {
		b.Fatalf("%s: not within %s; screen:\n%s", what, within, s)
	}
	return at.Sub(p.started)
}

// k9sPodCount is the pod count in k9s's pods view title ("pods(all)[10,003]"),
// -1 when the title is not on the screen.
func k9sPodCount(screen string) int {
	m := regexp.MustCompile(`(?i)pods\(all\)\[([\d,]+)\]`).FindStringSubmatch(screen)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
	return n
}

// residentMiB is a process's resident memory (VmRSS) in MiB.
func residentMiB(pid int) float64 { return statusMiB(pid, "VmRSS:") }

// anonMiB is the part of a process's resident memory that is its own
// (RssAnon): VmRSS less its executable's pages mapped from the page cache
// (RssFile), which a second process of the same binary shares and the
// kernel can drop at will. On this machine (kernel 6.18, 8 MiB read-ahead)
// the executable is mapped in 2 MiB folios, so a Go binary of 100 MB shows
// most of it as resident however little of it runs.
func anonMiB(pid int) float64 { return statusMiB(pid, "RssAnon:") }

// statusMiB is one kB field of /proc/PID/status in MiB.
func statusMiB(pid int, field string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kib, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return float64(kib) / 1024
		}
	}
	return 0
}

// cpuSeconds is the user and system CPU a process has used, from
// /proc/PID/stat (clock ticks of 1/100 s on Linux).
func cpuSeconds(b *testing.B, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatalf("process %d: %v", pid, err)
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: utime and stime are the 14th and 15th fields.
	rest := string(data[bytes.LastIndexByte(data, ')')+2:])
	f := strings.Fields(rest)
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}

// cpuOver is each process's CPU seconds over window, scaled to a minute.
func cpuOver(b *testing.B, pids map[string]int, window time.Duration) map[string]float64 {
	before := map[string]float64{}
	for who, pid := range pids {
		before[who] = cpuSeconds(b, pid)
	}
	began := time.Now()
	waitUntil(began.Add(window))
	took := time.Since(began)
	used := map[string]float64{}
	for who, pid := range pids {
		used[who] = (cpuSeconds(b, pid) - before[who]) * float64(time.Minute) / float64(took)
	}
	return used
}

// waitUntil returns at t: the end of a measuring window, not a wait for
// something to happen.
func waitUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		time.Sleep(d)
	}
}

// churn creates churnPerSecond pods a second in churnNamespace, spread over
// the nodes, and deletes each churnKept creations later, until stopped.
// rate is the creations a second it achieved.
func churn(b *testing.B, cs kubernetes.Interface, site *sitebox.TestSite) (stop func(), rate func() float64) {
	ctx, cancel := context.WithCancel(context.Background())
	var created atomic.Int64
	var failed atomic.Value
	done := make(chan struct{})
	began := time.Now()
	var ended time.Time
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second / churnPerSecond)
		defer tick.Stop()
		var wg sync.WaitGroup
		defer wg.Wait()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Each request on its own: a slow answer does not slow the rate.
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := cs.CoreV1().Pods(churnNamespace).Create(ctx, benchPod(fmt.Sprintf("churn-%06d", i), site.Nodes[i%len(site.Nodes)].Name), metav1.CreateOptions{})
				if err == nil {
					created.Add(1)
				} else if ctx.Err() == nil {
					failed.Store(err)
				}
				if i >= churnKept {
					_ = cs.CoreV1().Pods(churnNamespace).Delete(ctx, fmt.Sprintf("churn-%06d", i-churnKept), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				}
			}()
		}
	}()
	stop = func() {
		ended = time.Now()
		cancel()
		<-done
		if err, ok := failed.Load().(error); ok {
			b.Fatalf("churn: %v", err)
		}
	}
	return stop, func() float64 { return float64(created.Load()) / ended.Sub(began).Seconds() }
}

// statusWall is the median wall time of three runs of sitecon status
// against the site and node-a's agent.
func statusWall(b *testing.B, site *sitebox.TestSite, socket string) time.Duration {
	var took []time.Duration
	for range 3 {
		cmd := exec.Command(sitecon, "status", "--kubeconfig", site.Kubeconfig(), "--agent-socket", socket)
		cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+b.TempDir())
		began := time.Now()
		out, err := cmd.CombinedOutput()
		took = append(took, time.Since(began))
		// status exits non-zero when it finds a problem (its doctor's
		// codes) or cannot read the cluster in time: a figure too, logged
		// with what it said, not the end of the run's other figures.
		if err != nil && !strings.Contains(string(out), "node-a") {
			b.Errorf("sitecon status: %v\n%s", err, out)
		}
	}
	slices.Sort(took)
	return took[1]
}

// loadSampler reads the machine's 1-minute load average every 5 s.
type loadSampler struct {
	mu      sync.Mutex
	samples []float64
	stop    chan struct{}
}

func sampleLoad() *loadSampler {
	l := &loadSampler{stop: make(chan struct{})}
	read := func() {
		data, err := os.ReadFile("/proc/loadavg")
		if err != nil {
			return
		}
		v, err := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
		if err != nil {
			return
		}
		l.mu.Lock()
		l.samples = append(l.samples, v)
		l.mu.Unlock()
	}
	read()
	go func() {
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-tick.C:
				read()
			}
		}
	}()
	return l
}

// report stops the sampling and reports the mean and the highest load
// average seen: on a shared machine they say how much else ran.
func (l *loadSampler) report(b *testing.B) {
	close(l.stop)
	l.mu.Lock()
	defer l.mu.Unlock()
	var sum float64
	for _, v := range l.samples {
		sum += v
	}
	reportMetric(b, sum/float64(len(l.samples)), "load1-mean")
	reportMetric(b, slices.Max(l.samples), "load1-max")
}

// zedkubePollEvery is how often EVE's zedkube lists the pods of its
// namespace to learn what its apps run.
const zedkubePollEvery = 10 * time.Second

// BenchmarkPeersDetection compares how soon a pod's Running is published
// and how many API requests a minute an idle node costs: sitecon's agent
// (its watches) against a reference that does what EVE's zedkube does, a
// LIST of its namespace's pods every 10 s, on the same 3-node site in the
// same run. Latency is from the benchmark's own watch seeing the pod
// Running and Ready to the agent publishing cluster_app_running (sitecon)
// or to the LIST that first returns it Running and Ready (reference). The
// requests are counted over an idle minute each: the reference's by the
// API server (apiserver_request_total, its namespaced pod LISTs), the
// agent's (node-a's, shipped timings, started 30 s before) by its client;
// the API server's total for the site alone and with the agent is logged
// beside them.
func BenchmarkPeersDetection(b *testing.B) {
	load := sampleLoad()
	defer load.report(b)
	opts := sitebox.TestOptions(b.TempDir())
	opts.ClusterName = "bench-peers"
	site, err := sitebox.StartTestSite(opts)
	if err != nil {
		b.Fatal(err)
	}
	defer site.Stop()
	site.WaitSettled(b, 2*time.Minute)
	cs := fastClient(b, site)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// API requests a minute. The API server's total (every client's) swings
	// by tens a minute on a loaded machine (its nodes' heartbeats come late
	// and bunch up), more than either side sends: each side's own requests
	// are counted where they can be told apart. The reference's are the
	// API server's namespaced LISTs of pods (nothing else on the site sends
	// one); the agent's, every request its client sends but watches.
	metrics := metricsClient(b, site)
	siteOnly := requestsOver(b, metrics, time.Minute)
	before := requestSeries(b, metrics)
	ref := startZedkubePoller(ctx, cs)
	waitUntil(time.Now().Add(time.Minute))
	ref.stop()
	refLists := seriesDelta(before, requestSeries(b, metrics), `verb="LIST"`, `resource="pods"`, `scope="namespace"`)
	agentAlone := startAgentWith(b, site, "node-a", b.TempDir(), b.TempDir(), nil)
	// The agent's start (its informers' lists, its first passes) is not idle.
	waitUntil(time.Now().Add(30 * time.Second))
	agentAlone.counter.reset()
	withAgent := requestsOver(b, metrics, time.Minute)
	agentRequests := agentAlone.counter.reset()
	agentAlone.stop()
	var agentTotal int
	for _, n := range agentRequests {
		agentTotal += n
	}
	b.Logf("API requests in a minute (API server, every client): the site alone %.0f, with sitecon's agent %.0f; the agent's own %d %v; the reference's LISTs %.0f",
		siteOnly, withAgent, agentTotal, agentRequests, refLists)
	reportMetric(b, float64(agentTotal), "sitecon-idle-requests/min")
	reportMetric(b, refLists, "zedkube-idle-requests/min")

	// Detection latency: the benchmark's own watch stamps each pod Running.
	readyAt := map[string]time.Time{}
	var readyMu sync.Mutex
	readyCh := make(chan string, 64)
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(kube.AppNamespace))
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			p := obj.(*corev1.Pod)
			if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !kube.PodReady(p) {
				return
			}
			readyMu.Lock()
			defer readyMu.Unlock()
			if _, seen := readyAt[p.Name]; !seen {
				readyAt[p.Name] = time.Now()
				readyCh <- p.Name
			}
		},
	})
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	watched := func(name string) time.Time {
		readyMu.Lock()
		defer readyMu.Unlock()
		return readyAt[name]
	}

	const samples = 30
	reportMetric(b, float64(samples), "samples")
	siteconLatency := siteconDetection(b, site, cs, readyCh, watched, samples)
	reportMetric(b, percentileMs(siteconLatency, 0.50), "sitecon-p50-ms")
	reportMetric(b, percentileMs(siteconLatency, 0.99), "sitecon-p99-ms")

	// The reference: pods made 1.1 s apart (so their starts fall all over
	// the poll's 10 s), each published by the first LIST showing it.
	ref = startZedkubePoller(ctx, cs)
	defer ref.stop()
	var names []string
	for i := range samples {
		name := fmt.Sprintf("zedkube-ref-%02d", i)
		names = append(names, name)
		if _, err := cs.CoreV1().Pods(kube.AppNamespace).Create(ctx, benchPod(name, "node-a"), metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		waitUntil(time.Now().Add(1100 * time.Millisecond))
	}
	refLatency := until(b, time.Minute, "the reference published every pod", func() ([]time.Duration, bool) {
		var lat []time.Duration
		for _, n := range names {
			published, ok := ref.publishedAt(n)
			if !ok || watched(n).IsZero() {
				return lat, false
			}
			lat = append(lat, max(published.Sub(watched(n)), 0))
		}
		return lat, true
	}, func(l []time.Duration) string { return fmt.Sprintf("%d of %d", len(l), samples) })
	reportMetric(b, percentileMs(refLatency, 0.50), "zedkube-p50-ms")
	reportMetric(b, percentileMs(refLatency, 0.99), "zedkube-p99-ms")
}

// siteconDetection runs node-a's agent in this process with one app, makes
// the app's pod samples times and returns, for each, the time from the
// watch seeing it Running to the agent publishing cluster_app_running, as
// BenchmarkDetectionLatency does.
func siteconDetection(b *testing.B, site *sitebox.TestSite, cs kubernetes.Interface, readyCh <-chan string, watched func(string) time.Time, samples int) []time.Duration {
	ctx := context.Background()
	appsDir, logDir := b.TempDir(), b.TempDir()
	app := apps.AppConfig{UUID: "be0c0000-0000-4000-8000-000000000002", DisplayName: "bench-peers", Activate: true,
		Kind: apps.KindContainer, Image: "registry.local/bench:1", DesignatedNodeID: "be0c0000-0000-4000-8000-0000000000ff"}
	writeJSON(b, filepath.Join(appsDir, "apps", "bench.json"), app)
	sa := startSiteAgent(b, site, "node-a", appsDir, logDir)
	defer sa.stop()
	appsPart := until(b, 30*time.Second, "the agent's apps part started", func() (*apps.Controller, bool) {
		appsPart := sa.agent.Apps()
		return appsPart, appsPart != nil
	}, nil)
	changes, unsubscribe := appsPart.Subscribe()
	defer unsubscribe()
	waitState := func(running bool) time.Time {
		deadline := time.After(30 * time.Second)
		for {
			for _, st := range appsPart.Apps() {
				if st.UUID == app.UUID && st.ClusterAppRunning == running && st.KubeStatus != apps.KubeUnknown {
					return st.ChangedAt
				}
			}
			select {
			case <-changes:
			case <-deadline:
				b.Fatalf("agent did not publish cluster_app_running=%v", running)
			}
		}
	}
	waitState(false)
	var latencies []time.Duration
	for i := range samples {
		name := fmt.Sprintf("bench-peers-%02d", i)
		pod := benchPod(name, "node-a")
		pod.Labels = map[string]string{kube.LabelAppUUID: app.UUID, kube.LabelAppName: app.DisplayName}
		if _, err := cs.CoreV1().Pods(kube.AppNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		select {
		case <-readyCh:
		case <-time.After(30 * time.Second):
			b.Fatal("pod never turned Running")
		}
		published := waitState(true)
		latencies = append(latencies, max(published.Sub(watched(name)), 0))
		if err := cs.CoreV1().Pods(kube.AppNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			b.Fatal(err)
		}
		waitState(false)
	}
	return latencies
}

func percentileMs(d []time.Duration, p float64) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
}

// zedkubePoller is the reference: a LIST of the apps namespace's pods every
// 10 s, each pod published as running when a list first shows it Running
// and Ready.
type zedkubePoller struct {
	mu        sync.Mutex
	published map[string]time.Time
	cancel    context.CancelFunc
	done      chan struct{}
}

func startZedkubePoller(ctx context.Context, cs kubernetes.Interface) *zedkubePoller {
	ctx, cancel := context.WithCancel(ctx)
	z := &zedkubePoller{published: map[string]time.Time{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(z.done)
		tick := time.NewTicker(zedkubePollEvery)
		defer tick.Stop()
		for {
			l, err := cs.CoreV1().Pods(kube.AppNamespace).List(ctx, metav1.ListOptions{})
			now := time.Now()
			if err == nil {
				z.mu.Lock()
				for i := range l.Items {
					p := &l.Items[i]
					if _, seen := z.published[p.Name]; !seen && p.Status.Phase == corev1.PodRunning && kube.PodReady(p) {
						z.published[p.Name] = now
					}
				}
				z.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return z
}

func (z *zedkubePoller) publishedAt(name string) (time.Time, bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	t, ok := z.published[name]
	return t, ok
}

func (z *zedkubePoller) stop() {
	z.cancel()
	<-z.done
}

// metricsClient reads the API server's /metrics as the site's admin.
func metricsClient(b *testing.B, site *sitebox.TestSite) rest.Interface {
	cs, err := kubernetes.NewForConfig(site.Config)
	if err != nil {
		b.Fatal(err)
	}
	return cs.CoreV1().RESTClient()
}

// requestsOver is how many requests the API server counted
// (apiserver_request_total, every label summed) over window.
func requestsOver(b *testing.B, metrics rest.Interface, window time.Duration) float64 {
	before := requestTotal(b, metrics)
	waitUntil(time.Now().Add(window))
	return requestTotal(b, metrics) - before
}

// requestSeries is apiserver_request_total by its labels.
func requestSeries(b *testing.B, metrics rest.Interface) map[string]float64 {
	var code int
	body, err := metrics.Get().AbsPath("/metrics").Do(context.Background()).StatusCode(&code).Raw()
	if err != nil || code != http.StatusOK {
		b.Fatalf("the API server's metrics: %d %v", code, err)
	}
	series := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		cut := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[cut+1:], 64); err == nil {
			series[line[:cut]] = v
		}
	}
	return series
}

// seriesDelta is how much the series holding every one of labels grew.
func seriesDelta(before, after map[string]float64, labels ...string) float64 {
	var d float64
	for key, v := range after {
		all := true
		for _, l := range labels {
			all = all && strings.Contains(key, l)
		}
		if all {
			d += v - before[key]
		}
	}
	return d
}

func requestTotal(b *testing.B, metrics rest.Interface) float64 {
	var total float64
	for _, v := range requestSeries(b, metrics) {
		total += v
	}
	return total
}

// wholeOverview says whether a screen is sitecon's whole overview: every
// node counted (readyNodes) and its alerts drawn, the cluster read whole.
func wholeOverview(readyNodes *regexp.Regexp) func(string) bool {
	return func(s string) bool {
		return readyNodes.MatchString(s) && strings.Contains(s, "Alerts") && !strings.Contains(s, views.ReadingTheCluster)
	}
}
