package apps

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/test/blackhole"
)

const testClusterID = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"

func testLifeKey(t *testing.T, token config.Secret) config.LifeKey {
	t.Helper()
	key, err := config.NewLifeKey(testClusterID, token)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// serve runs h on a loopback port for the test.
func serve(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// refusingAddr is a loopback port that was just listened on and closed: it
// refuses connections.
func refusingAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Only the lost node's own agent, proving itself with the cluster's key for
// this probe's nonce, is a sign of life; a refused connection is its host's.
// Anything else that answers at the address is someone else: reported, and
// no sign of life. A timeout is silence.
func TestLifeProbe(t *testing.T) {
	key := testLifeKey(t, "cluster-password")
	probe := LifeProbe{Key: key}
	agentB := serve(t, config.LifeProofHandler(key, "node-b", nil))
	// A recorded answer of node-b's real agent, replayed for every challenge.
	recorded := httptest.NewRecorder()
	config.LifeProofHandler(key, "node-b", nil).ServeHTTP(recorded, httptest.NewRequest(http.MethodGet,
		config.LifeProofPath+"?nonce="+strings.Repeat("00", config.LifeNonceSize), nil))
	replayer := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(recorded.Body.Bytes())
	}))
	// A server that says what /status says, on every path.
	plainStatus := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("cluster:" + testClusterID))
	}))
	// Hung: takes the connection, never answers.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	hole, err := blackhole.Listen(refusingAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()

	cluster := LifeProbe{Key: key, FailoverTimeout: DefaultFailoverTimeout}
	fenced := func(fencing bool, timeout time.Duration) *config.LifeStatus {
		st := config.NewLifeStatus(fencing, timeout)
		st.SetFenced(true, time.Now().Add(-3*time.Second))
		return st
	}
	for _, c := range []struct {
		name     string
		addr     string
		probe    LifeProbe
		alive    bool
		evidence LifeEvidence
		detail   string
	}{
		{"the node's own agent", agentB, probe, true, LifeProven, "its agent proved at " + agentB},
		// Whatever answers at the address is a sign of the host: a paused
		// host (SIGSTOP, thrashing) takes the connection and never
		// answers while its containers run; a 503 or a 404 may be its own
		// agent half up. Only silence, or the node's own word that it
		// fenced, lets the failover go (the hold says what to do).
		{"a stray HTTP server (a proxy's 404)", serve(t, http.NotFoundHandler()), probe, true, LifeStranger, "404 Not Found"},
		{"a server answering the plain /status everywhere", plainStatus, probe, true, LifeStranger, "not a proof"},
		{"another node's agent at the address", serve(t, config.LifeProofHandler(key, "node-c", nil)), probe, true, LifeStranger, `node "node-c"`},
		{"another cluster's agent", serve(t, config.LifeProofHandler(testLifeKey(t, "other-password"), "node-b", nil)), probe, true, LifeStranger, "does not verify"},
		{"a recorded answer replayed", replayer, probe, true, LifeStranger, "does not verify"},
		{"a server that takes the connection and never answers (a paused host)", hung.Addr().String(), probe, true, LifeStranger, "gave no proof"},
		{"a refused connection: the host is up", refusingAddr(t), probe, true, LifeHostUp, "refused"},
		// The node's own signed word that it fenced lets the failover go,
		// only from an agent that fences with the cluster's timeout.
		{"the node's agent, fenced", serve(t, config.LifeProofHandler(key, "node-b", fenced(true, DefaultFailoverTimeout))), cluster, false, LifeFenced, "has fenced"},
		{"the node's agent, not fenced", serve(t, config.LifeProofHandler(key, "node-b", config.NewLifeStatus(true, DefaultFailoverTimeout))), cluster, true, LifeProven, "has not fenced"},
		{"the node's agent, running without fencing", serve(t, config.LifeProofHandler(key, "node-b", fenced(false, DefaultFailoverTimeout))), cluster, true, LifeProven, "without fencing"},
		{"the node's agent, fenced with another timeout", serve(t, config.LifeProofHandler(key, "node-b", fenced(true, time.Minute))), cluster, true, LifeProven, "not the cluster's 28s"},
		{"a silent address (powered off)", hole.Addr, probe, false, LifeSilent, "silent"},
		{"no key to check a proof: unknown", agentB, LifeProbe{}, true, LifeUnknown, "no cluster token"},
	} {
		life := c.probe.Probe(context.Background(), c.addr, "node-b")
		if life.Alive != c.alive || life.Evidence != c.evidence || !strings.Contains(life.Detail, c.detail) {
			t.Errorf("%s: %+v (want alive %v, %s, detail with %q)", c.name, life, c.alive, c.evidence, c.detail)
		}
	}
}

// The probe goes to the node's InternalIP on the status port, with a fresh
// nonce each time; a node without an address cannot be shown dead.
func TestLifeProbeNode(t *testing.T) {
	key := testLifeKey(t, "cluster-password")
	var mu sync.Mutex
	var nonces []string
	agentB := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		nonces = append(nonces, r.URL.Query().Get("nonce"))
		mu.Unlock()
		config.LifeProofHandler(key, "node-b", nil).ServeHTTP(w, r)
	}))
	var dialled []string
	probe := LifeProbe{Key: key, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialled = append(dialled, addr)
		return (&net.Dialer{}).DialContext(ctx, network, agentB)
	}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeHostName, Address: "node-b"}, {Type: corev1.NodeInternalIP, Address: "127.0.44.2"}}}}
	for range 2 {
		if life := probe.Node(context.Background(), node); !life.Alive || life.Evidence != LifeProven {
			t.Fatalf("node-b's agent: %+v", life)
		}
	}
	if len(dialled) != 2 || dialled[0] != "127.0.44.2:12346" {
		t.Fatalf("dialled %v, want the node's InternalIP and the status port", dialled)
	}
	if len(nonces) != 2 || nonces[0] == nonces[1] || len(nonces[0]) != 2*config.LifeNonceSize {
		t.Fatalf("nonces %q: want a fresh one per probe", nonces)
	}
	if life := probe.Node(context.Background(), &corev1.Node{}); !life.Alive || life.Evidence != LifeUnknown {
		t.Fatalf("a node without an address: %+v", life)
	}
}

// What a failed connection says about the node: refused is a host that is
// up, timeout and no route are silence, anything else is not known.
func TestDialLife(t *testing.T) {
	opErr := func(errno error) error {
		return &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: errno}}}
	}
	for _, c := range []struct {
		err      error
		alive    bool
		evidence LifeEvidence
	}{
		{opErr(syscall.ECONNREFUSED), true, LifeHostUp},
		{opErr(syscall.EHOSTUNREACH), false, LifeSilent},
		{opErr(syscall.ENETUNREACH), false, LifeSilent},
		{fmt.Errorf("dial: %w", context.DeadlineExceeded), false, LifeSilent},
		{opErr(syscall.EPERM), true, LifeUnknown},
		{errors.New("something else"), true, LifeUnknown},
	} {
		if life := dialLife("10.0.0.2:12346", c.err); life.Alive != c.alive || life.Evidence != c.evidence {
			t.Errorf("%v: %+v (want alive %v, %s)", c.err, life, c.alive, c.evidence)
		}
	}
}
