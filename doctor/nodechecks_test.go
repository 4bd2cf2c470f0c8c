package doctor

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/test/testcert"
)

// healthyReport is a node's report with every node-side check met.
func healthyReport(node string, now time.Time) *nodestate.NodeReport {
	ok := nodestate.Prereq{OK: true, Evidence: "there"}
	return &nodestate.NodeReport{Node: node, Version: "v1.4.0",
		Storage: &nodestate.StorageReport{Iscsid: ok, IscsiTCP: ok, Multipathd: ok, NFSClient: ok},
		Time:    &nodestate.TimeReport{Synchronized: true, MaxError: 20 * time.Millisecond},
		Certs: &nodestate.CertsReport{DataDir: "/var/lib/rancher/k3s", Found: true,
			Files: []nodestate.CertFile{{Path: "/var/lib/rancher/k3s/server/tls/client-admin.crt", Subject: "system:admin", NotAfter: now.Add(300 * 24 * time.Hour)}}},
		Token:      &nodestate.TokenReport{Since: now.Add(-30 * 24 * time.Hour), Source: "first applied by this node's agent"},
		Credential: &nodestate.CredentialReport{}}
}

// Each node-side check per node: quiet when every node's report is
// healthy; fires for the node whose report says so, naming it; says it
// could not run for a node that did not answer and for an older agent's
// report that lacks the section (never "fine"); and without a config
// says it did not run.
func TestNodeSideChecks(t *testing.T) {
	now := time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)
	answered := func(r *nodestate.NodeReport) nodestate.NodeAnswer {
		return nodestate.NodeAnswer{Node: r.Node, Address: "10.244.244.9:12346", Answered: true, Report: r}
	}
	silent := nodestate.NodeAnswer{Node: "node-d", Address: "10.244.244.4:12346", Problem: "did not answer within 2s"}
	older := answered(&nodestate.NodeReport{Node: "node-c", Version: "v1.2.0"})
	checks := map[string]func(context.Context, *Env) []Finding{
		IDLonghornPrereq: checkLonghornPrereqs, IDNodeCertExpiry: checkNodeCerts, IDTimeUnsynced: checkTimeSync,
		IDNodeCredential: checkNodeCredentials,
	}
	type want struct {
		sev     Severity
		subject string
		text    string
	}
	for _, c := range []struct {
		name    string
		answers []nodestate.NodeAnswer // nil: no config
		change  func(r *nodestate.NodeReport)
		want    map[string][]want // id → findings
	}{
		{"healthy", []nodestate.NodeAnswer{answered(healthyReport("node-a", now)), answered(healthyReport("node-b", now))}, nil,
			map[string][]want{}},
		{"iscsid missing", nil, func(r *nodestate.NodeReport) {
			r.Storage.Iscsid = nodestate.Prereq{Evidence: "no process named iscsid in /proc"}
		},
			map[string][]want{IDLonghornPrereq: {{Error, "node-b", "iscsid is not running"}}}},
		{"multipathd trap and no NFS", nil, func(r *nodestate.NodeReport) {
			r.Storage.Multipathd = nodestate.Prereq{Evidence: "multipathd runs with no /etc/multipath.conf"}
			r.Storage.NFSClient = nodestate.Prereq{Evidence: "no mount.nfs"}
			r.Storage.IscsiTCP = nodestate.Prereq{Problem: "permission denied"}
		}, map[string][]want{IDLonghornPrereq: {{Warn, "node-b", "multipathd may claim"}, {Warn, "node-b", "no NFS client"}, {Warn, "node-b", "iscsi_tcp not checked"}}}},
		{"certificate in 20 days", nil, func(r *nodestate.NodeReport) {
			r.Certs.Files = append(r.Certs.Files, nodestate.CertFile{Path: "/var/lib/rancher/k3s/agent/client-kubelet.crt", NotAfter: now.Add(20*24*time.Hour + time.Hour)})
		}, map[string][]want{IDNodeCertExpiry: {{Error, "node-b:/var/lib/rancher/k3s/agent/client-kubelet.crt", "node-b: certificate client-kubelet.crt expires in 20 days"}}}},
		{"no k3s data", nil, func(r *nodestate.NodeReport) { r.Certs = &nodestate.CertsReport{DataDir: "/var/lib/rancher/k3s"} },
			map[string][]want{IDNodeCertExpiry: {{Info, "node-b", "no k3s certificates"}}}},
		{"time not synchronised", nil, func(r *nodestate.NodeReport) {
			r.Time = &nodestate.TimeReport{Status: unix.STA_UNSYNC, State: unix.TIME_ERROR, MaxError: 16 * time.Second, EstError: 16 * time.Second}
		}, map[string][]want{IDTimeUnsynced: {{Warn, "node-b", "node-b's clock is not synchronised"}}}},
		{"no credential to sign with", nil, func(r *nodestate.NodeReport) {
			r.Credential = &nodestate.CredentialReport{Problem: "this node's own credential: stat /var/lib/rancher/k3s/agent/kubelet.kubeconfig: no such file or directory"}
		}, map[string][]want{IDNodeCredential: {{Warn, "node-b", "node-b cannot sign its proof of life with its own credential"}}}},
		{"a report not signed as the node's own", func() []nodestate.NodeAnswer {
			b := healthyReport("node-b", now)
			b.Credential = &nodestate.CredentialReport{Problem: "this node's own credential: stat kubelet.kubeconfig: no such file or directory"}
			return []nodestate.NodeAnswer{answered(healthyReport("node-a", now)), {Node: "node-b", Address: "10.244.244.2:12346", NotOwn: b,
				Problem: "answered, but not as the node itself: its report is not signed with node node-b's own credential"}}
		}(), nil, map[string][]want{
			IDNodeCredential: {{Warn, "node-b", "node-b cannot sign its proof of life and report with its own credential"}},
			IDLonghornPrereq: {{Warn, "node-b", "its agent gave no report"}},
			IDNodeCertExpiry: {{Warn, "node-b", "its agent gave no report"}},
			IDTimeUnsynced:   {{Warn, "node-b", "its agent gave no report"}},
		}},
		{"one silent, one older", []nodestate.NodeAnswer{answered(healthyReport("node-a", now)), older, silent}, nil,
			map[string][]want{
				IDLonghornPrereq: {{Warn, "node-c", "predates this check"}, {Warn, "node-d", "its agent gave no report"}},
				IDNodeCertExpiry: {{Warn, "node-c", "predates this check"}, {Warn, "node-d", "its agent gave no report"}},
				IDTimeUnsynced:   {{Warn, "node-c", "predates this check"}, {Warn, "node-d", "its agent gave no report"}},
				IDNodeCredential: {{Warn, "node-c", "predates this check"}, {Warn, "node-d", "its agent gave no report"}},
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			answers := c.answers
			if answers == nil {
				b := healthyReport("node-b", now)
				c.change(b)
				answers = []nodestate.NodeAnswer{answered(healthyReport("node-a", now)), answered(b)}
			}
			env := &Env{Now: now, NodeReports: func(context.Context) nodestate.NodeReports { return nodestate.NodeReports{At: now, Answers: answers} }}
			for id, check := range checks {
				got := check(context.Background(), env)
				w := c.want[id]
				if len(got) != len(w) {
					t.Errorf("%s: %d findings %+v, want %d", id, len(got), got, len(w))
					continue
				}
				for _, wf := range w {
					found := false
					for _, f := range got {
						if f.Severity == wf.sev && f.Subject == wf.subject && strings.Contains(f.Summary, wf.text) {
							found = true
							if f.Severity >= Warn && (f.Next == "" || !strings.Contains(f.Next, strings.Split(wf.subject, ":")[0])) {
								t.Errorf("%s: %+v: the next step must name the node", id, f)
							}
						}
					}
					if !found {
						t.Errorf("%s: no %s finding on %s with %q in %+v", id, wf.sev, wf.subject, wf.text, got)
					}
				}
			}
		})
	}
	t.Run("no config", func(t *testing.T) {
		for id, check := range checks {
			if got := check(context.Background(), &Env{Now: now}); len(got) != 1 || got[0].Severity != Info || !strings.Contains(got[0].Summary, "not checked") {
				t.Errorf("%s: %+v", id, got)
			}
		}
	})
}

