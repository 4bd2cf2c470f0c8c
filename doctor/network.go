package doctor

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
)

// The cluster network's checks (issue 22, lf-edge/eve #5306 and the
// ports k3s, etcd and Longhorn need between nodes). Those that need a
// node's own view (its interface's MTU, an ARP probe from it) read what
// each agent reports; those that look from here (another cluster on the
// prefix, a peer's ports) run where the doctor runs, on a node with its
// cluster config (--config): the prefix, the cluster id and the node's
// own name come from there.

// DialFunc opens a connection (a net.Dialer's DialContext).
type DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error)

// StatusScan is what the hosts of this node's cluster prefix answered
// GET /status (port 12346): a member of a cluster answers cluster:<uuid>.
type StatusScan struct {
	// ClusterID is this node's cluster's; Prefix the prefix asked.
	ClusterID string
	Prefix    string
	// Asked counts the addresses asked; Answers are those that answered.
	Asked   int
	Answers []StatusAnswer
	// CutShort counts the addresses the scan's deadline left unasked (or
	// cut off mid-answer).
	CutShort int
	// FirstHostsOnly: the prefix has more hosts than those asked (the
	// lowest 254, where sitecon's addressing puts the nodes).
	FirstHostsOnly bool
	// Problem is why the prefix could not be asked at all.
	Problem string
}

// StatusAnswer is one address's answer to /status, trimmed.
type StatusAnswer struct {
	Address string
	Answer  string
}

// statusClusterPrefix is how /status names a cluster.
const statusClusterPrefix = "cluster:"

// checkSecondCluster asks every host of this node's cluster prefix for
// /status: a host answering for another cluster id is another cluster on
// the same prefix (two sites' devices on one LAN, a device reset into a
// new cluster), which a node about to join or initialise would meet, and
// whose addresses may collide with ours. A host that does not answer is
// not a finding: most of a prefix is empty. /status is unauthenticated,
// so an answer proves nothing about who sent it: the finding is a Warn
// whose next step identifies the device first, and never re-addresses a
// formed cluster (that can break etcd's quorum). An answer from one of
// this cluster's own addresses is a spoofed answer or a duplicate
// address, not a second cluster.
func checkSecondCluster(ctx context.Context, env *Env) []Finding {
	if env.StatusScan == nil {
		return notOnANode()
	}
	s := env.StatusScan(ctx, env.Dial)
	if s.Problem != "" {
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: the cluster prefix could not be asked", Evidence: []string{s.Problem}}}
	}
	var out []Finding
	ours := 0
	var own map[string]string
	for _, a := range s.Answers {
		id, ok := strings.CutPrefix(a.Answer, statusClusterPrefix)
		switch {
		case !ok || id == "":
			// Empty: a node that is not a member (yet); "cluster:" with no
			// id and anything else are no cluster's answer.
			continue
		case strings.EqualFold(id, s.ClusterID):
			ours++
			continue
		}
		if own == nil {
			own = ourAddresses(ctx, env)
		}
		evidence := []string{fmt.Sprintf("GET http://%s/status answered %q; this node's cluster is %s (prefix %s)",
			joinStatusPort(a.Address), a.Answer, s.ClusterID, s.Prefix),
			"/status is unauthenticated: any device on the LAN can give this answer"}
		identify := fmt.Sprintf("identify the device first: ip neigh show %s (its hardware address), then the switch's MAC table", a.Address)
		if node, ok := own[a.Address]; ok {
			out = append(out, Finding{Severity: Warn, Subject: a.Address,
				Summary: fmt.Sprintf("one of this cluster's addresses answers for another cluster: a spoofed answer or a duplicate address, see %s (%s is %s's, cluster %s answered)",
					IDDuplicateAddress, a.Address, node, id),
				Evidence: append(evidence, a.Address+" is "+node+"'s cluster address"),
				Next:     identify + "; if it is not " + node + ", take the address off that device; never re-address a formed cluster"})
			continue
		}
		out = append(out, Finding{Severity: Warn, Subject: a.Address,
			Summary:  fmt.Sprintf("another cluster answers on this node's cluster prefix: %s says it is a member of cluster %s", a.Address, id),
			Evidence: evidence,
			Next:     identify + "; move that device (or its cluster) to another prefix or LAN; never re-address a formed cluster (etcd's quorum can break)"})
	}
	if len(out) > 0 {
		return out
	}
	evidence := []string{fmt.Sprintf("%d addresses asked for /status; %d answered, %d for this cluster", s.Asked, len(s.Answers), ours)}
	if len(s.Answers) == 0 {
		// Silence is no proof: with the link down nobody answers. On a
		// cluster with other nodes somebody should have.
		f := Finding{NotChecked: true, Severity: Info, Summary: "not checked: no host of the prefix answered /status (is the cluster link up?)",
			Evidence: evidence, Next: "check this node's cluster interface (ip link show: state UP, LOWER_UP) and its cable, then run the doctor again"}
		if s.CutShort > 0 {
			f.Evidence = append(f.Evidence, fmt.Sprintf("the scan was cut short by its deadline: %d of %d addresses not asked", s.CutShort, s.Asked))
		}
		if len(ourAddresses(ctx, env)) > 1 {
			f.Severity = Warn
		}
		return []Finding{f}
	}
	if s.CutShort > 0 {
		return []Finding{{NotChecked: true, Severity: Info,
			Summary: fmt.Sprintf("partly checked: the scan of %s was cut short, %d of %d addresses not asked; no other cluster among those that answered",
				s.Prefix, s.CutShort, s.Asked),
			Evidence: evidence, Next: "run the doctor again; if it is cut short again, the LAN is slow to answer"}}
	}
	scanned := s.Prefix
	if s.FirstHostsOnly {
		scanned = fmt.Sprintf("the first %d hosts of %s", s.Asked, s.Prefix)
	}
	return []Finding{{Severity: OK, Summary: "no other cluster on " + scanned, Evidence: evidence}}
}

