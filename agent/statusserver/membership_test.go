package statusserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/kube"
)

const (
	testClusterID = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	testUUID      = "6fbd5e32-4143-4425-a2e0-9b7ce947e609"
)

func TestJudgeMembership(t *testing.T) {
	node := func(uuid string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-q", Labels: map[string]string{}}}
		if uuid != "" {
			n.Labels[kube.LabelNodeUUID] = uuid
		}
		return n
	}
	record := func(id, nodes string) *corev1.ConfigMap {
		return &corev1.ConfigMap{Data: map[string]string{kube.ClusterKeyID: id, kube.ClusterKeyNodes: nodes}}
	}
	noEtcd := errors.New("no etcd client certificate")
	for _, c := range []struct {
		name string
		uuid string
		in   MembershipEvidence
		want config.Verdict
		why  string
	}{
		{"not synced: no quorum after a power cut", testUUID, MembershipEvidence{}, config.VerdictUnknown, "not synced"},
		{"the Node cannot be read now", testUUID, MembershipEvidence{Synced: true, NodeErr: errors.New("etcdserver: request timed out")}, config.VerdictUnknown, "cannot read Node"},
		{"its Node is there", testUUID, MembershipEvidence{Synced: true, Node: node(strings.ToUpper(testUUID))}, config.VerdictMember, "in the cluster"},
		{"its Node is there, no UUID label", testUUID, MembershipEvidence{Synced: true, Node: node("")}, config.VerdictMember, "in the cluster"},
		{"asked without a UUID", "", MembershipEvidence{Synced: true, Node: node("0b5e0000-0000-4000-8000-00000000a11e")}, config.VerdictMember, "in the cluster"},
		{"another device took its name", testUUID, MembershipEvidence{Synced: true, Node: node("0b5e0000-0000-4000-8000-00000000a11e")}, config.VerdictRemoved, "another device took its name"},
		{"gone, record unreadable", testUUID, MembershipEvidence{Synced: true, RecordErr: errors.New("timeout")}, config.VerdictUnknown, "cannot be read"},
		{"gone, no record", testUUID, MembershipEvidence{Synced: true, EtcdErr: noEtcd}, config.VerdictUnknown, "no cluster record"},
		{"gone, another cluster's record", testUUID, MembershipEvidence{Synced: true, Record: record("00000000-0000-4000-8000-000000000000", "node-r"), EtcdErr: noEtcd}, config.VerdictUnknown, "of cluster"},
		{"gone, still listed: deleted by hand", testUUID, MembershipEvidence{Synced: true, Record: record(testClusterID, "node-q, node-r"), EtcdErr: noEtcd}, config.VerdictUnknown, "still lists it"},
		{"gone, unlisted, etcd still has its member", testUUID, MembershipEvidence{Synced: true, Record: record(strings.ToUpper(testClusterID), "node-r,node-s"),
			EtcdMembers: []string{"node-r-0a1b2c3d", "node-q-1a2b3c4d"}}, config.VerdictUnknown, "etcd still lists its member node-q-1a2b3c4d"},
		{"removed, etcd agrees", testUUID, MembershipEvidence{Synced: true, Record: record(testClusterID, "node-r,node-s"),
			EtcdMembers: []string{"node-r-0a1b2c3d", "node-q2-1a2b3c4d", "node-q-extra"}}, config.VerdictRemoved, "etcd has no member of it"},
		{"removed, etcd not readable", testUUID, MembershipEvidence{Synced: true, Record: record(testClusterID, "node-r,node-s"), EtcdErr: noEtcd}, config.VerdictRemoved, "no longer lists it"},
		{"removed, the last node", testUUID, MembershipEvidence{Synced: true, Record: record(testClusterID, ""), EtcdErr: noEtcd}, config.VerdictRemoved, "no longer lists it"},
	} {
		got, why := JudgeMembership(testClusterID, "node-q", c.uuid, c.in)
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%s: %s (%s), want %s (%q)", c.name, got, why, c.want, c.why)
		}
	}
}

func TestEtcdMemberOf(t *testing.T) {
	for name, want := range map[string]bool{"node-q": true, "node-q-1a2b3c4d": true, "node-q-1a2b3c4": false,
		"node-q-zzzzzzzz": false, "node-q2-1a2b3c4d": false, "node-qq": false, "": false} {
		if got := etcdMemberOf(name, "node-q"); got != want {
			t.Errorf("etcdMemberOf(%q, node-q) = %v, want %v", name, got, want)
		}
	}
}

