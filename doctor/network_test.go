package doctor

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
)

// The second-cluster check's reading of a scan: an answer for another
// cluster id is an error naming it; ours (in any case), an empty answer
// (not a member yet) and anything else are not findings; no scan or a
// prefix that could not be asked says it did not run.
func TestSecondClusterReading(t *testing.T) {
	const ours = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	for _, c := range []struct {
		name string
		scan *StatusScan
		want map[string]Severity
	}{
		{"no config", nil, map[string]Severity{"": Info}},
		{"could not ask", &StatusScan{Problem: "config: no such file"}, map[string]Severity{"": Info}},
		{"ours, empty, junk", &StatusScan{ClusterID: ours, Prefix: "10.244.244.0/28", Asked: 13, Answers: []StatusAnswer{
			{"10.244.244.2", "cluster:" + "7F3E2A10-8C4B-4F8E-9A55-2B1C3D4E5F60"}, {"10.244.244.3", ""}, {"10.244.244.4", "hello"}}},
			map[string]Severity{"": OK}},
		{"another", &StatusScan{ClusterID: ours, Prefix: "10.244.244.0/28", Asked: 13, Answers: []StatusAnswer{
			{"10.244.244.2", "cluster:" + ours}, {"10.244.244.9", "cluster:0badc0de-1111-4222-8333-444455556666"}}},
			map[string]Severity{"10.244.244.9": Warn}},
		{"empty id is no answer", &StatusScan{ClusterID: ours, Prefix: "10.244.244.0/28", Asked: 13, Answers: []StatusAnswer{
			{"10.244.244.2", "cluster:" + ours}, {"10.244.244.9", "cluster:"}}},
			map[string]Severity{"": OK}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := &Env{}
			if c.scan != nil {
				env.StatusScan = func(context.Context, DialFunc) StatusScan { return *c.scan }
			}
			got := map[string]Severity{}
			for _, f := range checkSecondCluster(context.Background(), env) {
				got[f.Subject] = f.Severity
				// /status is unauthenticated: a forged answer must not send
				// the technician to re-address a formed cluster.
				if f.Subject != "" && (strings.Contains(f.Next, "cluster_ip_prefix") || !strings.Contains(f.Next, "ip neigh show "+f.Subject)) {
					t.Errorf("next step %q: want the device identified first (ip neigh show), no re-addressing", f.Next)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("findings %v, want %v", got, c.want)
			}
			for s, sev := range c.want {
				if got[s] != sev {
					t.Errorf("%q: %s, want %s", s, got[s], sev)
				}
			}
		})
	}
}

// A scan that heard nothing (cable out, link down) is not "no other
// cluster"; a scan cut short by its deadline says so; a prefix larger than
// the hosts scanned says the OK covers only the first 254.
func TestSecondClusterWhatTheScanCovered(t *testing.T) {
	const ours = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	for _, c := range []struct {
		name string
		scan StatusScan
		want Severity
		says string
	}{
		{"nobody answered", StatusScan{ClusterID: ours, Prefix: "10.244.244.0/28", Asked: 13},
			Info, "not checked: no host of the prefix answered /status (is the cluster link up?)"},
		{"cut short", StatusScan{ClusterID: ours, Prefix: "10.244.244.0/28", Asked: 13, CutShort: 5,
			Answers: []StatusAnswer{{"10.244.244.2", "cluster:" + ours}}}, Info, "5 of 13 addresses not asked"},
		{"large prefix", StatusScan{ClusterID: ours, Prefix: "10.244.0.0/16", Asked: 254, FirstHostsOnly: true,
			Answers: []StatusAnswer{{"10.244.0.2", "cluster:" + ours}}}, OK, "no other cluster on the first 254 hosts of 10.244.0.0/16"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := &Env{StatusScan: func(context.Context, DialFunc) StatusScan { return c.scan }}
			got := checkSecondCluster(context.Background(), env)
			if len(got) != 1 || got[0].Severity != c.want || !strings.Contains(got[0].Summary, c.says) {
				t.Fatalf("findings %+v, want one %s saying %q", got, c.want, c.says)
			}
		})
	}
}

