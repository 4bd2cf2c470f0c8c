package agent

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/statusserver"
	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/nodereport"
	"github.com/sitecon/sitecon/test/netns"
)

const (
	netTestCluster = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	netTestToken   = "Zr7Qp2Xw9Lm4Tn8Vb3Kc6Hd1Fs5Gj0Ay2Ue7Io4Pw9Rq3Ts8Yx1Nb6Mv5Lk2Jh0Gf"
)

func netTestKey(t *testing.T) config.LifeKey {
	t.Helper()
	key, err := config.NewLifeKey(netTestCluster, config.Secret(netTestToken))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// netTestAgent is an agent that has applied its config on host's LAN
// (its cluster interface eth1, its cluster address addr), its network
// work run inside host's namespace.
func netTestAgent(h *netns.Host, node string, addr netip.Addr, opts Options) *Agent {
	opts.InNetNS = h.Do
	a := New(opts)
	a.mu.Lock()
	a.state = State{Node: node, ClusterID: netTestCluster, Role: k3s.RoleServer, Phase: PhaseJoined, Since: time.Now(),
		ClusterIP: addr.String(), ClusterIPReady: true}
	a.applied = &config.Validated{Config: &config.Config{ClusterID: netTestCluster, NodeName: node, ClusterInterface: netns.Interface}, NodeIP: addr}
	a.mu.Unlock()
	return a
}

// serveReportIn serves report, behind the cluster key, on host's LAN
// address inside its namespace, as the agent does on its cluster address.
func serveReportIn(t *testing.T, h *netns.Host, node string, report func() nodestate.NodeReport) netip.AddrPort {
	t.Helper()
	addr := netip.AddrPortFrom(netip.MustParseAddr(h.LANAddr), config.StatusPort)
	var l net.Listener
	if err := h.Do(func() (err error) { l, err = net.Listen("tcp", addr.String()); return err }); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: statusserver.WithNodeReport(http.NotFoundHandler(), statusserver.NodeReportHandler(netTestKey(t), node, report)),
		ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return addr
}

// doctorOver runs the doctor check id over the reports read from addrs,
// asked from inside from's namespace, and returns its findings by subject.
func doctorOver(t *testing.T, from *netns.Host, id string, addrs ...netip.AddrPort) map[string]doctor.Finding {
	t.Helper()
	var checks []doctor.Check
	for _, c := range doctor.Checks() {
		if c.ID == id {
			checks = append(checks, c)
		}
	}
	if len(checks) != 1 {
		t.Fatalf("no check %s", id)
	}
	targets := make([]nodereport.Target, len(addrs))
	for i, a := range addrs {
		targets[i] = nodereport.Target{Address: a}
	}
	env := &doctor.Env{NodeReports: func(ctx context.Context) nodestate.NodeReports {
		return nodereport.Reader{Key: netTestKey(t), Dial: from.DialContext}.Ask(ctx, targets)
	}}
	out := map[string]doctor.Finding{}
	for _, f := range doctor.Run(context.Background(), checks, env).Findings {
		out[f.Subject] = f
		t.Logf("%s %s [%s] %s %v", f.Severity, f.ID, f.Subject, f.Summary, f.Evidence)
	}
	return out
}

// Each agent reports its cluster interface's MTU as netlink reads it; the
// doctor compares the nodes' and names the odd one. An older agent's
// report without the network section says that node was not checked,
// never that it is fine.
func TestDoctorFindsAnMTUMismatchFromTheAgentsReports(t *testing.T) {
	hosts := netns.NewLAN(t, "a", "b", "c", "old")
	if out, err := hosts[2].Exec("ip", "link", "set", netns.Interface, "mtu", "1400"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var addrs []netip.AddrPort
	for i, node := range []string{"node-a", "node-b", "node-c"} {
		a := netTestAgent(hosts[i], node, netip.MustParseAddr(hosts[i].LANAddr), Options{})
		addrs = append(addrs, serveReportIn(t, hosts[i], node, a.nodeReport))
	}
	addrs = append(addrs, serveReportIn(t, hosts[3], "node-old", func() nodestate.NodeReport {
		return nodestate.NodeReport{Node: "node-old", Phase: "joined", Version: "v0.9.0"}
	}))
	got := doctorOver(t, hosts[0], doctor.IDMTUMismatch, addrs...)
	f, ok := got["node-c"]
	if !ok || f.Severity != doctor.Error || !strings.Contains(f.Summary, "MTU 1400, the other nodes' 1500") || !strings.Contains(f.Summary, netns.Interface) {
		t.Errorf("node-c at MTU 1400 among 1500s: %+v", got)
	}
	if f := got["node-old"]; f.Severity != doctor.Warn || !strings.Contains(f.Summary, "not checked for node-old") || !strings.Contains(f.Next, "node-old") {
		t.Errorf("an older agent's report: %+v, want a warning saying node-old was not checked, with a next step naming it", f)
	}
	for _, quiet := range []string{"node-a", "node-b"} {
		if f, ok := got[quiet]; ok {
			t.Errorf("%s at the usual MTU: %+v", quiet, f)
		}
	}
}

// A device on the LAN with node-b's cluster address too: node-b's agent,
// probing from its cluster interface in the background (ARP, sender
// 0.0.0.0), hears it answer, and its report says which hardware address;
// the doctor names node-b, the address and that device. node-a, alone
// with its address, is quiet.
func TestDoctorFindsADuplicateClusterAddressFromTheAgentsProbe(t *testing.T) {
	hosts := netns.NewLAN(t, "a", "b", "dup")
	for i, addr := range []string{"10.244.244.1/24", "10.244.244.2/24", "10.244.244.2/24"} {
		if out, err := hosts[i].Exec("ip", "addr", "add", addr, "dev", netns.Interface); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	var dupMAC string
	if err := hosts[2].Do(func() error {
		ifi, err := net.InterfaceByName(netns.Interface)
		if err == nil {
			dupMAC = ifi.HardwareAddr.String()
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var addrs []netip.AddrPort
	agents := map[string]*Agent{}
	for i, node := range []string{"node-a", "node-b"} {
		a := netTestAgent(hosts[i], node, netip.MustParseAddr("10.244.244."+string(rune('1'+i))), Options{AddressProbeInterval: 200 * time.Millisecond})
		agents[node] = a
		done := make(chan struct{})
		go func() { defer close(done); a.observeAddress(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		addrs = append(addrs, serveReportIn(t, hosts[i], node, a.nodeReport))
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, a := range agents {
		for a.addressSeen.last() == nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s's agent made no probe within 15s", a.State().Node)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	got := doctorOver(t, hosts[0], doctor.IDDuplicateAddress, addrs...)
	f, ok := got["node-b"]
	if !ok || f.Severity != doctor.Error || !strings.Contains(f.Summary, "10.244.244.2") || !strings.Contains(f.Summary, dupMAC) || f.Next == "" {
		t.Errorf("node-b's address held by %s too: %+v", dupMAC, got)
	}
	if f, ok := got["node-a"]; ok {
		t.Errorf("node-a alone with its address: %+v", f)
	}
}
