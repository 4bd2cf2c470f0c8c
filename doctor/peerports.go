package doctor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sitecon/sitecon/kube"
)

// LocalNode is this machine's node, from its cluster config: the checks
// that look from here leave it out.
type LocalNode struct {
	Name    string
	Address string
	// Network is the cluster prefix (cluster_ip_prefix, masked): the
	// only addresses the peer-port check dials.
	Network netip.Prefix
}

// ClusterPort is a TCP port peers dial at a node's cluster address, and
// whether only servers listen on it (the agent's firewall list, netcfg's
// ClusterPorts, given by main).
type ClusterPort struct {
	Port        uint16
	ServersOnly bool
	What        string
}

// peerDialTimeout bounds each connect: a peer on the LAN accepts in
// milliseconds; a dropped SYN waits the whole of it.
const peerDialTimeout = time.Second

// udpNote says what the check does not prove.
const udpNote = "udp 8472 (flannel's VXLAN) is not checked: a UDP connect proves nothing (SC-MTU-MISMATCH covers its usual failure)"

// peer is a node to dial and what is known of its role.
type peer struct {
	name, address string
	// server: it runs the API server and etcd; roleKnown false when no
	// source said.
	server, roleKnown bool
}

// checkPeerPorts dials every peer's cluster ports from here at once, each
// within peerDialTimeout: the API server and etcd's ports on servers, the
// kubelet's and Longhorn's on every node. The peers come from the cluster
// API's Nodes when it was read, else from the nodes' own reports.
func checkPeerPorts(ctx context.Context, env *Env) []Finding {
	if env.LocalNode == nil {
		return notOnANode()
	}
	self, err := env.LocalNode()
	if err != nil {
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: this node's cluster config could not be read", Evidence: []string{err.Error()}}}
	}
	if len(env.ClusterPorts) == 0 {
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: no cluster ports given"}}
	}
	if !self.Network.IsValid() {
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: the cluster prefix is not known here (it bounds the addresses dialled)"}}
	}
	known, source, skipped := peersOf(ctx, env, self)
	// Only addresses inside the cluster prefix are dialled: a Node's
	// InternalIP is written by its own kubelet, and a compromised node
	// must not aim this machine's connects anywhere else.
	var out []Finding
	for _, s := range skipped {
		out = append(out, Finding{NotChecked: true, Severity: Warn, Subject: s.name, Summary: "not checked for " + s.name + ": " + s.why,
			Next: "on " + s.name + ": systemctl status sitecon-agent (it and its kubelet give the node's address)"})
	}
	var peers []peer
	unmanaged := unmanagedNodes(ctx, env)
	for _, p := range known {
		if unmanaged[p.name] {
			out = append(out, Finding{NotChecked: true, Severity: Info, Subject: p.name,
				Summary: "not checked for " + p.name + ": its agent runs without bootstrap; the k3s there and its ports are not sitecon's"})
			continue
		}
		if a, err := netip.ParseAddr(p.address); err == nil && self.Network.Contains(a.Unmap()) {
			peers = append(peers, p)
			continue
		}
		out = append(out, Finding{Severity: Warn, Subject: p.name,
			Summary:  fmt.Sprintf("not dialled: outside the cluster prefix: %s's address %s is not in %s", p.name, p.address, self.Network),
			Evidence: []string{"address from " + source},
			Next:     "check " + p.name + "'s cluster interface and address (a node's address outside the cluster prefix is misconfigured, or not one of ours)"})
	}
	if len(peers) == 0 {
		if len(out) > 0 {
			return out // each node said why it was not dialled
		}
		return append(out, Finding{NotChecked: true, Severity: Info, Summary: "not checked: no peer known inside the cluster prefix (" + source + ")"})
	}
	dial := env.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	type result struct {
		port ClusterPort
		err  error
	}
	results := make([][]result, len(peers))
	for i, p := range peers {
		for _, port := range env.ClusterPorts {
			if !port.ServersOnly || p.roleKnown && p.server {
				results[i] = append(results[i], result{port: port})
			}
		}
	}
	var wg sync.WaitGroup
	for i, p := range peers {
		for j, r := range results[i] {
			port := r.port
			wg.Add(1)
			go func() {
				defer wg.Done()
				dctx, cancel := context.WithTimeout(ctx, peerDialTimeout)
				defer cancel()
				c, err := dial(dctx, "tcp", net.JoinHostPort(p.address, strconv.Itoa(int(port.Port))))
				if err == nil {
					_ = c.Close()
				}
				results[i][j].err = err
			}()
		}
	}
	wg.Wait()
	var fine, partly []string
	for i, p := range peers {
		var bad, good, badPorts []string
		for _, r := range results[i] {
			if r.err != nil {
				badPorts = append(badPorts, strconv.Itoa(int(r.port.Port)))
				bad = append(bad, fmt.Sprintf("tcp %d (%s): %s", r.port.Port, r.port.What, dialProblem(r.err)))
			} else {
				good = append(good, strconv.Itoa(int(r.port.Port)))
			}
		}
		var notes []string
		if !p.roleKnown {
			notes = append(notes, "its role is not known here: the servers' ports (API server, etcd) were not dialled")
		}
		if len(bad) == 0 {
			fine = append(fine, fmt.Sprintf("%s %s: %s", p.name, p.address, strings.Join(good, ", ")))
			if !p.roleKnown {
				partly = append(partly, p.name+": its role is not known here (from another node's peer list), so only the every-node ports were dialled, not the servers' (API server, etcd)")
			}
			continue
		}
		f := Finding{Severity: Error, Subject: p.name, Evidence: append(append(bad, "answered: "+orNone(good)), notes...),
			Next: "check the firewall between the nodes (sitecon's nftables table accepts the cluster prefix) and that the service runs on " + p.name}
		if len(good) == 0 {
			f.Summary = fmt.Sprintf("%s (%s) answers on none of its cluster ports from here", p.name, p.address)
			f.Next = "check that " + p.name + " is up and on this LAN (SC-NODE-NOT-READY), then its firewall"
		} else {
			f.Summary = fmt.Sprintf("%s (%s): no answer from here on tcp %s", p.name, p.address, strings.Join(badPorts, ", "))
		}
		out = append(out, f)
	}
	if !slices.ContainsFunc(out, func(f Finding) bool { return f.Severity == Error }) {
		summary := fmt.Sprintf("the cluster ports of %d peer%s answer from here", len(peers), plural(len(peers)))
		if len(out) > 0 {
			partly = append(partly, fmt.Sprintf("%d node%s not dialled (see the other findings)", len(out), plural(len(out))))
		}
		if len(partly) > 0 {
			summary = "partly checked: " + summary + "; " + strings.Join(partly, "; ")
		}
		evidence := append(fine, partly...)
		out = append(out, Finding{NotChecked: len(partly) > 0, Severity: OK, Summary: summary, Evidence: append(evidence, "peers from "+source, udpNote)})
	}
	return out
}