// Nobody answering on a cluster that has other nodes is a warning: they
// should have answered (the link is down, or this node is cut off).
func TestSecondClusterNobodyAnsweredWithPeers(t *testing.T) {
	node := func(name, ip string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	}
	env := &Env{Data: kube.Data{Nodes: []*corev1.Node{node("a", "10.244.244.1"), node("b", "10.244.244.2")}},
		StatusScan: func(context.Context, DialFunc) StatusScan {
			return StatusScan{ClusterID: "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", Prefix: "10.244.244.0/28", Asked: 13}
		}}
	got := checkSecondCluster(context.Background(), env)
	if len(got) != 1 || got[0].Severity != Warn || !strings.Contains(got[0].Summary, "not checked") || got[0].Next == "" {
		t.Errorf("nobody answered, b should have: %+v, want a Warn 'not checked' with a next step", got)
	}
}

// An answer for another cluster from one of this cluster's own addresses
// (a Node's InternalIP, or an address a node reports) is a spoofed answer
// or a duplicate address, not a second cluster.
func TestSecondClusterFromOurOwnAddress(t *testing.T) {
	const ours = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	scan := StatusScan{ClusterID: ours, Prefix: "10.244.244.0/28", Asked: 13, Answers: []StatusAnswer{
		{"10.244.244.2", "cluster:0badc0de-1111-4222-8333-444455556666"}, {"10.244.244.3", "cluster:0badc0de-1111-4222-8333-444455556666"}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.244.244.2"}}}}
	env := &Env{Data: kube.Data{Nodes: []*corev1.Node{node}},
		StatusScan: func(context.Context, DialFunc) StatusScan { return scan },
		NodeReports: func(context.Context) nodestate.NodeReports {
			return nodestate.NodeReports{Answers: []nodestate.NodeAnswer{{Node: "c", Answered: true, Report: &nodestate.NodeReport{Node: "c", ClusterIP: "10.244.244.3"}}}}
		}}
	got := checkSecondCluster(context.Background(), env)
	if len(got) != 2 {
		t.Fatalf("findings %+v, want one for each of our addresses", got)
	}
	for _, f := range got {
		if f.Severity != Warn || !strings.Contains(f.Summary, "one of this cluster's addresses answers for another cluster") ||
			!strings.Contains(f.Summary, IDDuplicateAddress) {
			t.Errorf("%s: %s %q, want a Warn pointing to %s", f.Subject, f.Severity, f.Summary, IDDuplicateAddress)
		}
	}
}

// The MTU check's reading of the reports: the odd node named, every node
// when there is no majority, one MTU quiet; a node whose agent did not
// answer, reports no network section (older) or could not read its
// interface is "not checked", never fine.
func TestMTUReading(t *testing.T) {
	net := func(node string, mtu int) nodestate.NodeAnswer {
		return nodestate.NodeAnswer{Node: node, Answered: true, Report: &nodestate.NodeReport{Node: node, Network: &nodestate.NetworkReport{Interface: "eth1", MTU: mtu}}}
	}
	for _, c := range []struct {
		name    string
		answers []nodestate.NodeAnswer
		want    map[string]Severity
	}{
		{"one MTU", []nodestate.NodeAnswer{net("a", 1500), net("b", 1500), net("c", 1500)}, map[string]Severity{"": OK}},
		{"odd one", []nodestate.NodeAnswer{net("a", 1500), net("b", 9000), net("c", 1500)}, map[string]Severity{"b": Error}},
		{"no majority", []nodestate.NodeAnswer{net("a", 1500), net("b", 1400)}, map[string]Severity{"a": Error, "b": Error}},
		{"cannot tell", []nodestate.NodeAnswer{net("a", 1500),
			{Node: "b", Problem: "did not answer within 2s"},
			{Node: "c", Answered: true, Report: &nodestate.NodeReport{Node: "c"}},
			{Node: "d", Answered: true, Report: &nodestate.NodeReport{Node: "d", Network: &nodestate.NetworkReport{Interface: "eth9", Problem: "no such interface: eth9"}}}},
			map[string]Severity{"": Info, "b": Warn, "c": Warn, "d": Warn}},
		{"one node", []nodestate.NodeAnswer{net("a", 1500)}, map[string]Severity{"": Info}},
		// Issue 38: an agent run without bootstrap (sitebox, the demo)
		// configures no cluster interface: not checked, but no warning.
		{"agents without bootstrap", []nodestate.NodeAnswer{unmanaged("a"), unmanaged("b")}, map[string]Severity{"": Info, "a": Info, "b": Info}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := &Env{NodeReports: func(context.Context) nodestate.NodeReports { return nodestate.NodeReports{Answers: c.answers} }}
			got := map[string]Severity{}
			for _, f := range checkMTU(context.Background(), env) {
				got[f.Subject] = f.Severity
				// One MTU known compares nothing: never an OK.
				if f.Subject == "" && f.Severity != OK && !strings.Contains(f.Summary, "nothing to compare") {
					t.Errorf("%+v: want \"nothing to compare\"", f)
				}
				// Words that read: never "0 node's MTU known".
				if want := map[string]string{"one node": "one node's MTU is known", "agents without bootstrap": "no node's MTU is known"}[c.name]; f.Subject == "" && want != "" && !strings.Contains(f.Summary, want) {
					t.Errorf("%q, want it to say %q", f.Summary, want)
				}
				if f.Subject == "" && len(c.answers) == 4 && !strings.Contains(f.Summary, "b, c, d") {
					t.Errorf("%q does not name the nodes whose MTU is not known", f.Summary)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("findings %v, want %v", got, c.want)
			}
			for s, sev := range c.want {
				if got[s] != sev {
					t.Errorf("%q: %s, want %s", s, got[s], sev)
				}
			}
		})
	}
}

// unmanaged is the answer of an agent run with --no-bootstrap.
func unmanaged(node string) nodestate.NodeAnswer {
	return nodestate.NodeAnswer{Node: node, Answered: true, Report: &nodestate.NodeReport{Node: node,
		Network: &nodestate.NetworkReport{Unmanaged: true, Problem: "no cluster interface of its own: the agent runs with --no-bootstrap"}}}
}

// The duplicate-address check's reading of each agent's last probe:
// another holder is an error naming its hardware address; no probe yet or
// one that could not be made is "not checked", never fine.
func TestDuplicateAddressReading(t *testing.T) {
	at := time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)
	probe := func(node string, p *nodestate.AddressProbe) nodestate.NodeAnswer {
		return nodestate.NodeAnswer{Node: node, Answered: true, Report: &nodestate.NodeReport{Node: node, Network: &nodestate.NetworkReport{Interface: "eth1", MTU: 1500, AddressProbe: p}}}
	}
	for _, c := range []struct {
		name    string
		answers []nodestate.NodeAnswer
		want    map[string]Severity
	}{
		{"all alone", []nodestate.NodeAnswer{probe("a", &nodestate.AddressProbe{Address: "10.0.0.1", At: at}), probe("b", &nodestate.AddressProbe{Address: "10.0.0.2", At: at})},
			map[string]Severity{"": OK}},
		{"held twice", []nodestate.NodeAnswer{probe("a", &nodestate.AddressProbe{Address: "10.0.0.1", At: at}),
			probe("b", &nodestate.AddressProbe{Address: "10.0.0.2", At: at, HeldBy: "02:00:00:00:00:09"})}, map[string]Severity{"b": Error}},
		{"cannot tell", []nodestate.NodeAnswer{probe("a", &nodestate.AddressProbe{Address: "10.0.0.1", At: at}), probe("b", nil),
			probe("c", &nodestate.AddressProbe{Address: "10.0.0.3", At: at, Problem: "no link on eth1: no carrier"})},
			map[string]Severity{"": OK, "b": Warn, "c": Warn}},
		// A probe older than three of its agent's intervals says nothing
		// of now (the agent's prober stuck, or its clock).
		{"agents without bootstrap", []nodestate.NodeAnswer{unmanaged("a"), unmanaged("b")}, map[string]Severity{"a": Info, "b": Info}},
		{"stale", []nodestate.NodeAnswer{probe("a", &nodestate.AddressProbe{Address: "10.0.0.1", At: at}),
			probe("b", &nodestate.AddressProbe{Address: "10.0.0.2", At: at.Add(-10 * time.Minute), Every: time.Minute}),
			probe("c", &nodestate.AddressProbe{Address: "10.0.0.3", At: at.Add(-4 * time.Minute)})},
			map[string]Severity{"": OK, "b": Warn, "c": Warn}},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := &Env{Now: at.Add(30 * time.Second), NodeReports: func(context.Context) nodestate.NodeReports { return nodestate.NodeReports{Answers: c.answers} }}
			got := map[string]Severity{}
			for _, f := range checkDuplicateAddress(context.Background(), env) {
				got[f.Subject] = f.Severity
				if f.Subject != "" && f.Severity == Warn && !strings.Contains(f.Next, f.Subject) {
					t.Errorf("%+v: a node not checked needs a next step naming it", f)
				}
				if c.name == "stale" && f.Subject == "b" && !strings.Contains(f.Summary, "not checked for b: its last probe is 10m30s old") {
					t.Errorf("%q: want \"not checked\" with the probe's age", f.Summary)
				}
				if f.Severity == Error && !strings.Contains(f.Summary, "02:00:00:00:00:09") {
					t.Errorf("%+v does not name the other device", f)
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("findings %v, want %v", got, c.want)
			}
			for s, sev := range c.want {
				if got[s] != sev {
					t.Errorf("%q: %s, want %s", s, got[s], sev)
				}
			}
		})
	}
}