func TestMembershipOutcome(t *testing.T) {
	addr := netip.MustParseAddrPort("10.244.244.2:12346")
	answer := func(verdict config.Verdict) *config.MembershipAnswer {
		return &config.MembershipAnswer{Answerer: "node-r", Verdict: verdict, Evidence: "what it read"}
	}
	for _, c := range []struct {
		name    string
		answers []PeerAnswer
		removed bool
	}{
		{"nobody answered (a whole-site power cut)", []PeerAnswer{{Addr: addr, Err: errors.New("connection refused")}}, false},
		{"no peer at all", nil, false},
		{"every peer unknown", []PeerAnswer{{Addr: addr, Answer: answer(config.VerdictUnknown)}, {Addr: addr, Answer: answer(config.VerdictUnknown)}}, false},
		{"a member", []PeerAnswer{{Addr: addr, Answer: answer(config.VerdictMember)}}, false},
		{"unproven words count for nothing", []PeerAnswer{{Addr: addr, Err: errors.New("answer not counted: its proof does not verify")}}, false},
		{"a proven removal", []PeerAnswer{{Addr: addr, Answer: answer(config.VerdictUnknown)}, {Addr: addr, Answer: answer(config.VerdictRemoved)}}, true},
		{"control characters in a peer's words", []PeerAnswer{{Addr: addr, Answer: &config.MembershipAnswer{Answerer: "node-r\x1b[2J", Verdict: config.VerdictRemoved, Evidence: "gone\r\n\x07" + strings.Repeat("x", 1000)}}}, true},
		{"removal wins over member at once", []PeerAnswer{{Addr: addr, Answer: answer(config.VerdictMember)}, {Addr: addr, Answer: answer(config.VerdictRemoved)}}, true},
	} {
		removed, evidence := MembershipOutcome(c.answers)
		if removed != c.removed || evidence == "" {
			t.Errorf("%s: removed %v (%q), want %v", c.name, removed, evidence, c.removed)
		}
		if strings.ContainsFunc(evidence, unicode.IsControl) || len(evidence) > 500 {
			t.Errorf("%s: the evidence carries control characters or runs long: %q", c.name, evidence)
		}
	}
}

// serveOn serves h on 127.0.0.1 for the test and returns its address.
func serveOn(t *testing.T, h http.Handler) netip.AddrPort {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String())
}

// silentPeer accepts connections and never answers.
func silentPeer(t *testing.T) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String())
}

// The asker's side against real HTTP peers: it holds on a peer's proven
// "removed" only; a stranger's word, another cluster's, a recorded answer
// replayed, and silence count for nothing, and the question is bounded.
func TestMembershipQuery(t *testing.T) {
	key := testMembershipKey(t, testClusterID)
	otherKey := testMembershipKey(t, testClusterID)
	peer := func(k config.MembershipKey, verdict config.Verdict) netip.AddrPort {
		return serveOn(t, MembershipHandler(keyOf(k), "node-r", func(context.Context, string, string) (config.Verdict, string) {
			return verdict, "what node-r read"
		}))
	}
	stranger := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(config.MembershipAnswer{ClusterID: testClusterID, Answerer: "node-r", Node: r.URL.Query().Get("node"),
			UUID: r.URL.Query().Get("uuid"), Verdict: config.VerdictRemoved, Evidence: "trust me", Proof: strings.Repeat("ab", 32)})
	}))
	recordedNonce, _ := config.NewLifeNonce()
	recorded := key.SignMembership("node-r", "node-q", testUUID, config.VerdictRemoved, "what node-r read", recordedNonce)
	replayer := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(recorded) }))
	notFound := serveOn(t, http.NotFoundHandler())
	silent := silentPeer(t)

	const timeout = 500 * time.Millisecond
	q := MembershipQuery{Key: key, Node: "node-q", UUID: testUUID, Timeout: timeout}
	for _, c := range []struct {
		name    string
		addrs   []netip.AddrPort
		removed bool
		// quick: the answer is in well before the timeout.
		quick bool
	}{
		{"a peer proves the removal", []netip.AddrPort{peer(key, config.VerdictRemoved), silent}, true, true},
		{"a stranger says removed", []netip.AddrPort{stranger, notFound, silent}, false, false},
		{"another cluster's agent says removed", []netip.AddrPort{peer(otherKey, config.VerdictRemoved)}, false, true},
		{"a recorded removal replayed", []netip.AddrPort{replayer}, false, true},
		{"every peer unknown, one silent", []netip.AddrPort{peer(key, config.VerdictUnknown), peer(key, config.VerdictUnknown), silent}, false, false},
		{"a proven member waits for the others", []netip.AddrPort{peer(key, config.VerdictMember), silent}, false, false},
		{"every peer answered ends the question", []netip.AddrPort{peer(key, config.VerdictMember), peer(key, config.VerdictUnknown)}, false, true},
		{"nobody at all", nil, false, true},
	} {
		start := time.Now()
		answers := q.Ask(t.Context(), c.addrs)
		took := time.Since(start)
		removed, evidence := MembershipOutcome(answers)
		if removed != c.removed {
			t.Errorf("%s: removed %v (%s), want %v", c.name, removed, evidence, c.removed)
		}
		if took > timeout+time.Second {
			t.Errorf("%s: the question took %s, bound %s", c.name, took, timeout)
		}
		if c.quick && took > timeout/2 {
			t.Errorf("%s: took %s, want it answered before the timeout %s", c.name, took, timeout)
		}
		if len(answers) != len(c.addrs) {
			t.Errorf("%s: %d answers for %d peers", c.name, len(answers), len(c.addrs))
		}
	}
}