// unmanagedNodes are the nodes whose agents report that they run without
// bootstrap (NetworkReport.Unmanaged): sitecon runs no k3s there, nor its
// firewall. Nodes that did not answer are not among them.
func unmanagedNodes(ctx context.Context, env *Env) map[string]bool {
	out := map[string]bool{}
	if env.NodeReports == nil {
		return out
	}
	for _, a := range env.NodeReports(ctx).Answers {
		if a.Answered && a.Report != nil && a.Report.Network != nil && a.Report.Network.Unmanaged {
			out[a.Name()] = true
		}
	}
	return out
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// dialProblem says why a connect failed, in a technician's words.
func dialProblem(err error) string {
	var netErr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused (the host answers; nothing listens there, or a firewall rejects)"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("no answer within %s (a firewall drops it, or the host is down)", peerDialTimeout)
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable (no route, or the host does not answer ARP)"
	}
	return err.Error()
}

// peersOf are the nodes to dial but self, and where they came from: the
// cluster API's Nodes (their InternalIP, their role by label) when it was
// read, else the nodes' own reports (each one's address and role, and the
// peers it last saw, their role unknown); skipped are the nodes left out
// for want of an address, and why.
func peersOf(ctx context.Context, env *Env, self LocalNode) (peers []peer, source string, skipped []skippedNode) {
	isSelf := func(name, addr string) bool {
		return name != "" && name == self.Name || addr != "" && addr == self.Address
	}
	var out []peer
	if env.APIProblem == "" && len(env.Data.Nodes) > 0 {
		for _, n := range env.Data.Nodes {
			addr := kube.InternalIP(n)
			if addr == "" {
				skipped = append(skipped, skippedNode{n.Name, "it has no InternalIP in the cluster API"})
				continue
			}
			if isSelf(n.Name, addr) {
				continue
			}
			out = append(out, peer{name: n.Name, address: addr, server: kube.IsServer(n), roleKnown: true})
		}
		slices.SortFunc(out, func(a, b peer) int { return strings.Compare(a.name, b.name) })
		return out, "the cluster API's Nodes", skipped
	}
	if env.NodeReports == nil {
		return nil, "the cluster API could not be read, and there is no cluster config to ask the nodes with", nil
	}
	r := env.NodeReports(ctx)
	byName := map[string]*peer{}
	add := func(p peer) {
		if _, err := netip.ParseAddr(p.address); err != nil || isSelf(p.name, p.address) {
			return
		}
		if known, ok := byName[p.name]; ok {
			if p.roleKnown && !known.roleKnown {
				*known = p
			}
			return
		}
		byName[p.name] = &p
	}
	noAddress := map[string]bool{}
	for _, a := range r.Answers {
		if a.Report == nil {
			continue
		}
		if _, err := netip.ParseAddr(a.Report.ClusterIP); err != nil && a.Name() != self.Name {
			noAddress[a.Name()] = true
		}
		role := a.Report.Role
		add(peer{name: a.Name(), address: a.Report.ClusterIP, server: role == "server" || role == "seed", roleKnown: role != ""})
		for _, p := range a.Report.Peers {
			add(peer{name: p.Name, address: p.Address})
		}
	}
	for _, p := range byName {
		out = append(out, *p)
	}
	for _, name := range slices.Sorted(maps.Keys(noAddress)) {
		// Another node's peer list may have given its address.
		if byName[name] == nil {
			skipped = append(skipped, skippedNode{name, "its report gives no cluster address"})
		}
	}
	slices.SortFunc(out, func(a, b peer) int { return strings.Compare(a.name, b.name) })
	why := "the nodes' own reports (the cluster API could not be read)"
	if len(out) == 0 && r.Problem != "" {
		why = r.Problem
	}
	return out, why, skipped
}

// skippedNode is a node the peer-port check could not dial, and why.
type skippedNode struct{ name, why string }
