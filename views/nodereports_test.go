package views

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
)

// siteReports is what three nodes say while etcd has no quorum and the
// API server is down: node-a and node-b answer, node-c does not.
func siteReports(at time.Time) nodestate.NodeReports {
	view := &nodestate.EtcdView{ObservedBy: "node-a", Members: []nodestate.EtcdMemberStatus{
		{Name: "node-a-1a2b3c4d", Error: "no leader"}, {Name: "node-b-5e6f7a8b", Error: "no answer from http://10.244.244.2:2379 within 3s"},
		{Name: "node-c-9c0d1e2f", Error: "no answer from http://10.244.244.3:2379 within 3s"}}}
	since := at.Add(-2 * time.Hour)
	report := func(node, ip, lastErr string) *nodestate.NodeReport {
		return &nodestate.NodeReport{Node: node, Role: "server", Phase: "joined", Since: at.Add(-48 * time.Hour), LastError: lastErr,
			ClusterIP: ip, ClusterIPReady: true, K3s: nodestate.K3sReport{Supervised: true, Running: true, RunningSince: &since, Starts: 1},
			Etcd: nodestate.EtcdReport{View: view}, Clock: at}
	}
	return nodestate.NodeReports{At: at, Answers: []nodestate.NodeAnswer{
		{Address: "10.244.244.1:12346", Node: "node-a", Answered: true, Report: report("node-a", "10.244.244.1", "")},
		{Address: "10.244.244.2:12346", Node: "node-b", Answered: true, Report: report("node-b", "10.244.244.2", "etcd: no leader"), ClockSkew: 2 * time.Second},
		{Address: "10.244.244.3:12346", Node: "node-c", Problem: "did not answer within 2s"},
	}}
}

// runReportCmds runs cmd as Bubble Tea would and hands the node reports
// it leads to back to a (a batch's each), so a round asked in the
// background arrives; the 5 s re-ask (a tick) is not followed.
func runReportCmds(a *App, cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	switch msg := cmd().(type) {
	case tea.BatchMsg:
		for _, c := range msg {
			runReportCmds(a, c)
		}
	case NodeReportsMsg:
		_, next := a.Update(msg)
		runReportCmds(a, next)
	}
}

// staleAppWithReports is the console at w×h on a stale frame, the nodes
// asked through gather.
func staleAppWithReports(w, h int, gather func(context.Context, []kube.NodeStatus) nodestate.NodeReports) *App {
	a := NewApp(testContext(w, h))
	a.SetNodeReports(context.Background(), gather)
	_, cmd := a.Update(FrameMsg(staleFrame()))
	runReportCmds(a, cmd)
	return a
}

// Issue 22: while the cluster API is down, the overview says so and shows
// what each node reports, asked directly: a node that did not answer is
// listed with why, beside the others; nothing of it is green; it fits.
// The nodes are asked with the ones last seen, and not again for a few
// seconds; once the API answers, the reports go and no more are asked.
func TestOverviewShowsNodeReportsWhileAPIDown(t *testing.T) {
	var asked [][]kube.NodeStatus
	gather := func(_ context.Context, known []kube.NodeStatus) nodestate.NodeReports {
		asked = append(asked, known)
		return siteReports(now)
	}
	for _, size := range [][2]int{{80, 24}, {100, 30}} {
		a := staleAppWithReports(size[0], size[1], gather)
		v := ansi.Strip(a.View())
		for n, l := range strings.Split(v, "\n") {
			if w := ansi.StringWidth(l); w > size[0] {
				t.Errorf("%dx%d: line %d is %d cells wide: %q", size[0], size[1], n+1, w, l)
			}
		}
		text := plainText(v)
		for _, want := range []string{NodeReportsTitle, "node-a yes joined", "node-b yes joined", "node-c no did not answer within 2s", "no quorum"} {
			if !strings.Contains(text, want) {
				t.Errorf("%dx%d: the overview does not say %q:\n%s", size[0], size[1], want, v)
			}
		}
	}
	if len(asked) != 2 || len(asked[0]) != 3 || asked[0][1].Name != "node-b" || asked[0][1].InternalIP != "10.244.244.2" {
		t.Fatalf("asked %v, want once per console with the three nodes last seen", asked)
	}

	a := staleAppWithReports(80, 24, gather)
	if cmd := a.reports.ask(&a.frame, now.Add(time.Second)); cmd != nil {
		t.Error("asked again a second after a round")
	}
	if cmd := a.reports.ask(&a.frame, now.Add(nodeReportsEvery)); cmd == nil {
		t.Error("not asked again after a few seconds while the API is still down")
	}
	a.reports.asking = false
	live := FrameFromData(healthySiteData(kube.Health{Connected: true, Since: now.Add(-time.Hour)}), true, nil, "", now)
	_, cmd := a.Update(FrameMsg(live))
	runReportCmds(a, cmd)
	if a.frame.Reports != nil || strings.Contains(a.View(), NodeReportsTitle) {
		t.Errorf("the reports stay once the API answers:\n%s", ansi.Strip(a.View()))
	}
	if cmd := a.reports.ask(&a.frame, now.Add(time.Hour)); cmd != nil {
		t.Error("asked while the API answers")
	}
}

// Without a cluster config the overview says plainly what the reports
// need, and shows the rest as before.
func TestOverviewSaysNodeReportsNeedConfig(t *testing.T) {
	a := NewApp(testContext(80, 24))
	a.Update(FrameMsg(staleFrame()))
	if text := plainText(a.View()); !strings.Contains(text, "needs this node's cluster config") || !strings.Contains(text, "--config") {
		t.Errorf("the overview does not say node reports need the cluster config:\n%s", ansi.Strip(a.View()))
	}
}

// Golden frames of the overview with what each node reports, at 80x24 and
// 100x30 (go test ./views -run Golden -update rewrites them).
func TestGoldenNodeReportFrames(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {100, 30}} {
		a := staleAppWithReports(size[0], size[1], func(context.Context, []kube.NodeStatus) nodestate.NodeReports { return siteReports(now) })
		got := a.View() + "\n"
		path := filepath.Join("testdata", "overview-nodereports-"+strings.Join([]string{itoa(size[0]), itoa(size[1])}, "x")+".golden")
		checkGolden(t, path, got)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// With the API server unreachable (the overview's words then end with
// what to check) all three nodes' reports still fit at 80x24: once nodes
// answered, their reports are what to check and the hint gives way. The
// e2e run found the table cut to node-a and "… 2 more".
func TestNodeReportsFitWithTheAPIServerUnreachable(t *testing.T) {
	f := staleFrame()
	f.Status.Stale.Reason = "cannot reach the API server at https://127.0.0.1:46527: dial tcp 127.0.0.1:46527: connect: connection refused"
	a := NewApp(testContext(80, 24))
	a.SetNodeReports(context.Background(), func(context.Context, []kube.NodeStatus) nodestate.NodeReports { return siteReports(now) })
	_, cmd := a.Update(FrameMsg(f))
	runReportCmds(a, cmd)
	text := plainText(a.View())
	for _, want := range []string{"node-a yes", "node-b yes", "node-c no did not answer", "Alerts"} {
		if !strings.Contains(text, want) {
			t.Errorf("the overview does not say %q:\n%s", want, ansi.Strip(a.View()))
		}
	}
}