func TestMembershipHandler(t *testing.T) {
	key := testMembershipKey(t, testClusterID)
	var asked []string
	h := MembershipHandler(keyOf(key), "node-r", func(_ context.Context, node, uuid string) (config.Verdict, string) {
		asked = append(asked, node+"/"+uuid)
		return config.VerdictUnknown, "not synced"
	})
	nonce := strings.Repeat("ab", config.LifeNonceSize)
	for _, c := range []struct {
		method, target string
		want           int
	}{
		{http.MethodGet, config.MembershipPath + "?node=node-q&uuid=" + testUUID + "&nonce=" + nonce, http.StatusOK},
		{http.MethodGet, config.MembershipPath + "?node=node-q&nonce=abcd", http.StatusBadRequest},
		{http.MethodGet, config.MembershipPath + "?nonce=" + nonce, http.StatusBadRequest},
		{http.MethodPost, config.MembershipPath + "?node=node-q&nonce=" + nonce, http.StatusMethodNotAllowed},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.target, nil))
		if rec.Code != c.want {
			t.Errorf("%s %s: %d, want %d", c.method, c.target, rec.Code, c.want)
		}
	}
	if len(asked) != 1 || asked[0] != "node-q/"+testUUID {
		t.Errorf("judged %v, want node-q/%s once", asked, testUUID)
	}
	rec := httptest.NewRecorder()
	MembershipHandler(keyOf(config.MembershipKey{}), "node-r", nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, config.MembershipPath+"?node=node-q&nonce="+nonce, nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("without a key: %d, want 503", rec.Code)
	}
}

// A quick "member" from one peer must not end the question before a slower
// peer's proven "removed" is in: removal wins (MembershipOutcome), so the
// asker waits for every peer up to its bound once someone said "member".
// The slower peer answers only after the member's answer has been sent,
// and a little later, as a peer reading the record and etcd after the
// Node would.
func TestMembershipQueryWaitsPastAMemberForARemoval(t *testing.T) {
	key := testMembershipKey(t, testClusterID)
	memberSent := make(chan struct{})
	member := MembershipHandler(keyOf(key), "node-m", func(context.Context, string, string) (config.Verdict, string) {
		return config.VerdictMember, "node-m's cache, not yet caught up"
	})
	fast := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		member.ServeHTTP(w, r)
		w.(http.Flusher).Flush()
		close(memberSent)
	}))
	slow := serveOn(t, MembershipHandler(keyOf(key), "node-r", func(ctx context.Context, _, _ string) (config.Verdict, string) {
		select {
		case <-memberSent:
		case <-ctx.Done():
			return config.VerdictUnknown, "never saw the member answer"
		}
		// The reads of the record and of etcd a removal takes.
		select {
		case <-time.After(150 * time.Millisecond):
		case <-ctx.Done():
		}
		return config.VerdictRemoved, "its Node node-q is gone and the cluster record no longer lists it"
	}))
	const timeout = 2 * time.Second
	q := MembershipQuery{Key: key, Node: "node-q", UUID: testUUID, Timeout: timeout}
	start := time.Now()
	answers := q.Ask(t.Context(), []netip.AddrPort{fast, slow})
	took := time.Since(start)
	removed, evidence := MembershipOutcome(answers)
	if !removed {
		for _, a := range answers {
			t.Logf("%s: answer %v, err %v", a.Addr, a.Answer != nil, a.Err)
		}
		t.Fatalf("removed false (%s): the quick member answer ended the question before the proven removal", evidence)
	}
	if took > timeout/2 {
		t.Errorf("took %s: with every peer answered the question should end, not wait out its bound %s", took, timeout)
	}
}