// The checks that read the nodes' reports share one round of asking.
func TestRunAsksTheNodesOnce(t *testing.T) {
	var asked atomic.Int32
	now := time.Now()
	env := &Env{APIProblem: "no cluster config", NodeReports: func(context.Context) nodestate.NodeReports {
		asked.Add(1)
		return nodestate.NodeReports{At: now, Answers: []nodestate.NodeAnswer{{Node: "node-a", Answered: true, Report: healthyReport("node-a", now)}}}
	}}
	r := Run(context.Background(), Checks(), env)
	if n := asked.Load(); n != 1 {
		t.Errorf("asked the nodes %d times", n)
	}
	for _, f := range r.Findings {
		if (f.ID == IDLonghornPrereq || f.ID == IDNodeCertExpiry || f.ID == IDTimeUnsynced || f.ID == IDTokenAge || f.ID == IDNodeCredential) && f.Severity != OK {
			t.Errorf("healthy node: %+v", f)
		}
	}
}

// A next step that restarts k3s on several nodes says to do it one server
// at a time, waiting for etcd's quorum between them: restarting two of
// three servers at once loses the quorum.
func TestRestartsOneServerAtATime(t *testing.T) {
	const rule = "one server at a time; wait until SC-ETCD-QUORUM is ok before the next"
	now := time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)
	expiring := func(node string) nodestate.NodeAnswer {
		r := healthyReport(node, now)
		r.Certs.Files = append(r.Certs.Files, nodestate.CertFile{Path: "/var/lib/rancher/k3s/agent/client-kubelet.crt", NotAfter: now.Add(20 * 24 * time.Hour)})
		return nodestate.NodeAnswer{Node: node, Answered: true, Report: r}
	}
	mtu := func(node string, m int) nodestate.NodeAnswer {
		return nodestate.NodeAnswer{Node: node, Answered: true, Report: &nodestate.NodeReport{Node: node, Network: &nodestate.NetworkReport{Interface: "eth1", MTU: m}}}
	}
	for id, c := range map[string]struct {
		check   func(context.Context, *Env) []Finding
		answers []nodestate.NodeAnswer
	}{
		IDNodeCertExpiry: {checkNodeCerts, []nodestate.NodeAnswer{expiring("node-a"), expiring("node-b")}},
		IDMTUMismatch:    {checkMTU, []nodestate.NodeAnswer{mtu("node-a", 1500), mtu("node-b", 1400)}},
		// This node's own: the technician runs the doctor on each server
		// in turn, and each says to restart.
		IDCertExpiry: {checkCerts, nil},
	} {
		env := &Env{Now: now, NodeReports: func(context.Context) nodestate.NodeReports { return nodestate.NodeReports{At: now, Answers: c.answers} }}
		if id == IDCertExpiry {
			env.K3sDataDir = t.TempDir()
			testcert.Write(t, filepath.Join(env.K3sDataDir, "server", "tls", "client-admin.crt"), now.Add(20*24*time.Hour))
		}
		got := c.check(context.Background(), env)
		if len(got) == 0 {
			t.Fatalf("%s: no finding", id)
		}
		for _, f := range got {
			if !strings.Contains(f.Next, rule) {
				t.Errorf("%s: next step %q does not say %q", id, f.Next, rule)
			}
		}
		for _, ch := range Checks() {
			if ch.ID == id && !strings.Contains(ch.Next, rule) {
				t.Errorf("%s: the check's next step %q does not say %q", id, ch.Next, rule)
			}
		}
	}
}

