package formation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/sitecon/sitecon/agent/config"
)

// FormedMarker says this node has been part of a cluster: it initialised
// it, joined it, was handed a bundle of a cluster that already runs, or saw
// a member of it answer. It lives in the agent's state directory
// (Records.FormedMarkerFile), apart from k3s's data: a seed whose k3s data
// is lost must not initialise the same cluster a second time (two
// clusters, one ID, one token).
type FormedMarker struct {
	ClusterID string `json:"cluster_id"`
	NodeName  string `json:"node_name"`
	// How is what made the node a member, in words.
	How string    `json:"how"`
	At  time.Time `json:"at"`
	// Joined is set once this node's k3s ran in the cluster (its Node was
	// Ready): from then on a restart starts k3s without waiting on the
	// seed. A marker written before that (a bundle of a running cluster, a
	// member seen on the prefix) keeps the first join waiting.
	Joined bool `json:"joined,omitempty"`
}

// ReadFormedMarker reads the marker; a missing file is no marker (false, nil).
func ReadFormedMarker(path string) (FormedMarker, bool, error) {
	return config.ReadOptional[FormedMarker](path)
}

// MarkFormed writes the marker once: a marker of the same cluster is kept
// as it is (the first time tells most), one of another cluster replaced.
// The one change to a kept marker: Joined, once set, is added.
func MarkFormed(path string, m FormedMarker) error {
	if prev, ok, err := ReadFormedMarker(path); err == nil && ok && strings.EqualFold(prev.ClusterID, m.ClusterID) {
		if prev.Joined || !m.Joined {
			return nil
		}
		m, m.Joined = prev, true
	}
	if m.At.IsZero() {
		m.At = time.Now().UTC()
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return config.WriteFileAtomic(path, append(data, '\n'), 0o600)
}

// HasBeenMember reports whether this node ran in cluster v before, from its
// own disk: k3s's etcd member data (a server), or a formed marker of this
// cluster and node that says it joined. Such a node restarts k3s without
// waiting on any other node: after a whole-site power cut the seed cannot
// reach etcd quorum without the others, so a member waiting on the seed's
// /status would wait for ever (k3s restarts a joined server from its own
// etcd data while the initial member is down, k3s-io/k3s#4746). An
// unreadable marker is unknown, and unknown waits (the first join's rule);
// why says what decided, for the log.
func HasBeenMember(v *config.Validated, etcdData bool, markerPath string) (member bool, why string) {
	if etcdData && !v.IsWorkerNode {
		return true, "k3s's etcd member data is on this node"
	}
	m, ok, err := ReadFormedMarker(markerPath)
	switch {
	case err != nil:
		return false, fmt.Sprintf("formed marker unreadable (%v)", err)
	case !ok:
		return false, "never joined (no formed marker)"
	case !strings.EqualFold(m.ClusterID, v.ClusterID) || m.NodeName != v.NodeName:
		return false, fmt.Sprintf("the formed marker is of %s in cluster %s", m.NodeName, m.ClusterID)
	case !m.Joined:
		return false, "never joined (" + m.How + ")"
	}
	return true, fmt.Sprintf("joined cluster %s before (marker of %s)", m.ClusterID, m.At.Format(time.RFC3339))
}

// DurableServerMember reports whether this node's own disk says it is a
// server member of cluster v: a server's etcd member data, and no formed
// marker naming another cluster. /status answers from it while the live
// Node cannot be read (no quorum after a power cut): a device looking for
// members must find them, or it would initialise a second cluster.
func DurableServerMember(v *config.Validated, etcdData bool, markerPath string) bool {
	if v.IsWorkerNode || !etcdData {
		return false
	}
	m, ok, err := ReadFormedMarker(markerPath)
	if err != nil {
		// A member's data is there; an unreadable marker cannot unsay it.
		return true
	}
	return !ok || strings.EqualFold(m.ClusterID, v.ClusterID)
}

// ErrAlreadyFormed means this node must not initialise its cluster: it has
// been part of it, or a member of it answers on the cluster network.
var ErrAlreadyFormed = errors.New("refusing to initialise the cluster a second time")

// InitCheck decides whether this node may run cluster-init, from what is on
// its disk: the seed in effect, its etcd member data and its formed marker
// (markerPath). initialise false with a nil error: the node joins (a joiner,
// or a seed restarting over its etcd data). A non-nil error: the node can
// neither initialise nor join, and says why. It does not look at the
// network; a caller about to initialise probes the prefix (ProbeMembers).
func InitCheck(d SeedDecision, etcdData bool, markerPath string) (initialise bool, err error) {
	v := d.Config
	switch {
	case !v.IsSeed || etcdData:
		return false, nil
	case !d.MayInitialise:
		return false, fmt.Errorf("%w: %s is the seed in effect (%s) but has no etcd data, and a seed learnt from the cluster never initialises; "+
			"on a live member run `sitecon seed NODE` to move the seed there, then give this device a bundle (sitecon node add or replace)", ErrAlreadyFormed, v.NodeIP, d.Why)
	}
	m, ok, err := ReadFormedMarker(markerPath)
	if err != nil {
		// Unknown is not "never formed".
		return false, fmt.Errorf("%w: cannot tell whether this node formed the cluster before: %v (repair the file; remove it only if this device never ran this cluster)", ErrAlreadyFormed, err)
	}
	if ok && strings.EqualFold(m.ClusterID, v.ClusterID) {
		return false, fmt.Errorf("%w: %s was part of cluster %s before (%s, %s, see %s) and has no etcd data now; "+
			"on a live member run `sitecon seed NODE` to move the seed off %s, then give this device a bundle (sitecon node replace)",
			ErrAlreadyFormed, v.NodeName, v.ClusterID, m.How, m.At.Format(time.RFC3339), markerPath, v.NodeIP)
	}
	return true, nil
}

// ProbeAddresses are the addresses a seed about to initialise asks for a
// member of its cluster. Before k3s runs the node knows no member list, so
// it scans: every host address of a prefix up to a /24, and for a larger
// prefix the lowest 254 host addresses, where sitecon's own addressing
// (formation and join-info hand out addresses from the bottom up) puts the
// nodes, plus the extra addresses given (the seed record's). Its own
// address is left out.
func ProbeAddresses(v *config.Validated, extra ...netip.Addr) []netip.Addr {
	const limit = 254
	seen := map[netip.Addr]bool{v.NodeIP: true}
	var out []netip.Addr
	add := func(a netip.Addr) {
		if a.IsValid() && !seen[a] && v.Network.Contains(a) {
			seen[a] = true
			out = append(out, a)
		}
	}
	last := config.Broadcast(v.Network)
	n := 0
	for a := v.Network.Masked().Addr().Next(); a.IsValid() && a != last && n < limit; a = a.Next() {
		add(a)
		n++
	}
	add(v.JoinIP)
	for _, a := range extra {
		add(a)
	}
	return out
}

// MemberProbe asks addresses for /status and reports the first that answers
// cluster:<ClusterID>.
type MemberProbe struct {
	ClusterID string
	Dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	// Timeout bounds each address's answer (default 1s: an address nobody
	// has costs the whole timeout, a LAN answer takes milliseconds).
	Timeout time.Duration
	// Parallel bounds the requests in flight (default 32).
	Parallel int
}

// Find returns the address of a member of the cluster among addrs, or an
// invalid address when none answers for it. Addresses that do not answer,
// answer empty (not a member yet) or for another cluster do not count.
func (p MemberProbe) Find(ctx context.Context, addrs []netip.Addr) netip.Addr {
	timeout, parallel := p.Timeout, p.Parallel
	if timeout == 0 {
		timeout = time.Second
	}
	if parallel == 0 {
		parallel = 32
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		found netip.Addr
		wg    sync.WaitGroup
	)
	slots := make(chan struct{}, parallel)
	for _, a := range addrs {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			answer, err := statusAnswer(ctx, a, p.Dial, timeout)
			if err == nil && answer == "cluster:"+p.ClusterID {
				mu.Lock()
				if !found.IsValid() {
					found = a
				}
				mu.Unlock()
				cancel()
			}
		}()
	}
	wg.Wait()
	return found
}