// ourAddresses are this cluster's nodes' addresses, by address: the
// cluster API's Nodes' InternalIPs when it was read, and the addresses
// the nodes' own reports give (their own and their peers').
func ourAddresses(ctx context.Context, env *Env) map[string]string {
	out := map[string]string{}
	if env.APIProblem == "" {
		for _, n := range env.Data.Nodes {
			if addr := kube.InternalIP(n); addr != "" {
				out[addr] = n.Name
			}
		}
	}
	if env.NodeReports != nil {
		for _, a := range env.NodeReports(ctx).Answers {
			if a.Report == nil {
				continue
			}
			if a.Report.ClusterIP != "" {
				out[a.Report.ClusterIP] = a.Name()
			}
			for _, p := range a.Report.Peers {
				if _, known := out[p.Address]; !known && p.Address != "" {
					out[p.Address] = p.Name
				}
			}
		}
	}
	return out
}

// joinStatusPort is address with the status port.
func joinStatusPort(address string) string { return net.JoinHostPort(address, "12346") }

// notOnANode is the finding of a network check run without a cluster
// config: it looks from a node of the cluster, and this machine is none.
func notOnANode() []Finding {
	return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: no cluster config on this machine (it looks from a node of the cluster)",
		Next: "on a node, or with --config FILE"}}
}

// reportedNetworks are the answering nodes' network sections, by node;
// the findings say which nodes could not be checked and why: no answer,
// a report without a network section (an older agent), or an interface
// it could not read.
func reportedNetworks(ctx context.Context, env *Env) (nets map[string]*nodestate.NetworkReport, skipped []Finding, ran bool) {
	if env.NodeReports == nil {
		return nil, notOnANode(), false
	}
	r := env.NodeReports(ctx)
	if len(r.Answers) == 0 {
		return nil, []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: no node could be asked", Evidence: []string{r.Problem}}}, false
	}
	nets = map[string]*nodestate.NetworkReport{}
	for _, a := range r.Answers {
		name := a.Name()
		switch {
		case !a.Answered:
			skipped = append(skipped, Finding{NotChecked: true, Severity: Warn, Subject: name, Summary: "not checked for " + name + ": its agent did not report",
				Evidence: []string{a.Problem}, Next: "on " + name + ": systemctl status sitecon-agent (its agent makes this check)"})
		case a.Report.Network == nil:
			v := a.Report.Version
			if v == "" {
				v = "version unknown"
			}
			skipped = append(skipped, Finding{NotChecked: true, Severity: Warn, Subject: name,
				Summary:  "not checked for " + name + ": its agent's report has no network section (an older agent, " + v + ")",
				Evidence: []string{"its report has no such section"}, Next: "upgrade sitecon on " + name})
		default:
			nets[name] = a.Report.Network
		}
	}
	return nets, skipped, true
}

