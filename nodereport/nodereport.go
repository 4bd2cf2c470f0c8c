// Package nodereport reads every node's own report from its agent, on the
// cluster network, when the cluster API does not answer: the console and
// `sitecon status` show what each node says of itself (its phase, k3s, its
// etcd member's view, its clock), and which nodes did not answer and why.
// Every node is asked at once, each within its own deadline: a node that
// does not answer never hides the others. Requests and answers are signed
// with the cluster's key (config.LifeKey; the token never travels), so a
// report shown is the node's own and only a holder of the token can read
// one. The agent's side is agent/statusserver/nodereport.go.
package nodereport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/kube/nodestate"
)

// DefaultDeadline bounds each node's answer: an agent on the LAN answers
// in milliseconds from what it already knows.
const DefaultDeadline = 2 * time.Second

// maxReport bounds a report's body.
const maxReport = 256 << 10

// Target is one address to ask.
type Target struct {
	Address netip.AddrPort
	// Node is the node expected there ("" when not known).
	Node string
	// Scan: an address asked only in case a node is there (a host of the
	// cluster prefix); it is listed only when something answered there.
	Scan bool
}

// Reader asks agents for their reports.
type Reader struct {
	Key config.LifeKey
	// Deadline bounds each node's answer (zero: DefaultDeadline).
	Deadline time.Duration
	// Dial opens connections (nil: a plain dialer); Now is the reader's
	// clock (nil: time.Now).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	Now  func() time.Time
}

// Ask asks the agents at addrs with key, each within deadline (zero:
// DefaultDeadline): the reading of a caller that has addresses and a key.
func Ask(ctx context.Context, key config.LifeKey, addrs []netip.AddrPort, deadline time.Duration) nodestate.NodeReports {
	targets := make([]Target, len(addrs))
	for i, a := range addrs {
		targets[i] = Target{Address: a}
	}
	return Reader{Key: key, Deadline: deadline}.Ask(ctx, targets)
}

// Ask asks every target at once and returns an answer per target (a scan
// target only when something answered there or an answering agent names
// it), then the nodes the answering agents last saw that were not asked
// yet (each agent's report lists its peers), ordered by node name and
// address, named nodes first. Targets at the same address are asked once.
func (r Reader) Ask(ctx context.Context, targets []Target) nodestate.NodeReports {
	now := r.Now
	if now == nil {
		now = time.Now
	}
	out := nodestate.NodeReports{At: now()}
	if !r.Key.Valid() {
		out.Problem = "no cluster key to ask the nodes with (the cluster config's token)"
		return out
	}
	deadline := r.Deadline
	if deadline <= 0 {
		deadline = DefaultDeadline
	}
	dial := r.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	// No proxy: a proxy's answer is not the node's. A fresh connection
	// per node, closed after.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: dial, DisableKeepAlives: true}}
	defer client.CloseIdleConnections()
	got := map[netip.AddrPort]*asked{}
	r.round(ctx, client, targets, deadline, now, got)
	// The nodes the answering agents last saw in their cluster: one not
	// asked yet is asked now, and one that was asked only by a scan is
	// listed by name, answered or not.
	var more []Target
	for _, a := range got {
		if a.answer.Report == nil {
			continue
		}
		for _, p := range a.answer.Report.Peers {
			ip, err := netip.ParseAddr(p.Address)
			if err != nil {
				continue
			}
			addr := netip.AddrPortFrom(ip.Unmap(), config.StatusPort)
			if known, ok := got[addr]; ok {
				known.scan = false
				if known.answer.Node == "" {
					known.answer.Node = p.Name
				}
				continue
			}
			more = append(more, Target{Address: addr, Node: p.Name})
		}
	}
	r.round(ctx, client, more, deadline, now, got)
	for _, a := range got {
		if !(a.silent && a.scan) {
			out.Answers = append(out.Answers, a.answer)
		}
	}
	// Named nodes first, by name; then what answered at an address alone.
	named := func(a nodestate.NodeAnswer) int {
		if a.Node != "" || a.Report != nil {
			return 0
		}
		return 1
	}
	slices.SortFunc(out.Answers, func(a, b nodestate.NodeAnswer) int {
		if c := named(a) - named(b); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name(), b.Name()); c != 0 {
			return c
		}
		return strings.Compare(a.Address, b.Address)
	})
	return out
}

