package apps

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/localapi"
)

// LifeEvidence is what a probe of a lost node on the cluster network found.
type LifeEvidence string

// NodeLife is what a probe of a node on the cluster network found.
type NodeLife struct {
	// Alive is the guard's reading of the evidence: a force-delete waits
	// while it is true.
	Alive    bool
	Evidence LifeEvidence
	// Detail says what was tried and what came back, for the report.
	Detail string
	// State is the node's agent's signed word about its fence (nil: no
	// proof, or an answer that said nothing of it).
	State *config.LifeState
	// At is when the probe began (set by the failover guard): a silence
	// it found started no later than that, and counting from it never
	// counts more silence than there was.
	At time.Time
}

// NodeProbe looks for a sign of life from a node on the cluster network.
type NodeProbe func(ctx context.Context, node *corev1.Node) NodeLife

// probeTimeout bounds one probe: a node whose kernel does not take the
// connection within it is taken as silent.
const probeTimeout = 3 * time.Second

// LifeProbe challenges a lost node's agent, on its cluster address, to
// prove that it runs (config.LifeKey): only an answer that verifies with
// the cluster's key, for that node and this probe's fresh nonce, is the
// node's sign of life; a refused connection is its host's.
type LifeProbe struct {
	Key config.LifeKey
	// FailoverTimeout is the cluster's: a node's word that it fenced counts
	// only when its own timeout is the same (0: not compared here; the
	// apps controller compares with the cluster record's, FencedWithin).
	FailoverTimeout time.Duration
	// Dial opens the probe's connections (nil: a plain dialer). The agent
	// passes its own; tests check every address dialled.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Node probes the node's agent at its InternalIP. A node without one
// cannot be probed: that is no evidence of its death, so it counts as
// alive.
func (p LifeProbe) Node(ctx context.Context, node *corev1.Node) NodeLife {
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && a.Address != "" {
			return p.Probe(ctx, net.JoinHostPort(a.Address, strconv.Itoa(config.StatusPort)), node.Name)
		}
	}
	return NodeLife{Alive: true, Evidence: LifeUnknown, Detail: "it has no InternalIP to probe; its death cannot be shown"}
}

// Probe challenges node's agent at addr (host:port).
func (p LifeProbe) Probe(ctx context.Context, addr, node string) NodeLife {
	if !p.Key.Valid() {
		return NodeLife{Alive: true, Evidence: LifeUnknown,
			Detail: "this agent has no cluster token to check a proof of life with; its death cannot be shown"}
	}
	nonce, err := config.NewLifeNonce()
	if err != nil {
		return NodeLife{Alive: true, Evidence: LifeUnknown, Detail: fmt.Sprintf("no challenge for %s: %v", addr, err)}
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	dial := p.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: probeTimeout}).DialContext
	}
	// Whether the connection was made tells a host that is up from one
	// that is silent; a fresh transport per probe, so it is this
	// probe's connection (no proxy: a proxy's answer is not the node's).
	var dialed struct {
		sync.Mutex
		err       error
		connected bool
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			conn, err := dial(ctx, network, a)
			dialed.Lock()
			dialed.err, dialed.connected = err, err == nil
			dialed.Unlock()
			return conn, err
		}}}
	url := "http://" + addr + config.LifeProofPath + "?nonce=" + hex.EncodeToString(nonce)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return NodeLife{Alive: true, Evidence: LifeUnknown, Detail: err.Error()}
	}
	resp, err := client.Do(req)
	if err != nil {
		dialed.Lock()
		connected, dialErr := dialed.connected, dialed.err
		dialed.Unlock()
		if !connected {
			// A dial still running when the deadline came is silence.
			if dialErr == nil {
				dialErr = err
			}
			return dialLife(addr, dialErr)
		}
		return NodeLife{Alive: true, Evidence: LifeStranger,
			Detail: fmt.Sprintf("%s took the connection but gave no proof of life for %s (%v): its host is up (paused or overloaded, its containers perhaps still running); power the device off, or confirm it is off", addr, node, localapi.URLErrorCause(err))}
	}
	defer resp.Body.Close()
	stranger := func(why string) NodeLife {
		return NodeLife{Alive: true, Evidence: LifeStranger,
			Detail: fmt.Sprintf("%s answered without %s's proof of life (%s): a host answers at that address (the node's, half up, or another device's); power the device off, or confirm it is off", addr, node, why)}
	}
	if resp.StatusCode != http.StatusOK {
		return stranger("GET " + config.LifeProofPath + " answered " + resp.Status)
	}
	var answer config.LifeProofAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<10)).Decode(&answer); err != nil {
		return stranger("not a proof: " + err.Error())
	}
	if err := p.Key.Verify(node, nonce, answer); err != nil {
		if errors.Is(err, config.ErrCannotCheckNodeWord) {
			// This node's fault, not the answering node's: said so.
			return NodeLife{Alive: true, Evidence: LifeUnknown,
				Detail: fmt.Sprintf("%s answered, but this node cannot check %s's signed proof of life (%v): its death cannot be shown; see sitecon doctor's SC-NODE-CREDENTIAL for this node", addr, node, err)}
		}
		return stranger(err.Error())
	}
	life := NodeLife{Alive: true, Evidence: LifeProven, State: answer.State,
		Detail: fmt.Sprintf("its agent proved at %s that it runs (cluster %s, node %s)", addr, p.Key.ClusterID(), node)}
	if answer.State == nil {
		return life
	}
	st := *answer.State
	fencedFor, fenced := st.FencedFor()
	switch {
	case !fenced:
		life.Detail += "; it has not fenced"
	case !st.Fencing:
		life.Detail += "; it runs without fencing"
	case p.FailoverTimeout > 0 && st.FailoverTimeout() != p.FailoverTimeout:
		life.Detail += fmt.Sprintf("; it fenced, but with a failover timeout of %s, not the cluster's %s", st.FailoverTimeout(), p.FailoverTimeout)
	default:
		life.Alive, life.Evidence = false, LifeFenced
		life.Detail = fmt.Sprintf("its agent proved at %s that it runs and has fenced: its auto apps' workloads stopped %s ago", addr, fencedFor.Round(time.Second))
	}
	return life
}

