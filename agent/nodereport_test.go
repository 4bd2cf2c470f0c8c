package agent

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/statusserver"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/nodecheck"
	"github.com/sitecon/sitecon/test/testcert"
)

// The node report is the published state, k3s's and etcd's, the agent's
// version and clock, served behind the cluster key; and it never carries
// the cluster token, in either form, whatever the agent holds.
func TestNodeReportCarriesStateNeverTheToken(t *testing.T) {
	const cluster = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	const password = "0123456789abcdef0123456789abcdef-s3cret"
	token := config.Secret(config.SecureToken(password, []byte("ca")))
	a := New(Options{Version: "v1.2.3", Etcd: nodestate.EtcdAccess{Endpoint: "http://127.0.0.1:1"}, StateDir: t.TempDir()})
	a.mu.Lock()
	a.state = State{Node: "node-b", ClusterID: cluster, Role: k3s.RoleServer, Phase: PhaseJoined, Since: time.Now().Add(-time.Hour),
		LastError: "etcd: no leader", ClusterIP: "10.244.244.2", ClusterIPReady: true}
	a.applied = &config.Validated{Config: &config.Config{ClusterID: cluster, NodeName: "node-b"}, Token: token}
	a.mu.Unlock()
	a.noteAppliedToken(a.applied)
	a.etcdSeen.view = &nodestate.EtcdView{ObservedBy: "node-b", Members: []nodestate.EtcdMemberStatus{{Name: "node-b-1a2b3c4d", Healthy: true}, {Name: "node-a-5e6f7a8b"}}}

	key := a.lifeKey(cluster, token)
	srv := httptest.NewServer(statusserver.WithNodeReport(http.NotFoundHandler(), statusserver.NodeReportHandler(key, "node-b", a.nodeReport)))
	defer srv.Close()
	target := netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
	req, err := key.NewReportRequest(target, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(srv.URL + config.NodeReportPath + "?" + req.Query().Encode())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s", resp.Status, body)
	}
	for _, secret := range []string{token.Reveal(), password} {
		if strings.Contains(string(body), secret) {
			t.Errorf("the report carries the token:\n%s", body)
		}
	}
	for _, want := range []string{`"node":"node-b"`, `"phase":"joined"`, `"role":"server"`, `"lastError":"etcd: no leader"`,
		`"clusterIP":"10.244.244.2"`, `"version":"v1.2.3"`, `"node-b-1a2b3c4d"`, `"clock":`,
		`"token":{"since":`, `"source":"first applied by this node's agent"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the report lacks %s:\n%s", want, body)
		}
	}
	if err := key.VerifyReport("node-b", req.Nonce, body, resp.Header.Get(config.NodeReportProofHeader)); err != nil {
		t.Errorf("the report does not verify: %v", err)
	}
}

// The report carries the node-side checks sitecon doctor gathers: the
// certificates of the agent's own k3s data dir (K3sPaths.DataDir unless
// NodeChecks names another), Longhorn's prerequisites and time sync.
func TestNodeReportCarriesTheNodeChecks(t *testing.T) {
	dir := t.TempDir()
	a := New(Options{K3sPaths: k3s.Paths{DataDir: dir, ConfigFile: filepath.Join(dir, "config.yaml")}})
	r := a.nodeReport()
	if r.Storage == nil || r.Time == nil || r.Certs == nil {
		t.Fatalf("report without the node checks: storage %v time %v certs %v", r.Storage, r.Time, r.Certs)
	}
	if r.Certs.DataDir != dir {
		t.Errorf("certificates read in %q, want the agent's k3s data dir %q", r.Certs.DataDir, dir)
	}
	if r.Time.Problem != "" {
		t.Errorf("time: %+v", r.Time)
	}
	// No config applied: the token's section says so (not an older agent).
	if r.Token == nil || r.Token.Problem == "" || !r.Token.Since.IsZero() {
		t.Errorf("token with no config applied: %+v", r.Token)
	}
}

// The node checks run at most once per nodeChecksFresh, however often the
// report is asked (the console asks every node every few seconds while
// the API is down); a report asked later reads the node again.
func TestNodeReportMakesTheNodeChecksOncePerRound(t *testing.T) {
	dir := t.TempDir()
	var asked atomic.Int32
	a := New(Options{K3sPaths: k3s.Paths{DataDir: dir, ConfigFile: filepath.Join(dir, "config.yaml")},
		NodeChecks: nodecheck.Checker{Host: nodecheck.HostAt(dir), K3sDataDir: dir, Adjtimex: func(*unix.Timex) (int, error) {
			asked.Add(1)
			return unix.TIME_OK, nil
		}}})
	for range 20 {
		if r := a.nodeReport(); r.Time == nil || r.Storage == nil || r.Certs == nil {
			t.Fatalf("a report without the node checks: %+v", r)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("20 reports in a row made the node checks %d times, want 1", n)
	}
	a.nodeChecksSeen.mu.Lock()
	a.nodeChecksSeen.at = time.Now().Add(-nodeChecksFresh)
	a.nodeChecksSeen.mu.Unlock()
	a.nodeReport()
	if n := asked.Load(); n != 2 {
		t.Errorf("a report after %s made the node checks %d times in all, want 2", nodeChecksFresh, n)
	}
}

// The report says whether the agent signs its proof of life with its
// node's own credential as its peers check it: not before k3s wrote the
// credential and the client CA (the default paths under the k3s data
// dir), nor with another node's credential; once both are there, it does.
func TestNodeReportSaysWhetherTheNodeSignsAsItself(t *testing.T) {
	dir := t.TempDir()
	paths := k3s.Paths{DataDir: dir, ConfigFile: filepath.Join(dir, "config.yaml")}
	a := New(Options{K3sPaths: paths})
	a.mu.Lock()
	a.state = State{Node: "node-b"}
	a.mu.Unlock()
	if r := a.nodeReport(); r.Credential == nil || !strings.Contains(r.Credential.Problem, "own credential") {
		t.Fatalf("no credential yet: %+v", r.Credential)
	}
	agentDir := filepath.Join(dir, "agent")
	if err := os.MkdirAll(agentDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ca := testcert.NewClientCA(t, agentDir)
	if err := os.Rename(ca.Kubeconfig(t, "node-c", "system:node:node-c", "system:nodes"), k3s.NodeKubeconfig(paths)); err != nil {
		t.Fatal(err)
	}
	if r := a.nodeReport(); r.Credential == nil || !strings.Contains(r.Credential.Problem, "not node node-b's own identity") {
		t.Fatalf("another node's credential: %+v", r.Credential)
	}
	if err := os.Rename(ca.Kubeconfig(t, "node-b", "system:node:node-b", "system:nodes"), k3s.NodeKubeconfig(paths)); err != nil {
		t.Fatal(err)
	}
	if ca.Path != k3s.ClientCA(paths) {
		t.Fatalf("the CA at %s, want k3s's %s", ca.Path, k3s.ClientCA(paths))
	}
	if r := a.nodeReport(); r.Credential == nil || r.Credential.Problem != "" {
		t.Fatalf("its own credential and the client CA: %+v", r.Credential)
	}
}