// checkMTU compares the MTU of the nodes' cluster interfaces, as each
// agent reads it: flannel's VXLAN and Longhorn's replication between two
// nodes lose the packets larger than the smaller MTU, which shows as
// stalls rather than errors. The nodes whose MTU differs from most
// nodes' are named; with no majority, every node is.
func checkMTU(ctx context.Context, env *Env) []Finding {
	nets, out, ran := reportedNetworks(ctx, env)
	if !ran {
		return out
	}
	mtus := map[string]int{}
	count := map[int]int{}
	for name, n := range nets {
		if n.Unmanaged {
			out = append(out, unmanagedNetwork(name, n))
			continue
		}
		if n.Problem != "" || n.MTU <= 0 {
			out = append(out, Finding{NotChecked: true, Severity: Warn, Subject: name, Summary: "not checked for " + name + ": its agent could not read its cluster interface",
				Evidence: nonEmpty(n.Problem), Next: "on " + name + ": ip link show, and the cluster interface in its cluster config"})
			continue
		}
		mtus[name] = n.MTU
		count[n.MTU]++
	}
	if len(mtus) < 2 {
		// One MTU compares nothing: the nodes that could not say are
		// the ones that might differ.
		var unknown []string
		for _, f := range out {
			if f.Severity > Info {
				unknown = append(unknown, f.Subject)
			}
		}
		slices.Sort(unknown)
		known := "no node's MTU is known"
		if len(mtus) == 1 {
			known = "one node's MTU is known"
		}
		f := Finding{NotChecked: true, Severity: Info, Summary: "not checked: nothing to compare, " + known}
		if len(unknown) > 0 {
			f.Summary += "; not reported by " + strings.Join(unknown, ", ")
		}
		for name, m := range mtus {
			f.Evidence = append(f.Evidence, fmt.Sprintf("%s %s: %d", name, nets[name].Interface, m))
		}
		return append(out, f)
	}
	if len(count) == 1 {
		var mtu int
		for _, m := range mtus {
			mtu = m
		}
		return append(out, Finding{Severity: OK, Summary: fmt.Sprintf("the cluster interfaces of %d nodes have one MTU, %d", len(mtus), mtu)})
	}
	// The most common MTU, when one value is more common than any other.
	usual, best, tie := 0, 0, false
	for m, c := range count {
		switch {
		case c > best:
			usual, best, tie = m, c, false
		case c == best:
			tie = true
		}
	}
	all := make([]string, 0, len(mtus))
	for _, name := range slices.Sorted(maps.Keys(mtus)) {
		all = append(all, fmt.Sprintf("%s %s: %d", name, nets[name].Interface, mtus[name]))
	}
	evidence := []string{"cluster interfaces' MTU: " + strings.Join(all, ", ")}
	next := "set one MTU on every node's cluster interface (EVE's network config for the port), then restart k3s on the nodes changed (systemctl restart sitecon-agent), " + oneServerAtATime
	for _, name := range slices.Sorted(maps.Keys(mtus)) {
		m := mtus[name]
		if !tie && m == usual {
			continue
		}
		summary := fmt.Sprintf("%s's cluster interface %s has MTU %d, the other nodes' %d", name, nets[name].Interface, m, usual)
		if tie {
			summary = fmt.Sprintf("the nodes' cluster interfaces differ in MTU: %s's %s has %d", name, nets[name].Interface, m)
		}
		out = append(out, Finding{Severity: Error, Subject: name, Summary: summary, Evidence: evidence, Next: next})
	}
	return out
}

// staleProbes is how many of its agent's intervals a probe may be old
// before it says nothing of now (a stuck prober, a clock gone wrong).
const staleProbes = 3

