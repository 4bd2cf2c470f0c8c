package statusserver

import (
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube/nodestate"
)

// This node's own report (config.NodeReportPath), for the console and
// `sitecon status` when the cluster API does not answer: the agent's
// phase, its k3s, its etcd member's view, its clock. Only a request signed
// with the cluster's key, dated within config.NodeReportWindow of this
// node's clock, made for this address and not seen before is answered,
// and the answer is signed for the reader's nonce (config/nodereport.go).

// reportNoncesMax bounds the nonces remembered against replay. Each is
// kept only while its request's time is inside the window; past the bound
// new requests are refused until old ones expire (a replay must never pass
// because its nonce was forgotten). A console asks every few seconds.
const reportNoncesMax = 4096

// ReportServer answers GET config.NodeReportPath with Report's report.
type ReportServer struct {
	Key  config.LifeKey
	Node string
	// Report is what the agent knows now; it must not block (a background
	// value for anything slow, such as etcd's member list).
	Report func() nodestate.NodeReport
	// Now is this node's clock (nil: time.Now); Window the clocks' allowed
	// difference (zero: config.NodeReportWindow).
	Now    func() time.Time
	Window time.Duration
	// Started is when this agent began answering, on Now's clock: a
	// request dated before it is refused. The nonces answered are kept in
	// memory only, and an agent restarted cannot tell whether the one
	// before it answered such a request (a recorded request replayed
	// after a restart). Zero: no such bound (tests).
	Started time.Time

	mu sync.Mutex
	// seen maps a nonce (hex) to when it may be forgotten: its request's
	// time plus the window, after which the request is refused as stale.
	seen map[string]time.Time
}

// NodeReportHandler is a ReportServer for node with the cluster key key.
func NodeReportHandler(key config.LifeKey, node string, report func() nodestate.NodeReport) *ReportServer {
	return &ReportServer{Key: key, Node: node, Report: report, Started: time.Now()}
}

// WithNodeReport serves report at config.NodeReportPath beside next's routes.
func WithNodeReport(next http.Handler, report *ReportServer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(config.NodeReportPath, report)
	mux.Handle("/", next)
	return mux
}

func (s *ReportServer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *ReportServer) window() time.Duration {
	if s.Window > 0 {
		return s.Window
	}
	return config.NodeReportWindow
}

// ServeHTTP answers a signed request with the signed report; anything
// else is refused with why: 405 not a GET, 400 a malformed request, 401 a
// MAC that does not verify with this node's key (the words say "not with
// this cluster's key"), 403 a time outside the window (the words say by
// how much the clocks differ), 409 a nonce already answered or a request
// made before this agent started, 503 no key
// here or too many requests in the window.
func (s *ReportServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch {
	case !s.Key.Valid():
		http.Error(w, "this agent has no cluster token to answer with", http.StatusServiceUnavailable)
		return
	case s.Report == nil:
		http.Error(w, "this agent serves no report", http.StatusServiceUnavailable)
		return
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	req, err := config.ParseReportRequest(addrPortOf(local), r.URL.Query())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := s.Key.CheckReportRequest(req); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	now := s.now()
	if err := config.ClockDifference(req.At, now, s.window()); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	if req.At.Before(s.Started) {
		http.Error(w, "this request was made before this agent started ("+s.Started.UTC().Format(time.RFC3339)+
			"): it cannot tell whether the agent before it answered it, so it is not answered; ask again", http.StatusConflict)
		return
	}
	if status, why := s.remember(req.Nonce, req.At.Add(s.window()), now); status != 0 {
		http.Error(w, why, status)
		return
	}
	report := s.Report()
	report.Node, report.Clock = s.Node, s.now()
	body, err := json.Marshal(report)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(config.NodeReportProofHeader, s.Key.SignReport(s.Node, req.Nonce, body))
	if cert, sig, ok := s.Key.SignReportAsNode(s.Node, req.Nonce, body); ok {
		w.Header().Set(config.NodeReportCertHeader, cert)
		w.Header().Set(config.NodeReportSigHeader, sig)
	}
	_, _ = w.Write(body)
}

// remember records nonce until forget; a nonce already there (a replay)
// or no room left is refused with its status and why.
func (s *ReportServer) remember(nonce []byte, forget, now time.Time) (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]time.Time{}
	}
	key := hex.EncodeToString(nonce)
	if _, ok := s.seen[key]; ok {
		return http.StatusConflict, "this request was answered before: a replay is not answered again"
	}
	if len(s.seen) >= reportNoncesMax {
		for k, at := range s.seen {
			if now.After(at) {
				delete(s.seen, k)
			}
		}
		if len(s.seen) >= reportNoncesMax {
			return http.StatusServiceUnavailable, "too many report requests within the last few minutes; ask again later"
		}
	}
	s.seen[key] = forget
	return 0, ""
}

// addrPortOf is a listener's address as the request MAC names it.
func addrPortOf(a net.Addr) netip.AddrPort {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.AddrPort()
	}
	if a == nil {
		return netip.AddrPort{}
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}