// The peers to dial: from the cluster API's Nodes (role by label, this
// node left out by name or address) when it was read, else from the
// nodes' reports (role from each report; a peer only named by another's
// report has no known role).
func TestPeersOf(t *testing.T) {
	node := func(name, ip string, server bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
		if server {
			n.Labels["node-role.kubernetes.io/control-plane"] = "true"
		}
		return n
	}
	self := LocalNode{Name: "a", Address: "10.0.0.1"}
	env := &Env{Data: kube.Data{Nodes: []*corev1.Node{node("a", "10.0.0.1", true), node("b", "10.0.0.2", true), node("c", "10.0.0.3", false)}}}
	got, _, _ := peersOf(context.Background(), env, self)
	want := []peer{{name: "b", address: "10.0.0.2", server: true, roleKnown: true}, {name: "c", address: "10.0.0.3", roleKnown: true}}
	if !slices.Equal(got, want) {
		t.Errorf("from the API: %+v, want %+v", got, want)
	}
	env = &Env{APIProblem: "down", NodeReports: func(context.Context) nodestate.NodeReports {
		return nodestate.NodeReports{Answers: []nodestate.NodeAnswer{
			{Node: "a", Answered: true, Report: &nodestate.NodeReport{Node: "a", Role: "seed", ClusterIP: "10.0.0.1",
				Peers: []nodestate.NodePeer{{Name: "b", Address: "10.0.0.2"}, {Name: "c", Address: "10.0.0.3"}}}},
			{Node: "b", Answered: true, Report: &nodestate.NodeReport{Node: "b", Role: "server", ClusterIP: "10.0.0.2"}},
			{Node: "c", Problem: "did not answer within 2s"},
		}}
	}}
	got, _, _ = peersOf(context.Background(), env, self)
	want = []peer{{name: "b", address: "10.0.0.2", server: true, roleKnown: true}, {name: "c", address: "10.0.0.3"}}
	if !slices.Equal(got, want) {
		t.Errorf("from the reports: %+v, want %+v", got, want)
	}
}