// A worker holds the cluster token (every node does) but is not trusted
// with the cluster: a compromised one must not be able to hold every
// server that reboots by saying "removed". Only a server's word counts:
// the membership key comes from the server CA key, which workers lack.
func TestAWorkerCannotProveARemoval(t *testing.T) {
	const token = "s3cret"
	serverDir := k3s.Paths{DataDir: t.TempDir()}
	writeServerCAKey(t, serverDir)
	workerDir := k3s.Paths{DataDir: t.TempDir()}
	says := func(v config.Verdict) MembershipJudge {
		return func(context.Context, string, string) (config.Verdict, string) { return v, "what it read" }
	}
	// A worker's agent: its membership handler as it runs on a worker.
	worker := serveOn(t, MembershipHandler(func() (config.MembershipKey, error) {
		return LoadMembershipKey(testClusterID, workerDir)
	}, "edge-w", says(config.VerdictRemoved)))
	// A compromised worker signing with what it holds: a key from the
	// token (here its proof of life's MAC; the membership MAC under a
	// token-derived key is refused in config's TestMembershipProof).
	lifeKey, _ := config.NewLifeKey(testClusterID, token)
	forger := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nonce, _ := hex.DecodeString(r.URL.Query().Get("nonce"))
		a := config.MembershipAnswer{ClusterID: testClusterID, Answerer: "edge-w", Node: r.URL.Query().Get("node"),
			UUID: r.URL.Query().Get("uuid"), Verdict: config.VerdictRemoved, Evidence: "trust me"}
		a.Proof = lifeKey.Answer(a.Answerer, nonce).Proof
		_ = json.NewEncoder(w).Encode(a)
	}))
	// A compromised worker with a CA key of its own making.
	ownKey := testMembershipKey(t, testClusterID)
	ownKeyPeer := serveOn(t, MembershipHandler(keyOf(ownKey), "edge-w", says(config.VerdictRemoved)))
	server := serveOn(t, MembershipHandler(func() (config.MembershipKey, error) {
		return LoadMembershipKey(testClusterID, serverDir)
	}, "node-r", says(config.VerdictRemoved)))

	serverKey, err := LoadMembershipKey(testClusterID, serverDir)
	if err != nil {
		t.Fatal(err)
	}
	_, noKey := LoadMembershipKey(testClusterID, workerDir)
	if !errors.Is(noKey, errNoServerCAKey) {
		t.Errorf("a worker's data dir: %v, want errNoServerCAKey", noKey)
	}
	for _, c := range []struct {
		name    string
		key     config.MembershipKey
		addrs   []netip.AddrPort
		removed bool
	}{
		{"a worker's agent says removed", serverKey, []netip.AddrPort{worker}, false},
		{"a worker signs with the token", serverKey, []netip.AddrPort{forger}, false},
		{"a worker signs with a CA key of its own", serverKey, []netip.AddrPort{ownKeyPeer}, false},
		{"a server says removed", serverKey, []netip.AddrPort{worker, server}, true},
		// An asker without the servers' key checks nothing: unknown.
		{"the asker holds no server CA key", config.MembershipKey{}, []netip.AddrPort{server}, false},
	} {
		q := MembershipQuery{Key: c.key, Node: "node-q", UUID: testUUID, Timeout: 500 * time.Millisecond}
		if removed, evidence := MembershipOutcome(q.Ask(t.Context(), c.addrs)); removed != c.removed {
			t.Errorf("%s: removed %v (%s), want %v", c.name, removed, evidence, c.removed)
		}
	}
}

// testMembershipKey is the membership key of a fresh server CA key.
func testMembershipKey(t *testing.T, clusterID string) config.MembershipKey {
	t.Helper()
	p := k3s.Paths{DataDir: t.TempDir()}
	writeServerCAKey(t, p)
	k, err := LoadMembershipKey(clusterID, p)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func keyOf(k config.MembershipKey) func() (config.MembershipKey, error) {
	return func() (config.MembershipKey, error) { return k, nil }
}

// writeServerCAKey writes a fresh server CA key where k3s keeps it.
func writeServerCAKey(t *testing.T, p k3s.Paths) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(ServerCAKeyFile(p)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ServerCAKeyFile(p), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