// asked is one address's outcome in a round.
type asked struct {
	answer nodestate.NodeAnswer
	// silent: nothing answered; scan: asked only in case a node is there.
	silent, scan bool
}

// round asks every target not in got at once, each within deadline, and
// records the outcomes in got.
func (r Reader) round(ctx context.Context, client *http.Client, targets []Target, deadline time.Duration, now func() time.Time, got map[netip.AddrPort]*asked) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, t := range targets {
		t.Address = netip.AddrPortFrom(t.Address.Addr().Unmap(), t.Address.Port())
		if _, seen := got[t.Address]; seen || !t.Address.IsValid() {
			continue
		}
		a := &asked{scan: t.Scan}
		got[t.Address] = a
		wg.Add(1)
		go func() {
			defer wg.Done()
			answer, silent := r.askOne(ctx, client, t, deadline, now)
			mu.Lock()
			a.answer, a.silent = answer, silent
			mu.Unlock()
		}()
	}
	wg.Wait()
}

// askOne asks one agent; silent says nothing answered at all (no
// connection), which hides a scanned address.
func (r Reader) askOne(ctx context.Context, client *http.Client, t Target, deadline time.Duration, now func() time.Time) (answer nodestate.NodeAnswer, silent bool) {
	answer = nodestate.NodeAnswer{Address: t.Address.String(), Node: t.Node}
	fail := func(format string, args ...any) (nodestate.NodeAnswer, bool) {
		answer.Problem = fmt.Sprintf(format, args...)
		return answer, false
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	asked := now()
	req, err := r.Key.NewReportRequest(t.Address, asked)
	if err != nil {
		return fail("%v", err)
	}
	url := "http://" + t.Address.String() + config.NodeReportPath + "?" + req.Query().Encode()
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fail("%v", err)
	}
	resp, err := client.Do(httpReq)
	if err != nil {
		answer.Problem = noAnswer(err, deadline)
		return answer, true
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReport+1))
	switch {
	case err != nil:
		return fail("did not answer whole: %v", localapi.URLErrorCause(err))
	case len(body) > maxReport:
		return fail("answered more than %d KiB: not a report", maxReport>>10)
	}
	answered := now()
	words := strings.TrimSpace(string(body))
	if len(words) > 200 {
		words = words[:200] + "…"
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		return fail("answered, but not with this cluster's key: it refused our request (%s)", words)
	case http.StatusForbidden:
		return fail("refused: %s", words)
	case http.StatusNotFound:
		return fail("answered, but serves no report (%s): an older agent, or not a sitecon agent", resp.Status)
	default:
		return fail("answered %s: %s", resp.Status, words)
	}
	var report nodestate.NodeReport
	if err := json.Unmarshal(body, &report); err != nil {
		return fail("answered, but not a report: %v", err)
	}
	if err := r.Key.VerifyReport(report.Node, req.Nonce, body, resp.Header.Get(config.NodeReportProofHeader)); err != nil {
		return fail("answered, but not with this cluster's key: %v", err)
	}
	if err := r.Key.VerifyReportAsNode(report.Node, req.Nonce, body, resp.Header.Get(config.NodeReportCertHeader), resp.Header.Get(config.NodeReportSigHeader)); err != nil {
		// Made with the cluster's key, so by some node of the cluster:
		// kept aside for what it says of its own credential, never as
		// the node's word.
		answer, silent := fail("answered, but not as the node itself: %v", err)
		answer.NotOwn = &report
		return answer, silent
	}
	answer.Answered, answer.Report = true, &report
	// The node's clock against the middle of the exchange.
	mid := asked.Add(answered.Sub(asked) / 2)
	answer.ClockSkew = report.Clock.Sub(mid)
	return answer, false
}

// noAnswer says why an address gave no answer.
func noAnswer(err error, deadline time.Duration) string {
	cause := localapi.URLErrorCause(err)
	var netErr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "did not answer: connection refused (the host is up; no agent listens there)"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return fmt.Sprintf("did not answer: %v", cause)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Sprintf("did not answer within %s", deadline)
	}
	return fmt.Sprintf("did not answer: %v", cause)
}