// The peer-port check dials only addresses inside the cluster prefix (a
// Node's InternalIP is written by its own kubelet: a compromised node must
// not aim the doctor's connects elsewhere), says which nodes it skipped
// (no InternalIP, outside the prefix), and an OK over peers whose role is
// unknown says it was partly checked and why.
func TestPeerPortsWhatWasDialled(t *testing.T) {
	node := func(name, ip string, server bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if ip != "" {
			n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		}
		if server {
			n.Labels["node-role.kubernetes.io/control-plane"] = "true"
		}
		return n
	}
	var mu sync.Mutex
	var dialled []string
	dial := func(_ context.Context, _, addr string) (net.Conn, error) {
		mu.Lock()
		dialled = append(dialled, addr)
		mu.Unlock()
		c, s := net.Pipe()
		_ = s.Close()
		return c, nil
	}
	self := LocalNode{Name: "a", Address: "10.0.0.1", Network: netip.MustParsePrefix("10.0.0.0/24")}
	ports := []ClusterPort{{Port: 6443, ServersOnly: true, What: "API server"}, {Port: 10250, What: "kubelet"}}
	env := &Env{Dial: dial, ClusterPorts: ports, LocalNode: func() (LocalNode, error) { return self, nil },
		Data: kube.Data{Nodes: []*corev1.Node{node("a", "10.0.0.1", true), node("b", "10.0.0.2", true),
			node("c", "198.51.100.7", false), node("d", "", false)}}}
	got := checkPeerPorts(context.Background(), env)
	for _, a := range dialled {
		if !strings.HasPrefix(a, "10.0.0.") {
			t.Errorf("dialled %s, outside the cluster prefix 10.0.0.0/24", a)
		}
	}
	all := ""
	for _, f := range got {
		all += f.Subject + ": " + f.Severity.String() + " " + f.Summary + " " + strings.Join(f.Evidence, "; ") + "\n"
	}
	if !strings.Contains(all, "c: warn not dialled: outside the cluster prefix") || !strings.Contains(all, "d: warn not checked for d: it has no InternalIP") {
		t.Errorf("findings:\n%s\nwant c not dialled (outside the prefix) and d skipped (no InternalIP) said", all)
	}

	dialled = nil
	env = &Env{Dial: dial, ClusterPorts: ports, LocalNode: func() (LocalNode, error) { return self, nil }, APIProblem: "down",
		NodeReports: func(context.Context) nodestate.NodeReports {
			return nodestate.NodeReports{Answers: []nodestate.NodeAnswer{
				{Node: "a", Answered: true, Report: &nodestate.NodeReport{Node: "a", Role: "seed", ClusterIP: "10.0.0.1",
					Peers: []nodestate.NodePeer{{Name: "b", Address: "10.0.0.2"}}}},
				{Node: "b", Problem: "did not answer within 2s"}}}
		}}
	got = checkPeerPorts(context.Background(), env)
	if len(got) != 1 || got[0].Severity != OK || !strings.Contains(got[0].Summary, "partly checked") ||
		!strings.Contains(strings.Join(got[0].Evidence, " "), "b: its role is not known") {
		t.Errorf("a peer of unknown role answering: %+v, want an OK saying it was partly checked and why", got)
	}

	// A node whose own report gives no usable address (and no other
	// report names one) is said, not dropped.
	env.NodeReports = func(context.Context) nodestate.NodeReports {
		return nodestate.NodeReports{Answers: []nodestate.NodeAnswer{
			{Node: "a", Answered: true, Report: &nodestate.NodeReport{Node: "a", Role: "seed", ClusterIP: "10.0.0.1"}},
			{Node: "b", Answered: true, Report: &nodestate.NodeReport{Node: "b", Role: "server", ClusterIP: "10.0.0.2"}},
			{Node: "e", Answered: true, Report: &nodestate.NodeReport{Node: "e", Role: "agent"}}}}
	}
	got = checkPeerPorts(context.Background(), env)
	if !slices.ContainsFunc(got, func(f Finding) bool {
		return f.Subject == "e" && f.Severity == Warn && strings.Contains(f.Summary, "not checked for e: its report gives no cluster address")
	}) {
		t.Errorf("a report without an address: %+v, want a Warn 'not checked for e'", got)
	}
}

