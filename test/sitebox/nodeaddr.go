package sitebox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/test/blackhole"
)

// A site's nodes have cluster addresses on this machine, and each node's
// agent (StartAgents, or a test's in-process agent) answers /status and the
// proof of life there, so the agents' failover guard probes the real agent
// of each node and sends nothing off the machine. A failed node's address
// is held silent, as a powered-off device's is.

// ClusterTokenFile holds the site's cluster token (mode 0600): the secret
// every node's agent proves its life with.
func (s *Site) ClusterTokenFile() string { return filepath.Join(s.Dir, "cluster-token") }

// ClusterToken is the site's cluster token.
func (s *Site) ClusterToken() (config.Secret, error) {
	data, err := os.ReadFile(s.ClusterTokenFile())
	if err != nil {
		return "", err
	}
	return config.Secret(strings.TrimSpace(string(data))), nil
}

// NodeConfigFile is where WriteNodeConfigs puts node's cluster config.
func (s *Site) NodeConfigFile(node string) string {
	return filepath.Join(s.Dir, "config", node+".json")
}

// WriteNodeConfigs writes each node's cluster config as its device holds
// it (the cluster's id and token, the node's name, UUID and address, the
// seed), for what reads one on a device: the node reports of the console
// and sitecon status (--config) when the cluster API does not answer, the
// doctor's node-side checks. The cluster interface is loopback and the
// prefix the nodes' /24 there, so a scan of the prefix stays on this
// machine. A bootstrap-mode site's agents have theirs (ClusterConfig).
func (s *Site) WriteNodeConfigs() error {
	if s.Bootstrap || len(s.Nodes) == 0 {
		return nil
	}
	for _, n := range s.Nodes {
		ip, err := netip.ParseAddr(n.IP)
		if err != nil || !ip.IsLoopback() {
			return fmt.Errorf("node %s's address %q is not on this machine's loopback", n.Name, n.IP)
		}
		cfg := config.Config{ClusterName: s.ClusterName, ClusterID: s.ClusterID, ClusterInterface: "lo",
			ClusterIPPrefix: n.IP + "/24", JoinServerIP: s.Nodes[0].IP, TokenFile: s.ClusterTokenFile(),
			NodeName: n.Name, NodeUUID: n.UUID}
		data, err := json.MarshalIndent(cfg, "", "  ")
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(s.NodeConfigFile(n.Name)), 0o700); err != nil {
			return err
		}
		if err := config.WriteFileAtomic(s.NodeConfigFile(n.Name), append(data, '\n'), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// writeClusterToken makes the site's cluster token.
func (s *Site) writeClusterToken() error {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	return config.WriteFileAtomic(s.ClusterTokenFile(), []byte(hex.EncodeToString(b[:])+"\n"), 0o600)
}

// StatusAddr is where node's agent serves /status and the proof of life:
// the node's cluster address and the status port, as on a device. On a
// bootstrap-mode site that address is inside the node's namespace.
func (s *Site) StatusAddr(node string) (string, error) {
	n, err := s.node(node)
	if err != nil {
		return "", err
	}
	if s.Bootstrap {
		// Dialled from here it would leave the machine.
		return "", fmt.Errorf("a bootstrap-mode node serves /status in its namespace %s only", s.Netns(node))
	}
	return net.JoinHostPort(n.IP, strconv.Itoa(config.StatusPort)), nil
}

// pickNodeNetwork picks the site's node network: a /24 inside 127.0.0.0/8
// (routed to lo on Linux without any configuration), a different one per
// site so that sites running side by side (tests in parallel) neither
// share a node address nor take each other's status ports. A network
// whose status port is taken on any node address is passed over.
func pickNodeNetwork(nodes int) (netip.Prefix, error) {
	for range 64 {
		var b [2]byte
		if _, err := rand.Read(b[:]); err != nil {
			return netip.Prefix{}, err
		}
		// 127.100.0.0 to 127.199.255.0: clear of 127.0.0.0/16, where
		// resolvers and /etc/hosts live.
		prefix := netip.PrefixFrom(netip.AddrFrom4([4]byte{127, 100 + b[0]%100, b[1], 0}), 24)
		free := true
		for i := range nodes * 3 {
			// Each node's status port, its kubelet's and its kwok's
			// behind the kubelet's front (kubeletfront.go).
			port := []int{config.StatusPort, KubeletPort, kubeletBackendPort}[i%3]
			l, err := net.Listen("tcp", net.JoinHostPort(nodeAddr(prefix, i/3).String(), strconv.Itoa(port)))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free {
			return prefix, nil
		}
	}
	return netip.Prefix{}, errors.New("no free node network in 127.0.0.0/8")
}

// nodeAddr is the i-th node's address in the node network: .1, .2, ...
func nodeAddr(prefix netip.Prefix, i int) netip.Addr {
	a := prefix.Addr().As4()
	a[3] = byte(i + 1)
	return netip.AddrFrom4(a)
}

// vipAddr is the address kube-vip holds in the site's records: .250,
// past every node's (MaxNodes), as a site's VIP is no device's address.
func vipAddr(prefix netip.Prefix) netip.Addr { return nodeAddr(prefix, 249) }

// NodePrefix is the site's node network (a /24 in 127.0.0.0/8), as a
// formation would take for its cluster prefix.
func (s *Site) NodePrefix() string {
	if len(s.Nodes) == 0 {
		return ""
	}
	ip, err := netip.ParseAddr(s.Nodes[0].IP)
	if err != nil {
		return ""
	}
	p, _ := ip.Prefix(24)
	return p.String()
}

// heldSilence is a failed node's address held silent in this process.
type heldSilence struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func silentProcess(node string) string { return "silent-" + node }

// silence holds a failed node's status address silent, as a powered-off
// device's: by a site process (the sitebox binary in SilenceHolder, so
// that it outlives a `sitebox fail` command), else in this process. The
// hole takes the address once whatever listens there (the node's agent
// in a test, dying) lets it go.
func (s *Site) silence(n Node) error {
	addr := net.JoinHostPort(n.IP, strconv.Itoa(config.StatusPort))
	if s.SilenceHolder != "" {
		if s.running(silentProcess(n.Name)) {
			return nil // held already
		}
		// --dir: a site process's command line names its site (pid).
		if err := s.StartProcess(silentProcess(n.Name), s.SilenceHolder, "silence", "--dir", s.Dir, "--addr", addr); err != nil {
			return err
		}
		// The node's processes are dead already: the address is silent
		// within moments, and a probe right after `sitebox fail` must not
		// find it refusing (a host that is up).
		return waitSilent(addr, 10*time.Second)
	}
	ctx, cancel := context.WithCancel(context.Background())
	held := &heldSilence{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(held.done)
		_ = HoldSilent(ctx, addr)
	}()
	s.keepHeld(n.Name, held)
	return nil
}

// keepHeld records what holds node's address in this process, ending what
// held it before.
func (s *Site) keepHeld(node string, held *heldSilence) {
	s.holesMu.Lock()
	defer s.holesMu.Unlock()
	if s.holes == nil {
		s.holes = map[string]*heldSilence{}
	}
	if prev := s.holes[node]; prev != nil {
		prev.cancel()
		<-prev.done
	}
	s.holes[node] = held
}

// unsilence gives a node's status address back (its agent may listen
// there again); nothing when it is not held.
func (s *Site) unsilence(node string) error {
	s.holesMu.Lock()
	held := s.holes[node]
	delete(s.holes, node)
	s.holesMu.Unlock()
	if held != nil {
		held.cancel()
		<-held.done
	}
	if s.running(silentProcess(node)) {
		return s.stop(silentProcess(node))
	}
	return nil
}

// HoldSilent holds addr silent (blackhole) until ctx ends, taking it as
// soon as nothing else listens there.
func HoldSilent(ctx context.Context, addr string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		hole, err := blackhole.Listen(addr)
		if err == nil {
			<-ctx.Done()
			return hole.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never came free: %w", addr, err)
		case <-tick.C:
		}
	}
}

// waitSilent returns once a connection to addr neither completes nor is
// refused (it times out), or fails after within.
func waitSilent(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			return nil
		}
		if conn != nil {
			conn.Close()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is not silent after %s (last: %v)", addr, within, err)
		}
		<-tick.C
	}
}