// defaultAddressProbeEvery is the agent's default probe interval
// (agent.DefaultAddressProbeInterval), for an older agent's probe that
// does not say its own.
const defaultAddressProbeEvery = time.Minute

// probeEvery is how often p's agent probes.
func probeEvery(p *nodestate.AddressProbe) time.Duration {
	if p.Every > 0 {
		return p.Every
	}
	return defaultAddressProbeEvery
}

// checkDuplicateAddress reads each agent's last ARP probe for its own
// cluster address (from its cluster interface, sender 0.0.0.0 as RFC 5227
// probes): another device that answers holds the same address, and the
// traffic for that node goes to either at random.
// unmanagedNetwork is the network checks' word on a node whose agent
// configures no cluster interface (--no-bootstrap): not checked, and no
// warning either, since there is nothing of sitecon's there to be wrong.
func unmanagedNetwork(name string, n *nodestate.NetworkReport) Finding {
	return Finding{NotChecked: true, Severity: Info, Subject: name,
		Summary:  "not checked for " + name + ": its agent runs without bootstrap and configures no cluster interface",
		Evidence: nonEmpty(n.Problem)}
}

func checkDuplicateAddress(ctx context.Context, env *Env) []Finding {
	nets, out, ran := reportedNetworks(ctx, env)
	if !ran {
		return out
	}
	var probed []string
	for _, name := range slices.Sorted(maps.Keys(nets)) {
		p := nets[name].AddressProbe
		switch {
		case nets[name].Unmanaged:
			out = append(out, unmanagedNetwork(name, nets[name]))
		case p == nil:
			out = append(out, Finding{NotChecked: true, Severity: Warn, Subject: name, Summary: "not checked for " + name + ": its agent has not probed its cluster address yet",
				Evidence: nonEmpty(nets[name].Problem), Next: "on " + name + ": wait a minute for its agent's first probe, then run the doctor again; if it persists, systemctl status sitecon-agent"})
		case p.Problem != "":
			out = append(out, Finding{NotChecked: true, Severity: Warn, Subject: name, Summary: "not checked for " + name + ": its agent's ARP probe could not be made",
				Evidence: []string{p.Problem, "at " + p.At.UTC().Format(time.RFC3339)},
				Next:     "on " + name + ": ip link show (the cluster interface's link), and its agent's log"})
		case !env.Now.IsZero() && env.Now.Sub(p.At) > staleProbes*probeEvery(p):
			out = append(out, Finding{NotChecked: true, Severity: Warn, Subject: name, Summary: "not checked for " + name + ": its last probe is " + ago(env.Now, p.At) + " old",
				Evidence: []string{fmt.Sprintf("probed at %s; its agent probes every %s", p.At.UTC().Format(time.RFC3339), probeEvery(p))},
				Next:     "on " + name + ": systemctl status sitecon-agent, and its clock (SC-CLOCK-SKEW)"})
		case p.HeldBy != "":
			out = append(out, Finding{Severity: Error, Subject: name, Since: since(p.At),
				Summary: fmt.Sprintf("another device holds %s's cluster address %s: %s answers for it", name, p.Address, p.HeldBy),
				Evidence: []string{fmt.Sprintf("%s's agent probed %s from %s at %s (ARP, sender 0.0.0.0); %s answered",
					name, p.Address, nets[name].Interface, p.At.UTC().Format(time.RFC3339), p.HeldBy)},
				Next: "find the device with that hardware address (the switch's MAC table) and take the address off it; a replaced device must not keep its old address"})
		default:
			probed = append(probed, fmt.Sprintf("%s %s at %s", name, p.Address, p.At.UTC().Format(time.RFC3339)))
		}
	}
	if len(probed) > 0 && !slices.ContainsFunc(out, func(f Finding) bool { return f.Severity == Error }) {
		out = append(out, Finding{Severity: OK, Summary: fmt.Sprintf("no other device answers for the cluster address of %d node%s", len(probed), plural(len(probed))),
			Evidence: []string{"last probes: " + strings.Join(probed, ", ")}})
	}
	return out
}