// A peer whose agent runs without bootstrap (sitebox's simulated nodes, a
// cluster sitecon did not form) runs no k3s of sitecon's and has no
// firewall of its: its ports are not dialled, and the check says why at
// info (as the MTU and duplicate-address checks do), not an error.
func TestPeerPortsOfAPeerWithoutBootstrap(t *testing.T) {
	node := func(name, ip string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"node-role.kubernetes.io/control-plane": "true"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
	}
	var mu sync.Mutex
	var dialled []string
	refuse := func(_ context.Context, _, addr string) (net.Conn, error) {
		mu.Lock()
		dialled = append(dialled, addr)
		mu.Unlock()
		return nil, syscall.ECONNREFUSED
	}
	self := LocalNode{Name: "a", Address: "10.0.0.1", Network: netip.MustParsePrefix("10.0.0.0/24")}
	env := &Env{Dial: refuse, ClusterPorts: []ClusterPort{{Port: 6443, ServersOnly: true, What: "API server"}, {Port: 10250, What: "kubelet"}},
		LocalNode: func() (LocalNode, error) { return self, nil },
		Data:      kube.Data{Nodes: []*corev1.Node{node("a", "10.0.0.1"), node("b", "10.0.0.2"), node("c", "10.0.0.3")}},
		NodeReports: func(context.Context) nodestate.NodeReports {
			return nodestate.NodeReports{Answers: []nodestate.NodeAnswer{
				{Node: "b", Answered: true, Report: &nodestate.NodeReport{Node: "b", Network: &nodestate.NetworkReport{Unmanaged: true}}},
				{Node: "c", Answered: true, Report: &nodestate.NodeReport{Node: "c", Network: &nodestate.NetworkReport{MTU: 1500}}}}}
		}}
	got := checkPeerPorts(context.Background(), env)
	for _, a := range dialled {
		if strings.HasPrefix(a, "10.0.0.2:") {
			t.Errorf("dialled %s: node b's agent runs without bootstrap", a)
		}
	}
	var sawB, sawC bool
	for _, f := range got {
		switch f.Subject {
		case "b":
			sawB = true
			if f.Severity != Info || !f.NotChecked || !strings.Contains(f.Summary, "without bootstrap") {
				t.Errorf("b: %s %q, want info: not checked, its agent runs without bootstrap", f.Severity, f.Summary)
			}
		case "c":
			sawC = sawC || f.Severity == Error // a managed peer that refuses is still an error
		}
	}
	if !sawB || !sawC {
		t.Errorf("findings %+v: want b said at info and c's refusal an error", got)
	}
}
