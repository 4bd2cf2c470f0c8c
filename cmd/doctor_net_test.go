package cmd

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/statusserver"
	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/netcfg"
	"github.com/sitecon/sitecon/test/netns"
)

const (
	netTestCluster = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	netTestOther   = "0badc0de-1111-4222-8333-444455556666"
	netTestToken   = "Zr7Qp2Xw9Lm4Tn8Vb3Kc6Hd1Fs5Gj0Ay2Ue7Io4Pw9Rq3Ts8Yx1Nb6Mv5Lk2Jh0Gf"
)

// writeNetTestConfig writes node-a's cluster config for a LAN of
// test/netns: node-a at 192.168.77.1, prefix 192.168.77.0/29 on eth1, the
// seed at seed. It returns the config's path.
func writeNetTestConfig(t *testing.T, seed string) string {
	t.Helper()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(netTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{ClusterName: "site1", ClusterID: netTestCluster, ClusterInterface: netns.Interface,
		ClusterIPPrefix: "192.168.77.1/29", JoinServerIP: seed, TokenFile: tokenFile, NodeName: "node-a",
		NodeUUID: "00000000-0000-4000-8000-000000000001"}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cluster.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serveStatusIn serves /status answering cluster:<clusterID> on host's
// LAN address, inside its namespace, until the test ends or stop.
func serveStatusIn(t *testing.T, h *netns.Host, clusterID string) (stop func()) {
	t.Helper()
	var l net.Listener
	if err := h.Do(func() (err error) {
		l, err = net.Listen("tcp", net.JoinHostPort(h.LANAddr, "12346"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: statusserver.Handler(clusterID, func() bool { return true }), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return func() { _ = srv.Close() }
}

// diagnoseFrom runs the doctor as node-a's machine would, with its
// cluster config, dialling from inside self's namespace, and returns the
// findings of id by subject.
func diagnoseFrom(t *testing.T, self *netns.Host, configPath, id string) map[string]doctor.Finding {
	t.Helper()
	dir := t.TempDir()
	g := &globalFlags{kubeconfig: filepath.Join(dir, "no-kubeconfig")}
	opts := doctorOptions(g, slog.New(slog.DiscardHandler), dir, filepath.Join(dir, "no-socket"), configPath, time.Second)
	// Every connection from inside self's namespace: the test's traffic
	// stays in the namespaces it made.
	opts.Dial = self.DialContext
	opts.NodeReports = func(ctx context.Context) nodestate.NodeReports {
		return nodeReports{configPath: configPath, dial: self.DialContext}.gather(ctx, nil)
	}
	r := doctor.Diagnose(context.Background(), opts)
	out := map[string]doctor.Finding{}
	for _, f := range r.Findings {
		if f.ID == id {
			out[f.Subject] = f
		}
	}
	return out
}

// Another cluster answering /status on this node's cluster prefix (two
// sites' devices on one LAN, lf-edge/eve #5306): the doctor, on node-a
// with its cluster config, asks every host of the prefix and names the
// address and the other cluster's id. Our own cluster's member and a host
// with nothing listening are not findings.
func TestDoctorFindsASecondClusterOnThePrefix(t *testing.T) {
	hosts := netns.NewLAN(t, "a", "other", "seed", "silent")
	self, other, seed := hosts[0], hosts[1], hosts[2]
	stopOther := serveStatusIn(t, other, netTestOther)
	serveStatusIn(t, seed, netTestCluster)
	configPath := writeNetTestConfig(t, seed.LANAddr)

	start := time.Now()
	got := diagnoseFrom(t, self, configPath, doctor.IDSecondCluster)
	t.Logf("took %s", time.Since(start))
	f, ok := got[other.LANAddr]
	if !ok || f.Severity != doctor.Warn || !strings.Contains(f.Summary, netTestOther) || !strings.Contains(f.Summary, other.LANAddr) || f.Next == "" {
		t.Fatalf("no warning naming %s and cluster %s: %+v", other.LANAddr, netTestOther, got)
	}
	if len(got) != 1 {
		t.Errorf("findings %+v: want only %s's", got, other.LANAddr)
	}
	t.Logf("%s: %s %v", f.ID, f.Summary, f.Evidence)

	// The other cluster gone: quiet, and it says how many it asked.
	stopOther()
	got = diagnoseFrom(t, self, configPath, doctor.IDSecondCluster)
	if f := got[""]; len(got) != 1 || f.Severity != doctor.OK || !strings.Contains(strings.Join(f.Evidence, " "), "1 answered, 1 for this cluster") {
		t.Errorf("only our own cluster on the prefix: %+v", got)
	}
}

// With node-a's cable pulled nobody on the prefix can answer /status:
// the check must say it could not look, never "no other cluster".
func TestDoctorSecondClusterWithTheCablePulled(t *testing.T) {
	hosts := netns.NewLAN(t, "a", "seed")
	self, seed := hosts[0], hosts[1]
	serveStatusIn(t, seed, netTestCluster)
	configPath := writeNetTestConfig(t, seed.LANAddr)
	if err := self.SetCable(false); err != nil {
		t.Fatal(err)
	}
	got := diagnoseFrom(t, self, configPath, doctor.IDSecondCluster)
	f := got[""]
	if len(got) != 1 || f.Severity == doctor.OK || !strings.Contains(f.Summary, "not checked: no host of the prefix answered /status") {
		t.Fatalf("with the cable pulled: %+v, want \"not checked\"", got)
	}
	t.Logf("%s %s %v", f.Severity, f.Summary, f.Evidence)
}

// listenIn listens on host's LAN address at each port, inside its
// namespace, accepting and closing, until the test ends.
func listenIn(t *testing.T, h *netns.Host, ports ...int) {
	t.Helper()
	for _, p := range ports {
		var l net.Listener
		if err := h.Do(func() (err error) {
			l, err = net.Listen("tcp", net.JoinHostPort(h.LANAddr, strconv.Itoa(p)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		t.Cleanup(func() { _ = l.Close() })
	}
}

// serveNodeReportIn serves report, signed with the test cluster's key, on
// host's LAN address at the status port, as the node's agent does.
func serveNodeReportIn(t *testing.T, h *netns.Host, report nodestate.NodeReport) {
	t.Helper()
	key, err := config.NewLifeKey(netTestCluster, config.Secret(netTestToken))
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	if err := h.Do(func() (err error) {
		l, err = net.Listen("tcp", net.JoinHostPort(h.LANAddr, strconv.Itoa(config.StatusPort)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	handler := statusserver.WithNodeReport(statusserver.Handler(netTestCluster, func() bool { return report.Role != "agent" }),
		statusserver.NodeReportHandler(key, report.Node, func() nodestate.NodeReport { return report }))
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// A peer's cluster ports dialled from this node, all at once, as the
// agent's firewall list says who listens: the API server's and etcd's on
// servers only, the kubelet's and Longhorn's on every node. With the
// cluster API down the peers and their roles come from their own reports.
// node-b (a server) has etcd's peer port 2380 closed, node-c (an agent)
// Longhorn's 9500: each is an error naming the port; node-c's missing
// API server is not (an agent runs none).
func TestDoctorFindsAPeersClosedClusterPorts(t *testing.T) {
	hosts := netns.NewLAN(t, "a", "b", "c")
	self, b, c := hosts[0], hosts[1], hosts[2]
	serveNodeReportIn(t, b, nodestate.NodeReport{Node: "node-b", Role: "server", Phase: "joined", ClusterIP: b.LANAddr})
	serveNodeReportIn(t, c, nodestate.NodeReport{Node: "node-c", Role: "agent", Phase: "joined", ClusterIP: c.LANAddr})
	listenIn(t, b, 6443, 2379, 10250, 9500)
	listenIn(t, c, 10250)
	configPath := writeNetTestConfig(t, b.LANAddr)

	got := diagnoseFrom(t, self, configPath, doctor.IDPeerPorts)
	for subject, f := range got {
		t.Logf("%s [%s] %s %v", f.Severity, subject, f.Summary, f.Evidence)
	}
	fb, fc := got["node-b"], got["node-c"]
	eb, ec := strings.Join(fb.Evidence, "\n"), strings.Join(fc.Evidence, "\n")
	if fb.Severity != doctor.Error || !strings.Contains(eb, "tcp 2380 (etcd): connection refused") || strings.Contains(eb, "tcp 2379") || strings.Contains(eb, "tcp 6443") {
		t.Errorf("node-b with 2380 closed: %+v", fb)
	}
	if fc.Severity != doctor.Error || !strings.Contains(ec, "tcp 9500 (Longhorn manager): connection refused") || strings.Contains(ec, "6443") || strings.Contains(ec, "2379") {
		t.Errorf("node-c (an agent) with 9500 closed: %+v", fc)
	}
	if len(got) != 2 {
		t.Errorf("findings %v: want node-b's and node-c's", got)
	}
}

// On a healthy LAN (one cluster on the prefix, one MTU, no address held
// twice, every peer's ports open) the network checks are quiet: an ok
// each, nothing worse. The reports' network sections are read as the
// agent reads them (netlink, an ARP probe from eth1).
func TestDoctorNetworkChecksQuietOnAHealthyLAN(t *testing.T) {
	hosts := netns.NewLAN(t, "a", "b", "c")
	self, b, c := hosts[0], hosts[1], hosts[2]
	network := func(h *netns.Host) *nodestate.NetworkReport {
		n := &nodestate.NetworkReport{Interface: netns.Interface}
		p := &nodestate.AddressProbe{Address: h.LANAddr, At: time.Now()}
		if err := h.Do(func() (err error) {
			if n.MTU, err = netcfg.InterfaceMTU(netns.Interface); err != nil {
				return err
			}
			return netcfg.ProbeHeldAddress(netns.Interface, netip.MustParseAddr(h.LANAddr), 300*time.Millisecond)
		}); err != nil {
			t.Fatal(err)
		}
		n.AddressProbe = p
		return n
	}
	serveNodeReportIn(t, self, nodestate.NodeReport{Node: "node-a", Role: "seed", Phase: "joined", ClusterIP: self.LANAddr, Network: network(self)})
	serveNodeReportIn(t, b, nodestate.NodeReport{Node: "node-b", Role: "server", Phase: "joined", ClusterIP: b.LANAddr, Network: network(b)})
	serveNodeReportIn(t, c, nodestate.NodeReport{Node: "node-c", Role: "agent", Phase: "joined", ClusterIP: c.LANAddr, Network: network(c)})
	listenIn(t, b, 6443, 2379, 2380, 10250, 9500)
	listenIn(t, c, 10250, 9500)
	configPath := writeNetTestConfig(t, self.LANAddr)
	for _, id := range []string{doctor.IDSecondCluster, doctor.IDMTUMismatch, doctor.IDDuplicateAddress, doctor.IDPeerPorts} {
		got := diagnoseFrom(t, self, configPath, id)
		f, ok := got[""]
		if len(got) != 1 || !ok || f.Severity != doctor.OK {
			t.Errorf("%s on a healthy LAN: %+v, want one ok", id, got)
			continue
		}
		t.Logf("%s: %s %v", id, f.Summary, f.Evidence)
	}
}