// FencedWithin is life judged against the cluster's failover timeout: a
// node's signed word that it fenced counts only when it fenced with that
// timeout (its fence came before the leader's force-delete); otherwise it
// is a proven sign of life, as LifeProbe says with FailoverTimeout set.
func FencedWithin(life NodeLife, clusterTimeout time.Duration) NodeLife {
	if life.Evidence != LifeFenced || life.State == nil || clusterTimeout <= 0 || life.State.FailoverTimeout() == clusterTimeout {
		return life
	}
	life.Alive, life.Evidence = true, LifeProven
	life.Detail += fmt.Sprintf("; but it fenced with a failover timeout of %s, not the cluster's %s", life.State.FailoverTimeout(), clusterTimeout)
	return life
}

// dialLife reads a failed connection: a refusal is the host's kernel
// answering, a timeout or no route is silence, and anything else (a local
// failure) shows nothing about the node.
func dialLife(addr string, err error) NodeLife {
	cause := localapi.URLErrorCause(err)
	var netErr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return NodeLife{Alive: true, Evidence: LifeHostUp,
			Detail: fmt.Sprintf("its host is up: %s refused the connection (its kernel answered; k3s may be down while its containers still run)", addr)}
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return NodeLife{Evidence: LifeSilent, Detail: fmt.Sprintf("%s is silent (%v)", addr, cause)}
	}
	return NodeLife{Alive: true, Evidence: LifeUnknown, Detail: fmt.Sprintf("%s could not be probed (%v); its death cannot be shown", addr, cause)}
}

// Kinds of evidence, and whether each is a sign of life for the guard.
// The guard lets a failover go only on evidence that the old copy has
// stopped: silence for the whole timer, or the node's own signed word that
// it has fenced. Anything else from the host holds it.
const (
	// LifeProven: the node's own agent answered the challenge with the
	// cluster's proof (alive).
	LifeProven LifeEvidence = "proven"
	// LifeFenced: the node's own agent proved that it runs and said,
	// signed, that it has stopped its auto apps' workloads (its fence),
	// with fencing on and the cluster's failover timeout: its pods may
	// go (not alive, for the guard).
	LifeFenced LifeEvidence = "fenced"
	// LifeHostUp: the address refused the connection. A host's kernel
	// sends that reset: the host runs (k3s down, its containers perhaps
	// still running), so it is a sign of life.
	LifeHostUp LifeEvidence = "host-up"
	// LifeStranger: something answered at the address without the node's
	// proof, or took the connection and never answered (a paused or
	// thrashing host, its agent stalled while its containers run; an agent
	// half up; a stray server or another device that took the address):
	// a sign of the host, so it holds. The technician powers the device
	// off, or confirms it is off.
	LifeStranger LifeEvidence = "stranger"
	// LifeSilent: the connection timed out or found no route to the host:
	// no sign of life.
	LifeSilent LifeEvidence = "silent"
	// LifeUnknown: the probe could not be made (no address, no key, a
	// local failure): no evidence of death, so it counts as alive.
	LifeUnknown LifeEvidence = "unknown"
)
