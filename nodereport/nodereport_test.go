package nodereport

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/nodecred"
	"github.com/sitecon/sitecon/agent/statusserver"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/test/testcert"
)

const cluster = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"

func lifeKey(t *testing.T, token string) config.LifeKey {
	t.Helper()
	k, err := config.NewLifeKey(cluster, config.Secret(token))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// agentAt serves node's report with key, through wrap (nil: as it is).
func agentAt(t *testing.T, key config.LifeKey, node string, clock time.Duration, wrap func(http.Handler) http.Handler) netip.AddrPort {
	t.Helper()
	rs := statusserver.NodeReportHandler(key, node, func() nodestate.NodeReport {
		return nodestate.NodeReport{Phase: "joined", K3s: nodestate.K3sReport{Supervised: true, Running: true}}
	})
	rs.Now = func() time.Time { return time.Now().Add(clock) }
	h := statusserver.WithNodeReport(http.NotFoundHandler(), rs)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
}

// tamper changes the report on its way back, as a box between the reader
// and the node could.
func tamper(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(bytes.Replace(rec.Body.Bytes(), []byte(`"joined"`), []byte(`"error!"`), 1))
	})
}

// Every node is asked at once and each answer stands on its own: a node
// that answers with this cluster's key is shown with its report and
// clock skew; one that refuses the connection, one that never answers, one
// of another cluster, one whose answer was changed on the way and one
// whose clock is far off each say why, and none hides the others or holds
// the round past the deadline.
func TestAskEveryNodeEachOnItsOwn(t *testing.T) {
	key := lifeKey(t, "s3cret-password")
	good := agentAt(t, key, "node-a", 3*time.Second, nil)
	stranger := agentAt(t, lifeKey(t, "another-password"), "node-x", 0, nil)
	changed := agentAt(t, key, "node-c", 0, tamper)
	skewed := agentAt(t, key, "node-d", 10*time.Minute, nil)
	// A host that takes the connection and never answers.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hang.Close() })
	silent := netip.MustParseAddrPort(hang.Addr().String())
	// An address where nothing listens.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	refused := netip.MustParseAddrPort(l.Addr().String())
	l.Close()

	start := time.Now()
	got := Reader{Key: key, Deadline: 500 * time.Millisecond}.Ask(context.Background(), []Target{
		{Address: good, Node: "node-a"}, {Address: refused, Node: "node-b"}, {Address: stranger},
		{Address: changed, Node: "node-c"}, {Address: skewed, Node: "node-d"}, {Address: silent, Node: "node-e"},
		// A scanned address where nothing listens is no node: not listed.
		{Address: refused, Scan: true}, {Address: netip.MustParseAddrPort("127.0.0.1:1"), Scan: true},
	})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the round took %s, each node's deadline 500ms", took)
	}
	byAddr := map[netip.AddrPort]nodestate.NodeAnswer{}
	for _, a := range got.Answers {
		byAddr[netip.MustParseAddrPort(a.Address)] = a
	}
	if len(got.Answers) != 6 {
		t.Errorf("%d answers, want 6 (the scanned address with nobody there left out): %+v", len(got.Answers), got.Answers)
	}
	a := byAddr[good]
	if !a.Answered || a.Report == nil || a.Report.Phase != "joined" || a.Report.Node != "node-a" {
		t.Errorf("node-a: %+v", a)
	} else if a.ClockSkew < 2*time.Second || a.ClockSkew > 4*time.Second {
		t.Errorf("node-a's clock skew %s, want about 3s", a.ClockSkew)
	}
	for addr, want := range map[netip.AddrPort]string{
		refused:  "did not answer: connection refused",
		silent:   "did not answer within 500ms",
		stranger: "answered, but not with this cluster's key",
		changed:  "answered, but not with this cluster's key",
		skewed:   "refused: the clocks differ: this node's clock is 10m0s ahead of the reader's",
	} {
		a := byAddr[addr]
		if a.Answered || a.Report != nil || !strings.Contains(a.Problem, want) {
			t.Errorf("%s (%s): answered %v, %q; want %q", a.Name(), addr, a.Answered, a.Problem, want)
		}
	}
	if names := []string{got.Answers[0].Name(), got.Answers[1].Name()}; names[0] != "node-a" || names[1] != "node-b" {
		t.Errorf("answers ordered %v, want by node name", names)
	}
}

