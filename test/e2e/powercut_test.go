package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/netcfg"
	"github.com/sitecon/sitecon/test/netns"
	"github.com/sitecon/sitecon/test/sitebox"
)

// hasBeenMember puts on a device's disk what a server that has been part of
// its cluster keeps across a power cut: the formed marker of a node that
// joined, and with etcdData k3s's etcd member data.
func hasBeenMember(t *testing.T, clusterID, node string, etcdData bool) func(configPath string) {
	return func(configPath string) {
		t.Helper()
		if etcdData {
			data := filepath.Join(filepath.Dir(configPath), "k3s-data", "server", "db", "etcd", "member")
			if err := os.MkdirAll(data, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if err := formation.MarkFormed(deviceRecords(configPath).FormedMarkerFile(), formation.FormedMarker{ClusterID: clusterID, NodeName: node,
			How: "joined the cluster", Joined: true}); err != nil {
			t.Fatal(err)
		}
	}
}

// keepsClusterCA puts on a device's disk the cluster CA its k3s kept when
// it joined (a server's under server/tls): what a restarted member pins
// k3s's token to when it has no etcd data to restart from.
func keepsClusterCA(t *testing.T, configPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "k3s-server-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(configPath), "k3s-data", "server", "tls", "server-ca.crt")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The whole site lost power. When it comes back the seed's k3s cannot reach
// etcd quorum without the other servers, so its API (here: the site's API
// server, stopped) does not answer and its informer never syncs. Servers
// that have been members start k3s at once, without waiting on the seed's
// /status (k3s restarts a joined server from its own etcd data); a member
// answers /status from its durable record while the API does not answer,
// so a re-provisioned seed device (its config restored, no marker, no etcd
// data) finds the members and refuses to initialise a second cluster.
func TestPowerCutMembersStartWithoutTheSeed(t *testing.T) {
	netns.Skip(t)
	site := sitebox.Shared(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	devices := newStandinSite(t, site.Kubeconfig(), []string{"a", "b", "c"}, "node-a", "node-b", "node-c")
	hosts, plan := devices.hosts, devices.plan

	// No quorum: the API answers nobody while the site comes back.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = site.StartAPIServer(ctx) // refused when it already runs
		site.WaitSettled(t, 90*time.Second)
	})
	if err := site.StopAPIServer(); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// node-b and node-c were members; node-a's device was re-provisioned:
	// its config is back, its marker and etcd data are not. The members
	// boot first.
	members := []*nodeAgent{
		devices.start(t, ctx, &wg, 1, 1, hasBeenMember(t, plan.ClusterID, "node-b", true), nil),
		devices.start(t, ctx, &wg, 2, 2, hasBeenMember(t, plan.ClusterID, "node-c", true), nil),
	}

	// Bound: the members' k3s start within 20 s of their agents (at the
	// tests' backoff of 100-500 ms; the shipped backoff adds seconds).
	for _, m := range members {
		st := waitState(t, m, 20*time.Second, "k3s started without the seed", func(st agent.State) bool {
			return st.K3sStarts > 0
		})
		if st.Role != k3s.RoleServer {
			t.Errorf("%s role %s, want server", m.host.Name, st.Role)
		}
		m.waitK3sStarted(t)
	}

	// A member's /status names the cluster from its durable record (asked
	// from node-c, which has its cluster address).
	probe := formation.MemberProbe{ClusterID: plan.ClusterID, Dial: hosts[2].DialContext}
	memberIP := netip.MustParseAddr("10.244.244.2")
	until(t, 20*time.Second, "node-b's /status names its cluster with the API down", func() (netip.Addr, bool) {
		found := probe.Find(ctx, []netip.Addr{memberIP})
		return found, found == memberIP
	}, func(found netip.Addr) string {
		return fmt.Sprintf("the probe found %v; node-b's state %+v", found, members[0].agent.State())
	})

	// The re-provisioned seed boots while the members are up without
	// quorum.
	seed := devices.start(t, ctx, &wg, 0, 0, nil, nil)
	// The re-provisioned seed finds them and never initialises.
	st := waitState(t, seed, 30*time.Second, "refuses to initialise a second cluster", func(st agent.State) bool {
		return st.Phase == agent.PhaseError && strings.Contains(st.LastError, "answers /status for cluster "+plan.ClusterID)
	})
	if st.K3sStarts != 0 || len(seed.starts(t)) != 0 {
		t.Errorf("the re-provisioned seed started k3s (%d starts): a second cluster", st.K3sStarts)
	}
	if data, err := os.ReadFile(filepath.Join(seed.dir, "k3s", "config.yaml")); err == nil && strings.Contains(string(data), "cluster-init") {
		t.Errorf("the re-provisioned seed rendered cluster-init:\n%s", data)
	}
}

// powerCutRecoveryBound is how long after the last device boots the site
// must be whole again: etcd elects a leader within seconds, kwok's nodes
// report at once, and the agents' watches come back on client-go's re-list
// backoff (up to 30 s) and the node-lifecycle controller lifts the
// not-ready taints.
const powerCutRecoveryBound = 120 * time.Second

// getSocketErr reads path from an agent's local API into v.
func getSocketErr(socket, path string, v any) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
	resp, err := client.Get("http://agent" + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// A server that had joined its cluster under an agent that kept its formed
// marker beside the config, upgraded while the site was down: the upgraded
// agent copies the marker into its state directory and still knows the node
// was a member, so its k3s starts at once with no seed anywhere (a member
// waiting on the seed after a power cut would wait for ever).
func TestUpgradedMemberStartsWithoutTheSeed(t *testing.T) {
	netns.Skip(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	// No API server and no seed: only the node's own disk can say it was a member.
	noKubeconfig := filepath.Join(t.TempDir(), "no-kubeconfig")
	devices := newStandinSite(t, noKubeconfig, []string{"u"}, "node-a", "node-u", "node-c")
	plan := devices.plan
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var oldMarker string
	n := devices.start(t, ctx, &wg, 0, 1, func(configPath string) {
		// Its k3s kept the cluster CA (a member without it verifies the
		// seed first: TestMemberWithoutItsCAVerifiesTheSeed).
		keepsClusterCA(t, configPath)
		oldMarker = filepath.Join(filepath.Dir(configPath), "formed.json")
		if err := formation.MarkFormed(oldMarker, formation.FormedMarker{ClusterID: plan.ClusterID, NodeName: "node-u",
			How: "joined the cluster", Joined: true}); err != nil {
			t.Fatal(err)
		}
	}, func(o *agent.Options) {
		o.LeaderDurations = apps.LeaderDurations{}
	})
	n.waitK3sStarted(t)
	if st := n.agent.State(); st.Phase == agent.PhaseWaitingSeed {
		t.Errorf("k3s started, yet the agent waits for the seed: %+v", st)
	}
	if _, err := os.Stat(oldMarker); err != nil {
		t.Errorf("the old marker beside the config: %v, want it left for a rollback to the previous release", err)
	}
	m, ok, err := formation.ReadFormedMarker(deviceRecords(n.config).FormedMarkerFile())
	if !ok || err != nil || !m.Joined || m.NodeName != "node-u" {
		t.Errorf("the marker in the state directory: %+v ok=%v err=%v", m, ok, err)
	}
}

// A server removed from its cluster (`sitecon node remove`: its Node
// deleted, its name taken off the cluster record) must not come back as it
// was: k3s restarts an init node removed from etcd as a new single-node
// cluster (k3s-io/k3s#13623). Its agent, seeing the removal, records it,
// stops k3s and drops the cluster address; started again (the device
// powered back on), it holds with a clear message: no k3s, no address.
func TestRemovedServerHoldsAfterRestart(t *testing.T) {
	netns.Skip(t)
	site := sitebox.Shared(t)
	cs := clientset(t, site)
	devices := newStandinSite(t, site.Kubeconfig(), []string{"q", "r"}, "node-q", "node-r", "node-s")
	hosts, plan := devices.hosts, devices.plan
	putClusterRecordAside(t, cs)
	record := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kube.ClusterConfigMapName, Namespace: kube.AppNamespace},
		Data: map[string]string{kube.ClusterKeyName: "site1", kube.ClusterKeyID: plan.ClusterID,
			kube.ClusterKeyJoinServerIP: "10.244.244.1", kube.ClusterKeySeedNode: "node-q", kube.ClusterKeyNodes: "node-q,node-r,node-s"}}
	if _, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Create(t.Context(), record, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// node-r's Node, as k3s registered it: a server.
	agentNodeAt(t, cs, "node-r", "10.244.244.2")
	if err := setServerRoles(t.Context(), cs, "node-r", true); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	logPath := filepath.Join(t.TempDir(), "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	t.Cleanup(func() {
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("node-r's agent log:\n%s", data)
		}
	})
	removed := devices.start(t, ctx, &wg, 1, 1, func(configPath string) {
		hasBeenMember(t, plan.ClusterID, "node-r", false)(configPath)
		keepsClusterCA(t, configPath)
	}, func(o *agent.Options) {
		o.Log = slog.New(slog.NewTextHandler(logFile, nil))
	})
	removed.waitK3sStarted(t)
	// The agent has seen its own Node: /status names the cluster live (a
	// node without etcd data has no durable answer).
	probe := formation.MemberProbe{ClusterID: plan.ClusterID, Dial: hosts[1].DialContext}
	until(t, 20*time.Second, "node-r answers /status as a member", func() (netip.Addr, bool) {
		found := probe.Find(ctx, []netip.Addr{netip.MustParseAddr("10.244.244.2")})
		return found, found.IsValid()
	}, func(netip.Addr) string { return fmt.Sprintf("state %+v", removed.agent.State()) })

	// A technician removes node-r on a live member.
	if err := change.RemoveNode(t.Context(), cs, "node-r"); err != nil {
		t.Fatal(err)
	}
	st := waitState(t, removed, 30*time.Second, "holds: removed from its cluster", func(st agent.State) bool {
		return st.Phase == agent.PhaseError && strings.Contains(st.LastError, "removed from cluster") && !st.ClusterIPReady
	})
	if !strings.Contains(st.LastError, "sitecon form --join") {
		t.Errorf("the hold does not say the way back: %q", st.LastError)
	}
	hasAddress := func() bool {
		var have []netip.Prefix
		if err := hosts[1].Do(func() (err error) { have, err = netcfg.InterfacePrefixes(netns.Interface); return err }); err != nil {
			t.Fatal(err)
		}
		return slices.Contains(have, netip.MustParsePrefix("10.244.244.2/28"))
	}
	if hasAddress() {
		t.Errorf("the removed node still holds its cluster address")
	}

	// Powered back on: the same device, the same files.
	cancel()
	wg.Wait()
	starts := len(removed.starts(t))
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	removed.run(t, ctx, &wg)
	waitState(t, removed, 20*time.Second, "holds again after a restart", func(st agent.State) bool {
		return st.Phase == agent.PhaseError && strings.Contains(st.LastError, "removed from cluster")
	})
	if got := len(removed.starts(t)); got != starts {
		t.Errorf("the removed node started k3s again after its restart (%d starts, %d before)", got, starts)
	}
	if hasAddress() {
		t.Errorf("the removed node took its cluster address again after its restart")
	}
}

// A server that has been a member powers on with its cable out (or its
// switch port down). Its address probe would hear nobody and its question
// to its peers nobody either: it would take an address another device may
// hold and start k3s though it may have been removed. It waits for the
// link instead and says so: no cluster address, no k3s. The cable in, it
// goes on and starts k3s.
func TestMemberWaitsForItsLinkAtPowerOn(t *testing.T) {
	netns.Skip(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	noKubeconfig := filepath.Join(t.TempDir(), "no-kubeconfig")
	devices := newStandinSite(t, noKubeconfig, []string{"b"}, "node-a", "node-b", "node-c")
	hosts, plan := devices.hosts, devices.plan
	if err := hosts[0].SetCable(false); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	n := devices.start(t, ctx, &wg, 0, 1, hasBeenMember(t, plan.ClusterID, "node-b", true), func(o *agent.Options) {
		o.LinkWait = time.Second
	})
	st := waitState(t, n, 30*time.Second, "waits for its link, or starts k3s", func(st agent.State) bool {
		return st.K3sStarts > 0 || st.Phase == agent.PhaseWaitingLink && st.Attempts >= 3
	})
	if st.K3sStarts > 0 || len(n.starts(t)) > 0 {
		t.Fatalf("with its cable out, node-b started k3s (phase %s, %s): it could not ask its peers whether it was removed", st.Phase, st.LastError)
	}
	if !strings.Contains(st.LastError, netns.Interface) || !strings.Contains(st.LastError, "link") {
		t.Errorf("the wait does not name the interface and its link: %q", st.LastError)
	}
	hasAddress := func() bool {
		var have []netip.Prefix
		if err := hosts[0].Do(func() (err error) { have, err = netcfg.InterfacePrefixes(netns.Interface); return err }); err != nil {
			t.Fatal(err)
		}
		return slices.Contains(have, netip.MustParsePrefix("10.244.244.2/28"))
	}
	if hasAddress() || st.ClusterIPReady {
		t.Errorf("with its cable out, node-b took its cluster address")
	}
	// The cable in: it probes, takes its address, asks and starts k3s.
	if err := hosts[0].SetCable(true); err != nil {
		t.Fatal(err)
	}
	n.waitK3sStarted(t)
	if !hasAddress() {
		t.Errorf("k3s started, yet node-b has no cluster address")
	}
}