// errBootHost: a bootstrap-mode node's address lives in its namespace,
// which a failed node's power cut has taken.
var errBootHost = errors.New("a bootstrap-mode site's failed node is powered off; power it on instead")

// HostUp makes a failed node's host answer again while its agent and k3s
// stay down: its address refuses connections (the kernel's reset), as a
// device whose k3s stopped but whose containers may still run.
func (s *Site) HostUp(node string) error {
	if _, err := s.failedHost(node); err != nil {
		return err
	}
	return s.unsilence(node)
}

// failedHost is node, when it is failed and its host can be staged (not a
// bootstrap-mode node, whose power cut took its namespace).
func (s *Site) failedHost(node string) (Node, error) {
	n, err := s.node(node)
	if err != nil {
		return Node{}, err
	}
	if s.running("kwok-" + node) {
		return Node{}, fmt.Errorf("node %s is not failed", node)
	}
	if s.Bootstrap {
		return Node{}, errBootHost
	}
	return n, nil
}

// HostPaused makes a failed node's host take connections and never answer
// them, as a device whose agent is stopped (SIGSTOP) or thrashing: its
// kernel completes the handshake, nothing reads; its containers may still
// run. Held in this process (tests); HostUp or HostDown ends it.
func (s *Site) HostPaused(node string) error {
	n, err := s.failedHost(node)
	if err != nil {
		return err
	}
	if err := s.unsilence(node); err != nil {
		return err
	}
	addr := net.JoinHostPort(n.IP, strconv.Itoa(config.StatusPort))
	var l net.Listener
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The node's agent, dying, may hold the address a moment longer.
		if l, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // a retry interval, not a wait for a condition
	}
	if err != nil {
		return fmt.Errorf("pause %s's host: %w", node, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	held := &heldSilence{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(held.done)
		<-ctx.Done()
		_ = l.Close() // never accepted: the queued connections get no answer
	}()
	s.keepHeld(n.Name, held)
	return nil
}

// HostDown takes a failed node's host away again (after HostUp): its
// address is silent, as a powered-off device's.
func (s *Site) HostDown(node string) error {
	n, err := s.failedHost(node)
	if err != nil {
		return err
	}
	return s.silence(n)
}
