//go:build faults

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// sitebox's agents on a site that loses power: every node's kubelet, etcd
// member and agent are killed at once (PowerOff), then the devices boot
// again in another order (PowerOn); and the same for two of the three
// servers, which takes etcd's quorum with them. Each time every node must
// be Ready, every agent connected (READY on its socket) and both apps
// running on their designated nodes again within powerCutRecoveryBound of
// the last power-on. The time is logged: `make faults` prints it.
func TestSitePowerCutComesBack(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	appsDir := t.TempDir()
	web := apps.AppConfig{UUID: "e2e00000-0000-4000-8000-0000000000f1", DisplayName: "power-web", Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/web:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), Affinity: apps.AffinityPreferred}
	vm := apps.AppConfig{UUID: "e2e00000-0000-4000-8000-0000000000f2", DisplayName: "power-vm", Activate: true, Kind: apps.KindVM,
		Image: "registry.local/vm:1", DesignatedNodeID: sitebox.NodeUUID("node-c"), Affinity: apps.AffinityPreferred,
		Resources: apps.AppResources{Memory: "256Mi"}}
	appConfigs := map[string]apps.AppConfig{web.DisplayName: web, vm.DisplayName: vm}
	for name, a := range appConfigs {
		writeJSON(t, filepath.Join(appsDir, "apps", name+".json"), a)
	}
	if err := os.MkdirAll(filepath.Join(appsDir, "volumes"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The agents' move-after is long: a power cut is not a node loss the
	// apps should run away from.
	if err := site.StartAgents(sitecon, appsDir, sitebox.QuickAgentTimings(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	nodes := []string{"node-a", "node-b", "node-c"}
	t.Cleanup(func() {
		for _, n := range nodes {
			if err := site.PowerOn(n); err != nil {
				t.Errorf("power on %s: %v", n, err)
			}
		}
		cs := clientset(t, site)
		for name := range appConfigs {
			_ = os.Remove(filepath.Join(appsDir, "apps", name+".json"))
		}
		poll(200*time.Millisecond, 30*time.Second, func() (int, bool) {
			deps, err := cs.AppsV1().Deployments(kube.AppNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: apps.LabelManagedBy + "=" + apps.FieldManager})
			return len(deps.Items), err == nil && len(deps.Items) == 0
		})
		if err := site.StopAgents(); err != nil {
			t.Error(err)
		}
		// An agent the power cut killed never gives the stats-leader
		// lease up, and one stopped here may end before its release
		// is sent: the next tests' agents would wait out its 30 s.
		clearStatsLeaderLease(t, cs)
		cleanupApps(t, cs, dynClient(t, site), nil, appsDir, appConfigs)
		site.WaitSettled(t, 120*time.Second)
	})

	appsOf := func(node string) (map[string]apps.PublishedApp, error) {
		var list []apps.PublishedApp
		if err := getSocketErr(site.AgentSocket(node), localapi.PathApps, &list); err != nil {
			return nil, err
		}
		out := map[string]apps.PublishedApp{}
		for _, a := range list {
			out[a.Name] = a
		}
		return out, nil
	}
	// back: every node Ready, every agent READY, each app running on its
	// designated node as every agent sees it.
	back := func() (string, bool) {
		cs := clientset(t, site)
		for _, n := range nodes {
			node, err := cs.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
			if err != nil {
				return "node " + n + ": " + err.Error(), false
			}
			if !kube.NodeIsReady(node) {
				return "node " + n + " not Ready", false
			}
			var st apps.PublishedNode
			if err := getSocketErr(site.AgentSocket(n), localapi.PathNode, &st); err != nil {
				return n + "'s agent: " + err.Error(), false
			}
			if st.Status != apps.PublishedReady {
				return fmt.Sprintf("%s's agent says %s (%s)", n, st.Status, st.Reason), false
			}
			seen, err := appsOf(n)
			if err != nil {
				return n + "'s agent apps: " + err.Error(), false
			}
			for name, want := range map[string]string{"power-web": "node-b", "power-vm": "node-c"} {
				a, ok := seen[name]
				if !ok || a.KubeStatus != apps.KubeRunning || a.Node != want {
					// The pods as the API server has them, with their
					// conditions: what the kubelet and scheduler said.
					return fmt.Sprintf("%s's agent sees %s: %+v (want running on %s); %s", n, name, a, want,
						podsInDetail(cs, kube.AppNamespace)), false
				}
			}
		}
		return "", true
	}
	until(t, 90*time.Second, "the apps running before the power cut", back, func(s string) string { return s })

	for _, c := range []struct {
		name    string
		off, on []string
	}{
		{"the whole site", nodes, []string{"node-c", "node-a", "node-b"}},
		{"two of three servers, the seed among them", []string{"node-a", "node-b"}, []string{"node-b", "node-a"}},
	} {
		if err := site.PowerOff(c.off...); err != nil {
			t.Fatal(err)
		}
		for _, n := range c.off {
			if _, err := appsOf(n); err == nil {
				t.Fatalf("%s is powered off, but its agent answers", n)
			}
		}
		// The cut takes etcd's quorum: a quorum read (a LIST without a
		// resourceVersion) fails.
		cs := clientset(t, site)
		_ = until(t, 30*time.Second, "the API without etcd quorum", func() (error, bool) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return err, err != nil
		}, func(error) string { return "a quorum read still succeeds" })
		// The outage lasts past the node-monitor grace period: when the
		// quorum is back every node's lease is stale, as after a real cut.
		<-time.After(powerCutLength)
		for _, n := range c.on {
			if err := site.PowerOn(n); err != nil {
				t.Fatal(err)
			}
		}
		on := time.Now()
		until(t, powerCutRecoveryBound, c.name+" back after a power cut", back, func(s string) string { return s })
		t.Logf("power cut of %s: every node Ready, agents READY and the apps running %s after the last power-on",
			c.name, time.Since(on).Round(100*time.Millisecond))
	}
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

// powerCutLength is how long the power stays off: longer than the shared
// site's node-monitor grace period (12 s), shorter than that plus its
// eviction toleration (10 s).
const powerCutLength = 15 * time.Second

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
