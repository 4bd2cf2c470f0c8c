package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/agent/statusserver"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/netcfg"
	"github.com/sitecon/sitecon/test/netns"
	"github.com/sitecon/sitecon/test/sitebox"
)

func setServerRoles(ctx context.Context, cs kubernetes.Interface, node string, on bool) error {
	value := `"true"`
	if !on {
		value = "null"
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":%s,"node-role.kubernetes.io/etcd":%s,"node-role.kubernetes.io/master":%s}}}`, value, value, value)
	_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// Three agents form a cluster in network namespaces: the joiners start k3s
// only once the seed's /status names the cluster; an agent pointed at a seed
// of another cluster never starts k3s; a node that leaves takes its address
// and firewall table with it.
func TestBootstrapThreeAgentsInNamespaces(t *testing.T) {
	netns.Skip(t)
	site := sitebox.Shared(t)
	cs, err := kubernetes.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	standin := buildStandin(t)
	hosts := netns.NewLAN(t, "a", "b", "c", "d")

	// No node has registered yet: their Nodes have no server roles, so
	// their /status is empty until the test plays k3s registering them. (A
	// member answering would rightly keep the seed from initialising.)
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		if err := setServerRoles(ctx, cs, n, false); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = setServerRoles(context.Background(), cs, n, true) })
	}

	plan, err := formation.Plan(formation.FormRequest{
		ClusterName: "site1", Interface: netns.Interface,
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The agents, not the test site, write the cluster's record.
	putClusterRecordAside(t, cs)
	cms := cs.CoreV1().ConfigMaps(kube.AppNamespace)
	// node-d belongs to another cluster whose seed would be at the same address.
	foreign, err := formation.Plan(formation.FormRequest{
		ClusterName: "other", Interface: netns.Interface,
		Nodes: []formation.FormNode{{Name: "node-x"}, {Name: "node-y"}, {Name: "node-z"}, {Name: "node-d"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	bundles := append(slices.Clone(plan.Nodes), foreign.Nodes[3])

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	agents := make([]*nodeAgent, len(hosts))
	for i, h := range hosts {
		agents[i] = startNodeAgent(t, ctx, &wg, site.Kubeconfig(), standin, h, bundles[i], nil, func(o *agent.Options) {
			o.ConfigAbsentGrace = time.Second
		})
	}
	seed, joiners, outsider := agents[0], agents[1:3], agents[3]

	// The seed starts its k3s at once, in the seed role.
	waitState(t, seed, 20*time.Second, "seed starts k3s", func(st agent.State) bool {
		return st.Role == k3s.RoleSeed && st.K3sStarts > 0 && st.ClusterIPReady
	})
	// The stand-in records its start as its first act; wait for the record.
	if got := seed.waitK3sStarted(t); len(got) != 1 {
		t.Fatalf("seed k3s starts = %d, want 1", len(got))
	}
	seedConfig, err := os.ReadFile(filepath.Join(seed.dir, "k3s", "config.yaml"))
	if err != nil || !strings.Contains(string(seedConfig), "cluster-init: true") {
		t.Errorf("seed's k3s config lacks cluster-init (err %v):\n%s", err, seedConfig)
	}
	// The joiners wait: the seed's /status is still empty.
	for _, j := range joiners {
		st := waitState(t, j, 10*time.Second, "waiting for the seed", func(st agent.State) bool {
			return st.Phase == agent.PhaseWaitingSeed && st.Attempts >= 2 && strings.Contains(st.LastError, "not a cluster member yet")
		})
		if st.K3sStarts != 0 || len(j.starts(t)) != 0 {
			t.Fatalf("%s started k3s before the seed said cluster:<uuid>", j.host.Name)
		}
	}

	// A technician sees the wait in sitecon status.
	out, errOut, err := runSitecon(t, "status", "-o", "json", "--kubeconfig", site.Kubeconfig(), "--agent-socket", joiners[0].socket)
	if code := exitCode(err); code != 0 && code != 1 { // 1: something needs attention
		t.Fatalf("sitecon status: %v\n%s", err, errOut)
	}
	var report struct {
		Agent struct {
			Running   bool   `json:"running"`
			Phase     string `json:"phase"`
			LastError string `json:"lastError"`
			Attempts  int    `json:"attempts"`
		} `json:"agent"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatal(err)
	}
	if a := report.Agent; !a.Running || a.Phase != string(agent.PhaseWaitingSeed) || !strings.Contains(a.LastError, "not a cluster member yet") || a.Attempts < 2 {
		t.Errorf("sitecon status agent = %+v, want waiting-for-seed with the reason", a)
	}
	table, _, _ := runSitecon(t, "status", "--kubeconfig", site.Kubeconfig(), "--agent-socket", filepath.Join(t.TempDir(), "none.sock"))
	if !strings.Contains(table, "Agent:") || !strings.Contains(table, "not running on this node (no agent socket at") {
		t.Errorf("status without an agent should say so:\n%s", table)
	}

	// k3s on the seed registers node-a as a server: /status names the cluster.
	registered := time.Now()
	if err := setServerRoles(ctx, cs, "node-a", true); err != nil {
		t.Fatal(err)
	}
	// The joiners' Nodes register as servers as they join.
	for _, n := range []string{"node-b", "node-c"} {
		if err := setServerRoles(ctx, cs, n, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range joiners {
		waitState(t, j, 20*time.Second, "joined", func(st agent.State) bool { return st.Phase == agent.PhaseJoined })
		starts := j.waitK3sStarted(t)
		if len(starts) != 1 || starts[0].Before(registered) {
			t.Errorf("%s started k3s at %v, want once, after the seed registered at %s", j.host.Name, starts, registered.Format(time.RFC3339Nano))
		}
	}
	waitState(t, seed, 20*time.Second, "seed joined", func(st agent.State) bool { return st.Phase == agent.PhaseJoined })
	// The joiners held a formation's token (no CA existed to pin): each
	// verified the CA the seed's agent vouched for and gave k3s the token
	// pinned to the CA the seed's k3s made, as k3s's secure form.
	seedCA, err := os.ReadFile(filepath.Join(seed.dataDir, "server", "tls", "server-ca.crt"))
	if err != nil {
		t.Fatalf("the seed's k3s made no cluster CA: %v", err)
	}
	for _, j := range joiners {
		k3sConfig, err := os.ReadFile(filepath.Join(j.dir, "k3s", "config.yaml"))
		if want := `token: "` + config.PinToken(plan.Token.Reveal(), config.CAHash(seedCA)) + `"`; err != nil || !strings.Contains(string(k3sConfig), want) {
			t.Errorf("%s's k3s token does not pin the seed's CA %s (err %v)", j.host.Name, config.CAHash(seedCA), err)
		}
	}
	// The joined servers got the server CA's key with k3s's bootstrap data,
	// as every k3s server holds it; with it they sign membership answers,
	// which only servers may give.
	seedCAKey, err := os.ReadFile(statusserver.ServerCAKeyFile(seed.opts.K3sPaths))
	if err != nil {
		t.Fatalf("the seed's k3s made no server CA key: %v", err)
	}
	membershipKey, err := config.NewMembershipKey(plan.ClusterID, seedCAKey)
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range joiners {
		until(t, 10*time.Second, j.host.Name+" holds the server CA key", func() ([]byte, bool) {
			got, _ := os.ReadFile(statusserver.ServerCAKeyFile(j.opts.K3sPaths))
			return got, bytes.Equal(got, seedCAKey)
		}, func(got []byte) string { return fmt.Sprintf("%d bytes, not the seed's", len(got)) })
		ask := statusserver.MembershipQuery{Key: membershipKey, Node: plan.Nodes[i+1].NodeName, UUID: plan.Nodes[i+1].NodeUUID, Dial: seed.host.DialContext}
		addr := netip.AddrPortFrom(netip.MustParseAddr(fmt.Sprintf("10.244.244.%d", i+2)), config.StatusPort)
		until(t, 10*time.Second, j.host.Name+" signs a membership answer", func() ([]statusserver.PeerAnswer, bool) {
			answers := ask.Ask(ctx, []netip.AddrPort{addr})
			return answers, len(answers) == 1 && answers[0].Answer != nil
		}, func(answers []statusserver.PeerAnswer) string { return fmt.Sprintf("answers %+v", answers) })
	}

	// The agent's state on its socket says the same.
	st, err := localapi.Get[agent.State](ctx, joiners[0].socket, localapi.PathAgent)
	if err != nil || st.Phase != agent.PhaseJoined || st.Role != k3s.RoleServer || st.ClusterIP != "10.244.244.2" {
		t.Errorf("socket state = %+v, %v", st, err)
	}
	membersProveLife(t, seed, plan, agents)
	// The agents that reach the cluster elect one stats leader among them.
	if leaders, one := poll(pollEvery, 30*time.Second, func() ([]string, bool) {
		var leaders []string
		for _, n := range agents {
			if n.agent.LeaderState().IsLeader {
				leaders = append(leaders, n.host.Name)
			}
		}
		return leaders, len(leaders) == 1
	}); !one {
		t.Errorf("the three members elect one stats leader: not within 30s; leaders %v", leaders)
	}
	// The members recorded the cluster: the seed created the ConfigMap from
	// its config, each joiner added itself; the outsider did not.
	record, all := poll(pollEvery, 20*time.Second, func() (map[string]string, bool) {
		cm, err := cms.Get(ctx, kube.ClusterConfigMapName, metav1.GetOptions{})
		if err != nil {
			return nil, false
		}
		nodes := strings.Split(cm.Data[kube.ClusterKeyNodes], ",")
		slices.Sort(nodes)
		return cm.Data, slices.Equal(nodes, []string{"node-a", "node-b", "node-c"})
	})
	// The cluster's one failover timeout: the first member's.
	timeout := (apps.Options{}).EffectiveFailoverTimeout().String()
	if !all || record[kube.ClusterKeyID] != plan.ClusterID || record[kube.ClusterKeyJoinServerIP] != "10.244.244.1" ||
		record[kube.ClusterKeySeedNode] != "node-a" || record[kube.ClusterKeyName] != "site1" || record[kube.ClusterKeyFailoverTimeout] != timeout {
		t.Errorf("cluster record written by the agents = %v (want cluster %s, seed node-a at 10.244.244.1, nodes a-c, failover timeout %s)", record, plan.ClusterID, timeout)
	}
	if info, err := os.Stat(joiners[0].socket); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v %v", info, err)
	}

	// An agent whose seed answers for another cluster never starts k3s.
	st = waitState(t, outsider, 20*time.Second, "foreign cluster refused", func(st agent.State) bool {
		return st.Phase == agent.PhaseError && strings.Contains(st.LastError, "another cluster owns the join address")
	})
	if st.K3sStarts != 0 || len(outsider.starts(t)) != 0 {
		t.Errorf("node-d started k3s against a foreign seed")
	}

	// Addresses and firewall tables are in place on every member.
	for i, n := range agents[:3] {
		want := netip.MustParsePrefix(fmt.Sprintf("10.244.244.%d/28", i+1))
		var have []netip.Prefix
		if err := n.host.Do(func() (err error) { have, err = netcfg.InterfacePrefixes(netns.Interface); return err }); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(have, want) {
			t.Errorf("%s addresses %v lack %s", n.host.Name, have, want)
		}
		if out, err := n.host.Exec("nft", "list", "table", "inet", netcfg.TableName); err != nil || !strings.Contains(out, "10.244.244.0/28 tcp dport 12346") {
			t.Errorf("%s firewall: %v\n%s", n.host.Name, err, out)
		}
	}

	// A broken config on a member is reported and changes nothing.
	before := joiners[0].agent.State()
	if err := os.WriteFile(joiners[0].config, []byte(`{"cluster_name": "site1", "cluster_ip_prefix": "10.244.244.99/28"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	st = waitState(t, joiners[0], 10*time.Second, "config rejected", func(st agent.State) bool { return st.ConfigError != "" })
	if st.Phase != agent.PhaseJoined || st.K3sStarts != before.K3sStarts || st.ClusterIP != before.ClusterIP || !strings.Contains(st.ConfigError, "cluster_id: missing") {
		t.Errorf("an invalid config disturbed the running node: before %+v after %+v", before, st)
	}
	if len(joiners[0].starts(t)) != 1 {
		t.Errorf("k3s restarted after an invalid config")
	}

	// node-c leaves: its config is removed.
	leaver := joiners[1]
	if err := os.Remove(leaver.config); err != nil {
		t.Fatal(err)
	}
	waitState(t, leaver, 20*time.Second, "left", func(st agent.State) bool { return st.Phase == agent.PhaseLeft && !st.ClusterIPReady })
	var have []netip.Prefix
	if err := leaver.host.Do(func() (err error) { have, err = netcfg.InterfacePrefixes(netns.Interface); return err }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(have, []netip.Prefix{netip.MustParsePrefix(leaver.host.LANAddr + "/24")}) {
		t.Errorf("after leaving, %s still has %v", leaver.host.Name, have)
	}
	if out, err := leaver.host.Exec("nft", "list", "table", "inet", netcfg.TableName); err == nil {
		t.Errorf("after leaving the firewall table is still there:\n%s", out)
	}
}

// A seed never initialises its cluster twice. A seed device that was part
// of its cluster before (formed marker beside its config) but lost its k3s
// data refuses; so does a fresh device given the seed's config while a
// member of the same cluster answers /status on the prefix. Neither starts
// k3s, and each says why in its state.
func TestBootstrapNeverInitialisesTwice(t *testing.T) {
	netns.Skip(t)
	site := sitebox.Shared(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	standin := buildStandin(t)
	hosts := netns.NewLAN(t, "a", "b", "c")
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	// Host a: the seed of a cluster of its own prefix, with its marker and
	// no k3s data.
	lone, err := formation.Plan(formation.FormRequest{ClusterName: "lone", Interface: netns.Interface, Prefix: "10.244.245.0/28",
		Nodes: []formation.FormNode{{Name: "node-m"}, {Name: "node-n"}, {Name: "node-o"}}})
	if err != nil {
		t.Fatal(err)
	}
	marked := startNodeAgent(t, ctx, &wg, site.Kubeconfig(), standin, hosts[0], lone.Nodes[0], func(configPath string) {
		if err := formation.MarkFormed(deviceRecords(configPath).FormedMarkerFile(), formation.FormedMarker{ClusterID: lone.ClusterID,
			NodeName: "node-m", How: "initialised the cluster"}); err != nil {
			t.Fatal(err)
		}
	}, nil)

	// Hosts b and c: node-b is a live member of site1 (sitebox's node-b is
	// a control-plane + etcd Node, so its /status names the cluster); c is
	// a fresh device given the seed's (node-a's) config.
	plan, err := formation.Plan(formation.FormRequest{ClusterName: "site1", Interface: netns.Interface,
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	member := startNodeAgent(t, ctx, &wg, site.Kubeconfig(), standin, hosts[1], plan.Nodes[1], nil, nil)
	probe := formation.MemberProbe{ClusterID: plan.ClusterID, Dial: hosts[1].DialContext}
	memberIP := netip.MustParseAddr("10.244.244.2")
	until(t, 30*time.Second, "node-b's /status names its cluster", func() (netip.Addr, bool) {
		found := probe.Find(ctx, []netip.Addr{memberIP})
		return found, found == memberIP
	}, func(found netip.Addr) string {
		return fmt.Sprintf("the probe found %v; node-b's state %+v", found, member.agent.State())
	})
	fresh := startNodeAgent(t, ctx, &wg, site.Kubeconfig(), standin, hosts[2], plan.Nodes[0], nil, nil)

	for _, c := range []struct {
		n    *nodeAgent
		why  string
		from string
	}{
		{marked, "node-m was part of cluster " + lone.ClusterID + " before (initialised the cluster", "its marker"},
		{fresh, "10.244.244.2 answers /status for cluster " + plan.ClusterID, "a member on the prefix"},
	} {
		st := waitState(t, c.n, 30*time.Second, "refuses to initialise ("+c.from+")", func(st agent.State) bool {
			return st.Phase == agent.PhaseError && strings.Contains(st.LastError, c.why)
		})
		if !strings.Contains(st.LastError, "sitecon seed") || st.K3sStarts != 0 || len(c.n.starts(t)) != 0 {
			t.Errorf("%s: k3s started (%d) or the refusal says no way out: %q", c.n.host.Name, st.K3sStarts, st.LastError)
		}
		if data, err := os.ReadFile(filepath.Join(c.n.dir, "k3s", "config.yaml")); err == nil && strings.Contains(string(data), "cluster-init") {
			t.Errorf("%s rendered cluster-init:\n%s", c.n.host.Name, data)
		}
	}
	// The fresh device remembers the member it saw: a reboot of that
	// member must not open the door to a second cluster.
	m, ok, err := formation.ReadFormedMarker(deviceRecords(fresh.config).FormedMarkerFile())
	if err != nil || !ok || m.ClusterID != plan.ClusterID || !strings.Contains(m.How, "10.244.244.2") {
		t.Errorf("the fresh device's marker = %+v (present %v, %v)", m, ok, err)
	}
}
