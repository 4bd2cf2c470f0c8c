package statusserver

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/kube"
)

// A server that was powered off while the others removed it (`sitecon
// node remove`, or `node replace` when a new device took its name) still
// has its etcd data when it powers back on: it has been a member, so it
// would start k3s at once (it must not wait for the seed after a power
// cut), and k3s restarts an init node removed from etcd as a new
// single-node cluster (k3s-io/k3s#13623). Its own watch of its removal
// (watchRemoval) never ran: it was off. So before starting k3s it asks its
// peers, on their /status servers, whether it is still a member; a peer
// answers from what it can read now with quorum, and signs its verdict
// with the cluster's key (config.MembershipAnswer). Only a proven
// "removed" holds the node; silence, refusals, "unknown" and unproven
// words start k3s as before, so a whole-site power cut (nobody has quorum
// yet) comes back as it did.

// DefaultMembershipTimeout bounds the question: every peer is asked at
// once, and each answer not in within it counts as silence. A peer on the
// LAN answers in milliseconds; an address with nobody behind it costs the
// whole bound, once, at power-on.
const DefaultMembershipTimeout = 3 * time.Second

// membershipReadBudget bounds a peer's reads for one answer, inside the
// asker's timeout.
const membershipReadBudget = 2 * time.Second

// MembershipEvidence is what a peer read, just now, to judge whether a
// node is still a member: each read with its error (nil object: not found).
type MembershipEvidence struct {
	// Synced: the peer's link to its cluster is connected and synced.
	Synced bool
	// Node is the asked node's Node object, read now (a quorum read).
	Node    *corev1.Node
	NodeErr error
	// Record is the cluster's sitecon-cluster ConfigMap, read now.
	Record    *corev1.ConfigMap
	RecordErr error
	// EtcdMembers are etcd's member names as the peer's own member lists
	// them; EtcdErr when they could not be read (a worker, no etcd client
	// certificate, no answer).
	EtcdMembers []string
	EtcdErr     error
}

// JudgeMembership decides, from a peer's fresh reads, whether node (its
// device UUID uuid, "" when unknown) is still a member of cluster
// clusterID. Removed is said on two grounds only, both what `node remove`
// and `node replace` leave: its Node is gone and the cluster record of the
// same cluster no longer lists it (and etcd, when it can be read, lists no
// member of it), or a Node of its name carries another device's UUID.
// Anything the peer cannot read now is unknown: unknown holds nobody.
func JudgeMembership(clusterID, node, uuid string, in MembershipEvidence) (config.Verdict, string) {
	switch {
	case !in.Synced:
		return config.VerdictUnknown, "this peer's link to the cluster is not synced (no quorum yet, or k3s starting)"
	case in.NodeErr != nil:
		return config.VerdictUnknown, "cannot read Node " + node + " now: " + in.NodeErr.Error()
	case in.Node != nil:
		if other := in.Node.Labels[kube.LabelNodeUUID]; uuid != "" && other != "" && !strings.EqualFold(other, uuid) {
			return config.VerdictRemoved, fmt.Sprintf("Node %s is now device %s, not %s: another device took its name (node replace)", node, other, uuid)
		}
		return config.VerdictMember, "its Node " + node + " is in the cluster"
	case in.RecordErr != nil:
		return config.VerdictUnknown, "its Node is gone, and the cluster record cannot be read now: " + in.RecordErr.Error()
	case in.Record == nil:
		return config.VerdictUnknown, fmt.Sprintf("its Node is gone, and there is no cluster record %s/%s to say it was removed", kube.AppNamespace, kube.ClusterConfigMapName)
	case !strings.EqualFold(in.Record.Data[kube.ClusterKeyID], clusterID):
		return config.VerdictUnknown, fmt.Sprintf("its Node is gone, and the cluster record is of cluster %q", in.Record.Data[kube.ClusterKeyID])
	}
	for _, n := range strings.Split(in.Record.Data[kube.ClusterKeyNodes], ",") {
		if strings.TrimSpace(n) == node {
			// A Node deleted by hand (k3s registers it again), or one not
			// registered yet: no removal.
			return config.VerdictUnknown, "its Node is gone, but the cluster record still lists it"
		}
	}
	if in.EtcdErr == nil {
		if i := slices.IndexFunc(in.EtcdMembers, func(m string) bool { return etcdMemberOf(m, node) }); i >= 0 {
			// Removal under way (k3s drops the member after the Node), or
			// a member whose Node never registered.
			return config.VerdictUnknown, "its Node is gone, but etcd still lists its member " + in.EtcdMembers[i]
		}
		return config.VerdictRemoved, fmt.Sprintf("its Node %s is gone, the cluster record no longer lists it, and etcd has no member of it", node)
	}
	return config.VerdictRemoved, fmt.Sprintf("its Node %s is gone and the cluster record no longer lists it", node)
}

// etcdMemberOf says whether etcd member name is node's: k3s names a member
// after its node with a dash and 8 hex digits (node-a-1a2b3c4d).
func etcdMemberOf(name, node string) bool {
	if name == node {
		return true
	}
	suffix, ok := strings.CutPrefix(name, node+"-")
	if !ok || len(suffix) != 8 {
		return false
	}
	_, err := hex.DecodeString(suffix)
	return err == nil
}

// PeerAnswer is one peer's answer to the question, or why there is none
// that counts.
type PeerAnswer struct {
	Addr netip.AddrPort
	// Answer is the verified answer; nil when Err says why none counts.
	Answer *config.MembershipAnswer
	Err    error
}