// A node no target named is found through the others' reports: the
// nodes an agent last saw in its cluster are asked too, and one that does
// not answer is listed by name even where only a scan asked.
func TestAskFindsTheNodesTheOthersSaw(t *testing.T) {
	key := lifeKey(t, "s3cret-password")
	rs := statusserver.NodeReportHandler(key, "node-a", func() nodestate.NodeReport {
		return nodestate.NodeReport{Phase: "joined", Peers: []nodestate.NodePeer{{Name: "node-a"}, {Name: "node-y", Address: "127.100.250.7"}, {Name: "node-z", Address: "127.100.250.8"}}}
	})
	srv := httptest.NewServer(statusserver.WithNodeReport(http.NotFoundHandler(), rs))
	defer srv.Close()
	good := netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
	scanned := netip.AddrPortFrom(netip.MustParseAddr("127.100.250.7"), config.StatusPort)
	got := Reader{Key: key, Deadline: 500 * time.Millisecond}.Ask(context.Background(), []Target{{Address: good}, {Address: scanned, Scan: true}})
	var names []string
	for _, a := range got.Answers {
		names = append(names, a.Name())
		if a.Name() != "node-a" && (a.Answered || !strings.Contains(a.Problem, "did not answer")) {
			t.Errorf("%s: %+v", a.Name(), a)
		}
	}
	if strings.Join(names, " ") != "node-a node-y node-z" {
		t.Errorf("answers %v, want node-a and the two nodes it saw", names)
	}
}

// Without a key nothing is asked, and the round says why.
func TestAskWithoutKey(t *testing.T) {
	got := Ask(context.Background(), config.LifeKey{}, []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}, 0)
	if len(got.Answers) != 0 || !strings.Contains(got.Problem, "no cluster key") {
		t.Errorf("%+v", got)
	}
}

// Every node holds the token, so its MAC alone lets a worker answer at
// another node's address with a report in that node's name (gap 4 of
// docs/SECURITY.md). Where the reader holds the cluster's client CA (on
// a device), a report counts only when signed with its node's own
// credential; an agent that does not sign (one whose node has no
// credential yet, or an older one) is said, not taken.
func TestAskTakesAReportOnlyFromTheNodeItself(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewClientCA(t, dir)
	word := func(node string) config.NodeWord {
		return nodecred.New(ca.NodeKubeconfig(t, node), ca.Path)
	}
	key := lifeKey(t, "s3cret-password")
	own := agentAt(t, key.WithNodeWord(word("node-b")), "node-b", 0, nil)
	forged := agentAt(t, key.WithNodeWord(word("node-d")), "node-b", 0, nil)
	// node-d signing a report in node-b's name with its own credential.
	ownSigned := agentAt(t, key.WithNodeWord(testcert.SignsAs{NodeWord: word("node-d"), As: "node-d"}), "node-b", 0, nil)
	unsigned := agentAt(t, key, "node-c", 0, nil)
	targets := []Target{{Address: own, Node: "node-b"}, {Address: forged, Node: "node-b"}, {Address: ownSigned, Node: "node-b"}, {Address: unsigned, Node: "node-c"}}
	answers := func(r Reader) map[netip.AddrPort]nodestate.NodeAnswer {
		out := map[netip.AddrPort]nodestate.NodeAnswer{}
		for _, a := range r.Ask(context.Background(), targets).Answers {
			out[netip.MustParseAddrPort(a.Address)] = a
		}
		return out
	}
	// The token's MAC alone: the forged report passes.
	if a := answers(Reader{Key: key})[forged]; !a.Answered {
		t.Fatalf("with the token alone a worker's report in node-b's name is refused (%q): the test shows no gap", a.Problem)
	}
	got := answers(Reader{Key: key.WithNodeWord(nodecred.New("", ca.Path))})
	if a := got[own]; !a.Answered || a.Report == nil || a.Report.Node != "node-b" {
		t.Errorf("node-b's own report: %+v", a)
	}
	for addr, want := range map[netip.AddrPort]string{
		forged:    "not signed with node node-b's own credential",
		ownSigned: "not node node-b's own identity",
		unsigned:  "not signed with node node-c's own credential",
	} {
		if a := got[addr]; a.Answered || a.Report != nil || !strings.Contains(a.Problem, "not as the node itself") || !strings.Contains(a.Problem, want) {
			t.Errorf("%s: answered %v, %q; want refused with %q", addr, a.Answered, a.Problem, want)
		}
		// Kept aside for what it says of its credential, never as a report.
		if a := got[addr]; a.NotOwn == nil {
			t.Errorf("%s: the unsigned report not kept aside for the doctor", addr)
		}
	}
}
