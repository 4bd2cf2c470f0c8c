package statusserver

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube/nodestate"
)

const reportCluster = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"

// reportSite is an agent's report server on a real listener, its clock
// under the test's hand.
type reportSite struct {
	key    config.LifeKey
	srv    *httptest.Server
	target netip.AddrPort
	now    time.Time
	rs     *ReportServer
}

func newReportSite(t *testing.T) *reportSite {
	t.Helper()
	key, err := config.NewLifeKey(reportCluster, "s3cret-password")
	if err != nil {
		t.Fatal(err)
	}
	s := &reportSite{key: key, now: time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)}
	rs := NodeReportHandler(key, "node-b", func() nodestate.NodeReport {
		return nodestate.NodeReport{Phase: "joined", LastError: "etcd: no leader", K3s: nodestate.K3sReport{Supervised: true, Running: true, Starts: 2}}
	})
	rs.Now = func() time.Time { return s.now }
	rs.Started = s.now.Add(-time.Hour)
	s.rs = rs
	s.srv = httptest.NewServer(WithNodeReport(http.NotFoundHandler(), rs))
	t.Cleanup(s.srv.Close)
	s.target = netip.MustParseAddrPort(strings.TrimPrefix(s.srv.URL, "http://"))
	return s
}

// get sends q to the report path and returns the status, body and proof.
func (s *reportSite) get(t *testing.T, q url.Values) (int, []byte, string) {
	t.Helper()
	resp, err := http.Get(s.srv.URL + config.NodeReportPath + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body, resp.Header.Get(config.NodeReportProofHeader)
}

// Only a fresh request signed with the cluster's key, for this address,
// within the window of this node's clock, is answered, once; the answer
// verifies for the reader's nonce and carries the node's clock. Each
// refusal fails here if its check is taken out.
func TestNodeReportServerRefusesWhatIsNotTheClusters(t *testing.T) {
	s := newReportSite(t)
	req, err := s.key.NewReportRequest(s.target, s.now.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	status, body, proof := s.get(t, req.Query())
	if status != http.StatusOK {
		t.Fatalf("the cluster's own request: %d %s", status, body)
	}
	if err := s.key.VerifyReport("node-b", req.Nonce, body, proof); err != nil {
		t.Fatalf("the answer does not verify: %v", err)
	}
	var report nodestate.NodeReport
	if err := json.Unmarshal(body, &report); err != nil {
		t.Fatal(err)
	}
	if report.Node != "node-b" || report.Phase != "joined" || !report.Clock.Equal(s.now) {
		t.Errorf("report %+v, want node-b, joined, its clock %s", report, s.now)
	}

	other, _ := config.NewLifeKey(reportCluster, "another-password")
	wrongKey, _ := other.NewReportRequest(s.target, s.now)
	elsewhere, _ := s.key.NewReportRequest(netip.MustParseAddrPort("127.100.9.9:12346"), s.now)
	stale, _ := s.key.NewReportRequest(s.target, s.now.Add(-7*time.Minute-12*time.Second))
	ahead, _ := s.key.NewReportRequest(s.target, s.now.Add(time.Hour))
	tampered, _ := s.key.NewReportRequest(s.target, s.now)
	tq := tampered.Query()
	tq.Set("at", "1") // an old request's time made new
	for _, c := range []struct {
		name   string
		q      url.Values
		status int
		words  string
	}{
		{"another cluster's key", wrongKey.Query(), http.StatusUnauthorized, "not signed with this cluster's key"},
		{"made for another address", elsewhere.Query(), http.StatusUnauthorized, "not signed with this cluster's key"},
		{"its time changed", tq, http.StatusUnauthorized, "not signed"},
		{"a replayed request", req.Query(), http.StatusConflict, "replay"},
		{"a stale time", stale.Query(), http.StatusForbidden, "the clocks differ: this node's clock is 7m12s ahead of the reader's"},
		{"a time from the future", ahead.Query(), http.StatusForbidden, "1h0m0s behind"},
		{"no MAC", url.Values{"nonce": req.Query()["nonce"], "at": req.Query()["at"]}, http.StatusBadRequest, "mac"},
	} {
		status, body, proof := s.get(t, c.q)
		if status != c.status || !strings.Contains(string(body), c.words) {
			t.Errorf("%s: %d %q, want %d with %q", c.name, status, body, c.status, c.words)
		}
		if proof != "" || strings.Contains(string(body), "joined") {
			t.Errorf("%s: refused, but the report went out: %q", c.name, body)
		}
	}
}

// The nonces remembered against replay are bounded: past the bound a new
// request is refused (never a replay let through), and expired nonces
// make room again.
func TestNodeReportNonceMemoryIsBounded(t *testing.T) {
	s := &ReportServer{}
	now := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	for i := range reportNoncesMax {
		if status, why := s.remember([]byte{byte(i), byte(i >> 8), 1}, now.Add(time.Minute), now); status != 0 {
			t.Fatalf("nonce %d: %d %s", i, status, why)
		}
	}
	if status, _ := s.remember([]byte("one more"), now.Add(time.Minute), now); status != http.StatusServiceUnavailable {
		t.Errorf("past the bound: %d, want 503", status)
	}
	if status, _ := s.remember([]byte{0, 0, 1}, now.Add(2*time.Minute), now.Add(2*time.Minute)); status != http.StatusConflict {
		t.Errorf("a remembered nonce again: %d, want 409", status)
	}
	later := now.Add(2 * time.Minute)
	if status, why := s.remember([]byte("one more"), later.Add(time.Minute), later); status != 0 {
		t.Errorf("after the old nonces expired: %d %s", status, why)
	}
	if len(s.seen) > reportNoncesMax {
		t.Errorf("%d nonces remembered, bound %d", len(s.seen), reportNoncesMax)
	}
}

// A request answered before the agent restarted, replayed after: the new
// agent remembers no nonce, and refuses every request made before it
// started; a request made since is answered.
func TestNodeReportReplayAfterARestartIsRefused(t *testing.T) {
	s := newReportSite(t)
	req, err := s.key.NewReportRequest(s.target, s.now.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if status, body, _ := s.get(t, req.Query()); status != http.StatusOK {
		t.Fatalf("the request before the restart: %d %s", status, body)
	}
	// The agent restarts: a new server, its nonces forgotten.
	s.rs.mu.Lock()
	s.rs.seen = nil
	s.rs.mu.Unlock()
	s.rs.Started = s.now
	status, body, proof := s.get(t, req.Query())
	if status != http.StatusConflict || !strings.Contains(string(body), "before this agent started") || proof != "" {
		t.Errorf("the request replayed after the restart: %d %q, want 409 saying it was made before the agent started", status, body)
	}
	fresh, _ := s.key.NewReportRequest(s.target, s.now.Add(time.Second))
	if status, body, _ := s.get(t, fresh.Query()); status != http.StatusOK {
		t.Errorf("a request made after the restart: %d %s", status, body)
	}
}
