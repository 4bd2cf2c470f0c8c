package e2e

import (
	"context"
	"encoding/json"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/nodereport"
	"github.com/sitecon/sitecon/test/sitebox"
	"github.com/sitecon/sitecon/views"
)

// apiDownSite is a site whose three agents run with their etcd member
// (as a server's agent reaches its own through k3s), node-a's cluster
// config written as a device holds it, then two etcd members and the API
// server stopped: the cluster API does not answer, and only the nodes
// themselves can say what they know.
type apiDownSite struct {
	site   *sitebox.TestSite
	agents map[string]*siteAgent
	// config is node-a's cluster config.
	config string
}

func startAPIDownSite(t *testing.T) *apiDownSite {
	t.Helper()
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	s := &apiDownSite{site: site, agents: map[string]*siteAgent{}}
	logDir := t.TempDir()
	t.Cleanup(func() {
		// The agents published etcd's member list: leave none behind,
		// and the site as it was.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// etcd's quorum first: the API server starts on it.
		for _, node := range []string{"node-b", "node-c"} {
			if err := site.StartEtcdMember(node); err != nil {
				t.Errorf("etcd of %s: %v", node, err)
			}
		}
		if err := site.StartAPIServer(ctx); err != nil {
			t.Errorf("the API server: %v", err)
		}
		site.WaitSettled(t, 120*time.Second)
		for _, a := range s.agents {
			a.stop()
		}
		cs := clientset(t, site)
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Delete(ctx, kube.EtcdMembersConfigMapName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("the published etcd members: %v", err)
		}
	})
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		member, ok := site.EtcdMemberOf(node)
		if !ok {
			t.Fatalf("%s runs no etcd member", node)
		}
		s.agents[node] = startAgentWith(t, site, node, "", logDir, func(o *agent.Options) {
			startSiteAgentTimings(o)
			o.Etcd = nodestate.EtcdAccess{Endpoint: member.ClientURL()}
			o.Version = "e2e-" + node
		})
	}
	// node-a's cluster config, as its device holds it: the cluster's id
	// and token, its address in the site's node network.
	if err := site.WriteNodeConfigs(); err != nil {
		t.Fatal(err)
	}
	s.config = site.NodeConfigFile("node-a")
	// Every agent has seen its etcd whole and the cluster's nodes before
	// the API goes: what it knows then is what it can tell after.
	token, err := site.ClusterToken()
	if err != nil {
		t.Fatal(err)
	}
	key, err := config.NewLifeKey(site.ClusterID, token)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []netip.AddrPort
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		addr, err := site.StatusAddr(node)
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, netip.MustParseAddrPort(addr))
	}
	until(t, 60*time.Second, "every agent's report with etcd 3/3 healthy and its peers", func() (nodestate.NodeReports, bool) {
		r := nodereport.Ask(context.Background(), key, addrs, 0)
		if len(r.Answers) != 3 {
			return r, false
		}
		for _, a := range r.Answers {
			if !a.Answered || !strings.HasPrefix(a.Report.Etcd.Text(), "3/3 healthy") || len(a.Report.Peers) < 3 {
				return r, false
			}
		}
		return r, true
	}, func(r nodestate.NodeReports) string { b, _ := json.MarshalIndent(r, "", "  "); return string(b) })
	return s
}

// stopAPI stops two etcd members (no quorum) and the API server.
func (s *apiDownSite) stopAPI(t *testing.T) {
	t.Helper()
	for _, node := range []string{"node-b", "node-c"} {
		if err := s.site.StopEtcdMember(node); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.site.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
}

// statusJSON runs sitecon status -o json with node-a's config and
// returns what it printed, which must be the node reports with exit 2.
func (s *apiDownSite) statusJSON(t *testing.T) (views.NodeReportsOutput, string) {
	t.Helper()
	out, errOut, err := runSitecon(t, "status", "--kubeconfig", s.site.Kubeconfig(), "--config", s.config, "-o", "json")
	if code := exitCode(err); code != 2 {
		t.Errorf("sitecon status exited %d, want 2 (the cluster API cannot be read); stderr:\n%s", code, errOut)
	}
	var got views.NodeReportsOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("sitecon status -o json: %v\n%s\nstderr:\n%s", err, out, errOut)
	}
	return got, out
}

// answerOf is node's answer in r.
func answerOf(r nodestate.NodeReports, node string) (nodestate.NodeAnswer, bool) {
	for _, a := range r.Answers {
		if a.Name() == node {
			return a, true
		}
	}
	return nodestate.NodeAnswer{}, false
}

