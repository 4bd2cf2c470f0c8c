package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/workloads"
	"github.com/sitecon/sitecon/test/netns"
)

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

// starts reads the stand-in's record of its starts (standinStarts).
func (n *nodeAgent) starts(t *testing.T) []time.Time {
	t.Helper()
	var out []time.Time
	for _, s := range standinStarts(t, n.dataDir) {
		out = append(out, s.at)
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

// standinBuild is the k3s stand-in, built once per test binary beside the
// sitecon binary under test (removed with it).
var standinBuild struct {
	sync.Once
	bin string
	err error
}

// buildStandin is the k3s stand-in's binary, built on the first call.
func buildStandin(t *testing.T) string {
	t.Helper()
	bin, err := buildStandinOnce()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// buildStandinOnce builds the stand-in on the first call (buildStandin,
// buildSiteboxCLI).
func buildStandinOnce() (string, error) {
	standinBuild.Do(func() {
		bin := filepath.Join(binDir, "k3s")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/sitecon/sitecon/test/k3sstandin").CombinedOutput()
		if err != nil {
			standinBuild.err = fmt.Errorf("build k3s stand-in: %v\n%s", err, out)
			return
		}
		standinBuild.bin = bin
	})
	return standinBuild.bin, standinBuild.err
}

// standinStart is one line of the k3s stand-in's record of its starts.
type standinStart struct {
	at   time.Time
	line string
}

// standinStarts reads the record the stand-in keeps in its data dir.
func standinStarts(t *testing.T, dataDir string) []standinStart {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dataDir, "standin-starts"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []standinStart
	// Whole lines only: a read may land between the create and the write.
	for _, line := range strings.Split(string(data[:bytes.LastIndexByte(data, '\n')+1]), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, strings.Fields(line)[0])
		if err != nil {
			t.Fatalf("stand-in record %q: %v", line, err)
		}
		out = append(out, standinStart{at: at, line: line})
	}
	return out
}

// standinSite is devices on one LAN, each in a network namespace of its
// own, and the plan that forms cluster "site1" of three servers on
// netns.Interface: what the bootstrap tests run node agents on, each with
// the k3s stand-in as its k3s, reaching the cluster through kubeconfig.
type standinSite struct {
	hosts      []*netns.Host
	plan       *formation.FormPlan
	standin    string
	kubeconfig string
}

// newStandinSite puts the devices named hosts on a LAN (netns.NewLAN) and
// plans cluster site1 of the servers named nodes.
func newStandinSite(t *testing.T, kubeconfig string, hosts []string, nodes ...string) *standinSite {
	t.Helper()
	s := &standinSite{standin: buildStandin(t), kubeconfig: kubeconfig, hosts: netns.NewLAN(t, hosts...)}
	req := formation.FormRequest{ClusterName: "site1", Interface: netns.Interface}
	for _, n := range nodes {
		req.Nodes = append(req.Nodes, formation.FormNode{Name: n})
	}
	plan, err := formation.Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	s.plan = plan
	return s
}

// start runs, until ctx ends, the agent of the plan's node-th node on the
// device hosts[host] (prepare and tune as for startNodeAgent).
func (s *standinSite) start(t *testing.T, ctx context.Context, wg *sync.WaitGroup, host, node int,
	prepare func(configPath string), tune func(*agent.Options)) *nodeAgent {
	t.Helper()
	return startNodeAgent(t, ctx, wg, s.kubeconfig, s.standin, s.hosts[host], s.plan.Nodes[node], prepare, tune)
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