// The token's age: said for each node (ok) while young; a warning past a
// year, and when the agent could not keep its record (then a lower
// bound); not checked for a silent node or an older agent, never "fine".
func TestTokenAge(t *testing.T) {
	now := time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC)
	report := func(node string, tr *nodestate.TokenReport) nodestate.NodeAnswer {
		r := healthyReport(node, now)
		r.Token = tr
		return nodestate.NodeAnswer{Node: node, Address: "10.244.244.9:12346", Answered: true, Report: r}
	}
	since := func(days int) time.Time { return now.Add(-time.Duration(days) * 24 * time.Hour) }
	env := &Env{Now: now, NodeReports: func(context.Context) nodestate.NodeReports {
		return nodestate.NodeReports{At: now, Answers: []nodestate.NodeAnswer{
			report("node-a", &nodestate.TokenReport{Since: since(30), Source: "first applied by this node's agent"}),
			report("node-b", &nodestate.TokenReport{Since: since(400), Source: "k3s's server/token file"}),
			report("node-c", &nodestate.TokenReport{Since: now, Source: "this agent's start", Problem: "the token's record: permission denied"}),
			report("node-d", nil),
			report("node-f", &nodestate.TokenReport{Problem: "no cluster config applied (or the agent runs with --no-bootstrap)"}),
			report("node-g", &nodestate.TokenReport{Since: now.Add(48 * time.Hour), Source: "first applied by this node's agent"}),
			{Node: "node-e", Address: "10.244.244.5:12346", Problem: "did not answer within 2s"},
		}}
	}}
	got := map[string]Finding{}
	for _, f := range checkTokenAge(context.Background(), env) {
		got[f.Subject] = f
	}
	for node, want := range map[string]struct {
		sev      Severity
		summary  string
		evidence string
	}{
		"node-a": {OK, "node-a: the cluster token is 30 days old", "in use since 2026-10-27 (first applied by this node's agent)"},
		"node-b": {Warn, "node-b: the cluster token is 400 days old", "in use since 2025-10-22 (k3s's server/token file)"},
		"node-c": {Warn, "node-c: the cluster token's age partly checked: at least 0 days", "permission denied"},
		"node-d": {Warn, "predates this check", ""},
		"node-e": {Warn, "its agent gave no report", ""},
		"node-f": {Info, "not checked on node-f: no cluster config applied", ""},
		"node-g": {Warn, "not checked on node-g: it reports a first use in the future", "clock"},
	} {
		f, ok := got[node]
		if !ok || f.Severity != want.sev || !strings.Contains(f.Summary, want.summary) || !strings.Contains(strings.Join(f.Evidence, "\n"), want.evidence) {
			t.Errorf("%s: %+v, want %v %q with evidence %q", node, f, want.sev, want.summary, want.evidence)
		}
	}
	if len(got) != 7 {
		t.Errorf("%d findings, want one per node: %+v", len(got), got)
	}
	// Run gives the old token's warning the check's next step: how to rotate.
	r := Run(context.Background(), []Check{{ID: IDTokenAge, Title: "token", Deadline: time.Second, Next: tokenRotateNext, Run: checkTokenAge}}, env)
	for _, f := range r.Findings {
		if f.Subject == "node-b" && !strings.Contains(f.Next, "k3s token rotate") {
			t.Errorf("the old token's next step does not say how to rotate it: %+v", f)
		}
	}
}