// Issue 22: with etcd without quorum and the API server stopped, sitecon
// status with a node's cluster config prints what each node's agent
// reports of itself, asked directly: all three, each with its phase and
// its etcd member's view; with one agent stopped, that node did not
// answer and the other two are still shown. The exit status stays 2.
func TestStatusShowsEachNodesOwnReportWhenTheAPIIsDown(t *testing.T) {
	s := startAPIDownSite(t)
	s.stopAPI(t)

	// The agents observe etcd every 10s: wait for node-a's view without quorum.
	got := until(t, 60*time.Second, "every node's own report, node-a's etcd without quorum", func() (nodestate.NodeReports, bool) {
		out, _ := s.statusJSON(t)
		a, ok := answerOf(out.NodeReports, "node-a")
		if !ok || !a.Answered || !strings.Contains(a.Report.Etcd.Text(), "no quorum") {
			return out.NodeReports, false
		}
		for _, node := range []string{"node-b", "node-c"} {
			if a, ok := answerOf(out.NodeReports, node); !ok || !a.Answered {
				return out.NodeReports, false
			}
		}
		return out.NodeReports, true
	}, func(r nodestate.NodeReports) string { b, _ := json.MarshalIndent(r, "", "  "); return string(b) })
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		a, _ := answerOf(got, node)
		if a.Report.Version != "e2e-"+node || a.Report.Phase == "" {
			t.Errorf("%s's report is not its own: %+v", node, a.Report)
		}
	}

	out, errOut, err := runSitecon(t, "status", "--kubeconfig", s.site.Kubeconfig(), "--config", s.config)
	if code := exitCode(err); code != 2 {
		t.Errorf("sitecon status exited %d, want 2; stderr:\n%s", code, errOut)
	}
	t.Logf("sitecon status with the API down:\n%s%s", out, errOut)
	if !strings.Contains(out, views.NodeReportsTitle) {
		t.Errorf("stdout does not say %q:\n%s", views.NodeReportsTitle, out)
	}
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		if l := lineWith(out, node+" "); !strings.Contains(l, " yes ") {
			t.Errorf("%s's row %q, want it answered", node, l)
		}
	}
	if !strings.Contains(lineWith(out, "node-a "), "no quorum") {
		t.Errorf("node-a's row does not say its etcd has no quorum:\n%s", out)
	}

	// The support bundle, taken with the API down, carries the same
	// reports: when the API does not answer they are what the site says.
	none := filepath.Join(t.TempDir(), "none")
	files, _, bundleOut, _ := takeBundle(t, "--kubeconfig", s.site.Kubeconfig(), "--config", s.config,
		"--api-timeout", "3s", "--state-dir", none, "--agent-log", none, "--k3s-log", none, "--k3s-data-dir", none)
	var inBundle nodestate.NodeReports
	if err := json.Unmarshal(files["cluster/node-reports.json"], &inBundle); err != nil {
		t.Errorf("the bundle's node reports: %v; printed:\n%s", err, bundleOut)
	}
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		if a, ok := answerOf(inBundle, node); !ok || !a.Answered {
			t.Errorf("the bundle lacks %s's own report: %+v", node, a)
		}
	}

	// One agent stopped: that node did not answer, the others still do.
	s.agents["node-c"].stop()
	delete(s.agents, "node-c")
	r, raw := s.statusJSON(t)
	c, ok := answerOf(r.NodeReports, "node-c")
	if !ok || c.Answered || !strings.Contains(c.Problem, "did not answer") {
		t.Errorf("node-c with its agent stopped: %+v\n%s", c, raw)
	}
	for _, node := range []string{"node-a", "node-b"} {
		if a, ok := answerOf(r.NodeReports, node); !ok || !a.Answered {
			t.Errorf("%s is not shown answering beside a silent node-c: %+v", node, a)
		}
	}
}

// Issue 22, the console's side: with etcd without quorum and the API
// server stopped, the overview (80x24) says the cluster API is down and
// shows what each node reports, asked directly, and nothing says all is
// well; with node-c's agent stopped, node-c did not answer and the other
// two are still shown.
func TestConsoleShowsEachNodesOwnReportWhenTheAPIIsDown(t *testing.T) {
	s := startAPIDownSite(t)
	c := startConsoleNoColor(t, "--kubeconfig", s.site.Kubeconfig(), "--config", s.config, "--log-file", t.TempDir()+"/console.log")
	c.waitScreen(15*time.Second, "the live overview", func(sc string) bool {
		return strings.Contains(sc, "3/3 ready") && !strings.Contains(sc, "STALE")
	})
	s.stopAPI(t)
	answered := func(sc, node string) bool {
		fields := strings.Fields(lineWith(sc, node))
		return len(fields) > 1 && fields[1] == "yes"
	}
	sc := c.waitScreen(90*time.Second, "the overview with every node's own report", func(sc string) bool {
		return strings.Contains(sc, views.NodeReportsTitle) && answered(sc, "node-a") && answered(sc, "node-b") && answered(sc, "node-c")
	})
	t.Logf("the overview with the cluster API down:\n%s", sc)
	if strings.Contains(sc, healthyLine) || !strings.Contains(sc, "STALE") {
		t.Errorf("the overview is not marked stale, or says all is well:\n%s", sc)
	}
	s.agents["node-c"].stop()
	delete(s.agents, "node-c")
	sc = c.waitScreen(30*time.Second, "node-c did not answer, the others still shown", func(sc string) bool {
		fields := strings.Fields(lineWith(sc, "node-c"))
		return len(fields) > 2 && fields[1] == "no" && strings.Contains(lineWith(sc, "node-c"), "did not answer") &&
			answered(sc, "node-a") && answered(sc, "node-b")
	})
	t.Logf("with node-c's agent stopped:\n%s", sc)
}