// MembershipOutcome decides from the peers' answers whether this node
// holds: only on a verified "removed". A verified "removed" wins over a
// verified "member" given at the same time (the cluster changed during
// the question): a wrong hold costs a technician's visit, a wrong start a
// second cluster. evidence says, for the log and the hold, who said what.
func MembershipOutcome(answers []PeerAnswer) (removed bool, evidence string) {
	var said []string
	for _, a := range answers {
		switch {
		case a.Answer == nil:
			continue
		case a.Answer.Verdict == config.VerdictRemoved:
			return true, fmt.Sprintf("%s (%s) answered, proven with the servers' membership key: %s", peerWords(a.Answer.Answerer), a.Addr.Addr(), peerWords(a.Answer.Evidence))
		default:
			said = append(said, fmt.Sprintf("%s: %s (%s)", peerWords(a.Answer.Answerer), a.Answer.Verdict, peerWords(a.Answer.Evidence)))
		}
	}
	if len(said) == 0 {
		return false, "no peer gave a proven answer"
	}
	return false, strings.Join(said, "; ")
}

// peerWords is a peer's words as the hold, the state and the log carry
// them: signed, but a peer's all the same, so no control characters and
// no more than a few lines' worth.
func peerWords(s string) string {
	const most = 300
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if r := []rune(s); len(r) > most {
		s = string(r[:most]) + "…"
	}
	return s
}

// MembershipQuery asks peers whether Node (device UUID) is still a member.
type MembershipQuery struct {
	// Key checks the answers: the servers' membership key, which only a
	// server holds; without one no answer counts.
	Key  config.MembershipKey
	Node string
	UUID string
	// Dial opens connections (tests dial from a network namespace).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Timeout bounds the whole question (DefaultMembershipTimeout).
	Timeout time.Duration
}

// Ask asks every address at once and returns the answers in by the
// timeout, stopping early only at a verified "removed" (or when every
// address has answered). A verified "member" does not end the question:
// removal wins over it (MembershipOutcome), and a peer proving a removal
// reads more (the record, etcd) than one seeing the Node, so it answers
// later. Waiting out the bound after a "member" costs nothing extra in
// practice: among a network's addresses some have nobody behind them, and
// they already cost the whole bound, once, at power-on.
// Unverified answers are returned with the reason they do not count.
func (q MembershipQuery) Ask(ctx context.Context, addrs []netip.AddrPort) []PeerAnswer {
	timeout := q.Timeout
	if timeout == 0 {
		timeout = DefaultMembershipTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dial := q.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	client := &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	var (
		mu  sync.Mutex
		out []PeerAnswer
		wg  sync.WaitGroup
	)
	for _, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := q.askOne(ctx, client, addr)
			mu.Lock()
			out = append(out, a)
			mu.Unlock()
			if a.Answer != nil && a.Answer.Verdict == config.VerdictRemoved {
				cancel()
			}
		}()
	}
	wg.Wait()
	return out
}

func (q MembershipQuery) askOne(ctx context.Context, client *http.Client, addr netip.AddrPort) PeerAnswer {
	fail := func(err error) PeerAnswer { return PeerAnswer{Addr: addr, Err: err} }
	nonce, err := config.NewLifeNonce()
	if err != nil {
		return fail(err)
	}
	query := url.Values{"node": {q.Node}, "uuid": {q.UUID}, "nonce": {hex.EncodeToString(nonce)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr.String()+config.MembershipPath+"?"+query.Encode(), nil)
	if err != nil {
		return fail(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fail(localapi.URLErrorCause(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(fmt.Errorf("answered %s", resp.Status))
	}
	var answer config.MembershipAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<10)).Decode(&answer); err != nil {
		return fail(fmt.Errorf("unreadable answer: %w", err))
	}
	if err := q.Key.VerifyMembership(q.Node, q.UUID, nonce, answer); err != nil {
		return fail(fmt.Errorf("answer not counted: %w", err))
	}
	return PeerAnswer{Addr: addr, Answer: &answer}
}

// MembershipJudge reads, now, what a peer needs to judge node's membership.
type MembershipJudge func(ctx context.Context, node, uuid string) (config.Verdict, string)

// MembershipHandler answers GET config.MembershipPath with answerer's
// verdict, signed with the membership key keys reads (LoadMembershipKey).
// A node without one (a worker: no server CA key) signs nothing and says
// so. A few questions at a time: each costs reads of the cluster, and
// anyone on the LAN can ask; the rest are told to come back.
func MembershipHandler(keys func() (config.MembershipKey, error), answerer string, judge MembershipJudge) http.Handler {
	slots := make(chan struct{}, 4)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nonce, ok := config.NonceOf(w, r)
		if !ok {
			return
		}
		key, err := keys()
		if err != nil || !key.Valid() {
			// Only a server's word counts; the reason, not the key, goes out.
			http.Error(w, "this agent cannot sign membership answers: only servers can (it holds no server CA key)", http.StatusServiceUnavailable)
			return
		}
		node, uuid := r.URL.Query().Get("node"), r.URL.Query().Get("uuid")
		if node == "" {
			http.Error(w, "want the node asked about", http.StatusBadRequest)
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), membershipReadBudget)
		defer cancel()
		verdict, evidence := judge(ctx, node, uuid)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(key.SignMembership(answerer, node, uuid, verdict, evidence, nonce))
	})
}

// MembershipAddresses are the peers a server asks: its cluster network's
// hosts (ProbeAddresses: every address of a prefix up to a /24), on the
// status port.
func MembershipAddresses(v *config.Validated) []netip.AddrPort {
	var out []netip.AddrPort
	for _, a := range formation.ProbeAddresses(v) {
		out = append(out, netip.AddrPortFrom(a, config.StatusPort))
	}
	return out
}
