package views

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
)

// Every alert says why and what to do next, from the status alone; where
// sitecon doctor has a finding for the same condition, its id.
func TestAlertsSayWhyAndWhatNext(t *testing.T) {
	server := []string{"control-plane", "etcd", "master"}
	ready := func(name string) kube.NodeStatus {
		return kube.NodeStatus{Name: name, Ready: true, Status: kube.NodeReady, Since: now.Add(-time.Hour), Schedulable: true, Roles: server}
	}
	lostNode := kube.NodeStatus{Name: "node-b", Status: kube.NodeUnknown, Since: now.Add(-46 * time.Second), Roles: server,
		Reason: "Kubelet stopped posting node status."}
	twoHoursAgo := now.Add(-2 * time.Hour)
	site := func(change func(s *kube.ClusterStatus, agent *AgentSummary)) Frame {
		s := kube.ClusterStatus{Nodes: []kube.NodeStatus{ready("node-a"), lostNode, ready("node-c")}, API: kube.Health{Connected: true}}
		agent := &AgentSummary{Running: true, Node: "node-a"}
		change(&s, agent)
		return Frame{Status: s, Agent: agent, Synced: true}
	}
	cases := []struct {
		name  string
		frame Frame
		// want is the alert's line (fact: why → next [id]) in part; none
		// are texts no alert may have.
		want []string
		none []string
	}{
		{"a lost node: its kubelet is silent, check power and network",
			site(func(*kube.ClusterStatus, *AgentSummary) {}),
			[]string{"node node-b Unknown for 46s: kubelet stopped posting status → check power/network, sitecon doctor [SC-NODE-NOT-READY]"}, nil},
		{"a NotReady node says its kubelet's reason",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.Nodes[1].Status, s.Nodes[1].Reason, s.Nodes[1].Roles = kube.NodeNotReady, "container runtime network not ready.", []string{"agent"}
			}),
			[]string{"node node-b NotReady for 46s: kubelet: container runtime network not ready → check k3s there (journalctl -u k3s), sitecon doctor [SC-NODE-NOT-READY]"},
			nil},
		{"a node left cordoned: Ready, no drain under way",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.Nodes[2].Schedulable, s.Nodes[2].CordonedSince = false, &twoHoursAgo
			}),
			[]string{"node node-c cordoned for 120m: Ready, no drain under way → maintenance over? u on nodes (sitecon uncordon node-c) [SC-NODE-CORDONED]"}, nil},
		{"a node being drained is not left cordoned",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.Nodes[2].Schedulable, s.Nodes[2].PodsLeaving = false, 3
			}),
			nil, []string{"cordoned"}},
		{"a node in a maintenance walk under way on this device is not left cordoned",
			site(func(s *kube.ClusterStatus, agent *AgentSummary) {
				s.Nodes[2].Schedulable = false
				agent.Events = []AgentEvent{{Source: "audit", Kind: "maintenance", Subject: "node-c", Message: "intent by tech", UnderWay: true}}
			}),
			nil, []string{"cordoned"}},
		{"a node whose maintenance walk ended cordoned is left cordoned",
			site(func(s *kube.ClusterStatus, agent *AgentSummary) {
				s.Nodes[2].Schedulable = false
				agent.Events = []AgentEvent{{Source: "audit", Kind: "maintenance", Subject: "node-c", Message: "failed by tech: node-c did not come back"},
					{Source: "audit", Kind: "maintenance", Subject: "node-a", Message: "intent by tech", UnderWay: true}}
			}),
			[]string{"node node-c cordoned"}, nil},
		{"a lost node that is cordoned is lost, not forgotten",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) { s.Nodes[1].Schedulable = false }),
			[]string{"node node-b Unknown"}, []string{"cordoned"}},
		{"the stats leader on a lost node",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) { s.StatsLeader = kube.LeaseHolder{Holder: "node-b"} }),
			[]string{"stats leader node-b is on a lost node: cluster stats stop until another agent leads → wait for its lease to run out; if no agent takes it, check the agents [SC-STATS-LEADER-LOST]"}, nil},
		{"a stats leader on a lost node whose lease ran out: no other agent took it",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.StatsLeader = kube.LeaseHolder{Holder: "node-b", Expired: true}
			}),
			[]string{"stats leader node-b is on a lost node: its lease ran out and no other agent took it → check the agents on the Ready nodes (systemctl status sitecon-agent) [SC-STATS-LEADER-LOST]"}, nil},
		// Issue 38: the doctor warns of it (SC-STATS-LEADER-LOST), and
		// the leader runs the failover guard: no leader, no failover.
		{"a lease run out on a Ready node: its agent stopped, and no other leads",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.StatsLeader = kube.LeaseHolder{Holder: "node-a", Expired: true}
			}),
			[]string{"stats leader node-a stopped renewing its lease: its lease ran out and no other agent took it → check the agents on the Ready nodes (systemctl status sitecon-agent) [SC-STATS-LEADER-LOST]"}, nil},
		{"a holder that is no node of the cluster",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.StatsLeader = kube.LeaseHolder{Holder: "node-gone"}
			}),
			[]string{"stats leader node-gone is no node of the cluster: cluster stats stop until another agent leads → wait for its lease to run out; if no agent takes it, check the agents [SC-STATS-LEADER-LOST]"}, nil},
		{"a stats leader on a Ready node is no alert",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) { s.StatsLeader = kube.LeaseHolder{Holder: "node-a"} }),
			nil, []string{"stats leader"}},
		{"a degraded volume rebuilding: where and how far; the one healthy copy named",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.Volumes = []kube.VolumeStatus{{Name: "vol-x", Robustness: kube.RobustnessDegraded, Since: now.Add(-5 * time.Minute), SinceExact: true, WantReplicas: 3,
					Replicas: []kube.ReplicaStatus{{Node: "node-a", State: kube.ReplicaHealthy}, {Node: "node-b", State: kube.ReplicaFailed}, {Node: "node-c", State: kube.ReplicaRebuilding, Progress: 40}}}}
			}),
			[]string{"volume vol-x degraded for 5m (2 of 3 replicas not healthy): rebuilding on node-c, 40 %; replica on lost node-b → keep node-a up: only healthy copy until the rebuild ends [SC-VOL-DEGRADED]"}, nil},
		{"a degraded volume short of a replica on a running node",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.Volumes = []kube.VolumeStatus{{Name: "vol-y", Robustness: kube.RobustnessDegraded, Since: now.Add(-5 * time.Minute), SinceExact: true, WantReplicas: 3,
					Replicas: []kube.ReplicaStatus{{Node: "node-a", State: kube.ReplicaHealthy}, {Node: "node-c", State: kube.ReplicaHealthy}}}}
			}),
			[]string{"volume vol-y degraded for 5m (0 of 2 replicas not healthy): 2 of 3 replicas exist → Longhorn rebuilds where there is room; sitecon doctor [SC-VOL-DEGRADED]"}, nil},
		{"a faulted volume",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.Volumes = []kube.VolumeStatus{{Name: "vol-z", Robustness: kube.RobustnessFaulted, Since: now.Add(-time.Minute), SinceExact: true, WantReplicas: 1,
					Replicas: []kube.ReplicaStatus{{Node: "node-b", State: kube.ReplicaFailed}}}}
			}),
			[]string{"volume vol-z faulted for 60s: replica on lost node-b → its app cannot run: bring its replicas' nodes back; sitecon doctor [SC-VOL-FAULTED]"}, nil},
		{"a pinned app on its lost node waits for it",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.Apps = []kube.AppStatus{{Name: "historian", Kind: kube.AppKindVM, Mode: kube.AppModePinned, DesignatedNode: "node-b", Node: "node-b",
					Phase: kube.AppPhaseUnknown, ReportedPhase: "Running", NodeLost: true}}
			}),
			[]string{"app historian (vm) not known to run: Unknown (node-b lost): pinned app historian waits for its node node-b → bring node-b back, or m (migrate) on apps"}, nil},
		{"an auto app whose failover the agent holds: the node still answers",
			site(func(s *kube.ClusterStatus, agent *AgentSummary) {
				s.Apps = []kube.AppStatus{{Name: "scada", Kind: kube.AppKindContainer, Mode: kube.AppModeAuto, DesignatedNode: "node-b", Node: "node-b",
					Phase: kube.AppPhaseUnknown, NodeLost: true}}
				agent.Failovers = []AgentFailover{{App: "scada", Verdict: "not force-deleting scada-0: lost node node-b shows a sign of life: its agent answered on 10.244.244.2:12346; it may still run the pod"}}
			}),
			[]string{"app scada (container) not known to run: Unknown (node-b lost): failover held: node-b still answers (its agent answered on 10.244.244.2:12346) → power node-b off or bring it back: while it answers, the app stays"}, nil},
		{"an auto app whose failover waits for its volume's copy",
			site(func(s *kube.ClusterStatus, agent *AgentSummary) {
				s.Apps = []kube.AppStatus{{Name: "scada", Kind: kube.AppKindContainer, Mode: kube.AppModeAuto, Node: "node-b", Phase: kube.AppPhaseUnknown, NodeLost: true}}
				agent.Failovers = []AgentFailover{{App: "scada", Verdict: "not force-deleting scada-0: no up-to-date replica off node-b for scada-data"}}
			}),
			[]string{": failover held: no up-to-date replica off node-b for scada-data → bring node-b back: it holds the only up-to-date copy"}, nil},
		{"an auto app on a lost node with no verdict yet waits for the timer",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.Apps = []kube.AppStatus{{Name: "scada", Kind: kube.AppKindContainer, Mode: kube.AppModeAuto, Node: "node-b", Phase: kube.AppPhaseUnknown, NodeLost: true}}
			}),
			[]string{": failover once node-b is lost long enough → wait; events screen shows the agent's steps"}, nil},
		{"a Pending app: the scheduler's reason",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.Apps = []kube.AppStatus{{Name: "plc", Kind: kube.AppKindContainer, Mode: kube.AppModeAuto, Phase: "Pending",
					Unscheduled: &kube.Condition{Type: "PodScheduled", Status: "False", Reason: "Unschedulable", Since: now.Add(-time.Minute),
						Message: "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector."}}}
			}),
			[]string{"app plc (container) not running: Pending: scheduler: 0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector → free or uncordon a node it may use [SC-APP-PENDING]"}, nil},
		// Issue 38: the first frame of a booting site advised freeing a
		// node for an app the scheduler placed seconds later.
		{"a Pending app seconds into it: no advice on a reason that passes",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.Apps = []kube.AppStatus{{Name: "mqtt-broker", Kind: kube.AppKindContainer, Mode: kube.AppModeAuto, Phase: "Pending",
					Unscheduled: &kube.Condition{Type: "PodScheduled", Status: "False", Reason: "Unschedulable", Since: now.Add(-5 * time.Second),
						Message: "0/3 nodes are available: 3 node(s) had untolerated taint {node.kubernetes.io/not-ready: }."}}}
			}),
			[]string{"app mqtt-broker (container) not running: Pending: waiting for a node it may use (the scheduler tries again) → wait; if it stays, enter on apps for the reason [SC-APP-PENDING]"}, nil},
		{"a failed app: its log",
			site(func(s *kube.ClusterStatus, _ *AgentSummary) {
				s.Apps = []kube.AppStatus{{Name: "plc", Kind: kube.AppKindContainer, Node: "node-a", Phase: "Failed"}}
			}),
			[]string{"app plc (container) not running: Failed on node-a: it failed on node-a → l on apps for its log"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var lines []string
			for _, a := range Alerts(&c.frame, now) {
				if a.Why == "" || a.Next == "" {
					t.Errorf("alert %q lacks its why or its next step", a.Line())
				}
				lines = append(lines, a.Line())
			}
			all := strings.Join(lines, "\n")
			for _, w := range c.want {
				if !strings.Contains(all, w) {
					t.Errorf("no alert says\n  %s\nalerts:\n%s", w, all)
				}
			}
			for _, n := range c.none {
				if strings.Contains(all, n) {
					t.Errorf("an alert says %q:\n%s", n, all)
				}
			}
		})
	}
}

// An alert is wrapped at spaces, never cut, and an id or a node name is
// never split at its hyphens.
func TestWrapWordsKeepsWordsWhole(t *testing.T) {
	line := Alert{Text: "volume historian-db-data degraded for 7d", Why: "rebuilding on press-line-c, 42 %", Next: "wait for the rebuild", ID: "SC-VOL-DEGRADED"}.Line()
	for _, width := range []int{20, 30, 76} {
		lines := wrapWords(line, width)
		if got := strings.Join(lines, " "); got != line {
			t.Errorf("width %d: the lines say %q, not %q", width, got, line)
		}
		for _, l := range lines {
			if len([]rune(l)) > width {
				t.Errorf("width %d: line %q is wider", width, l)
			}
			for _, word := range []string{"SC-VOL-DEGRADED]", "press-line-c,", "historian-db-data"} {
				if strings.Contains(l, word[:4]) && !strings.Contains(line, word) {
					t.Errorf("width %d: %q split", width, word)
				}
			}
		}
		if !strings.HasSuffix(lines[len(lines)-1], "[SC-VOL-DEGRADED]") {
			t.Errorf("width %d: the id is split: %q", width, lines)
		}
	}
	if got := wrapWords(strings.Repeat("x", 25), 10); len(got) != 3 || got[2] != "xxxxx" {
		t.Errorf("a word wider than the line is cut into lines: %q", got)
	}
}

// alertsFrame is sampleFrame with every kind of alert the technician is
// told why of: a node lost and one left cordoned, the stats leader on the
// lost node, a failover held while the lost node still answers, a pinned
// app waiting for its node, an app the scheduler cannot place.
func alertsFrame() Frame {
	f := sampleFrame()
	cordoned := now.Add(-2 * time.Hour)
	f.Status.Nodes[2].CordonedSince = &cordoned
	leading := now.Add(-3 * time.Hour)
	f.Status.StatsLeader = kube.LeaseHolder{Holder: "node-b", Since: &leading}
	f.Status.Apps = append(f.Status.Apps,
		kube.AppStatus{Name: "scada", Kind: kube.AppKindContainer, Mode: kube.AppModeAuto, DesignatedNode: "node-b", Node: "node-b",
			Phase: kube.AppPhaseUnknown, ReportedPhase: "Running", NodeLost: true, Namespace: kube.AppNamespace, Object: "scada-5c7f9"},
		kube.AppStatus{Name: "reports", Kind: kube.AppKindContainer, Mode: kube.AppModePinned, DesignatedNode: "node-c", Phase: "Pending", Namespace: kube.AppNamespace, Object: "reports-0",
			Unscheduled: &kube.Condition{Type: "PodScheduled", Status: "False", Reason: "Unschedulable", Since: now.Add(-4 * time.Minute),
				Message: "0/3 nodes are available: 1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector."}})
	f.Agent.Failovers = []AgentFailover{{App: "scada",
		Verdict: "not force-deleting scada-5c7f9: lost node node-b shows a sign of life: its agent answered; it may still run the pod"}}
	return f
}

// The overview's alerts with their reasons, in golden frames at the
// device console's 80x24 and at 100x30; go test ./views -run
// GoldenAlerts -update rewrites them. No line runs past the screen, and
// an alert is drawn whole or counted in "… N more".
func TestGoldenAlerts(t *testing.T) {
	for _, size := range [][2]int{{80, 24}, {100, 30}} {
		tm := teatest.NewTestModel(t, NewApp(testContext(0, 0)), teatest.WithInitialTermSize(size[0], size[1]))
		tm.Send(FrameMsg(alertsFrame()))
		tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
		a := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*App)
		got := a.View() + "\n"
		for i, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
			if w := ansi.StringWidth(l); w != size[0] {
				t.Errorf("%dx%d line %d is %d wide: %q", size[0], size[1], i, w, l)
			}
		}
		// Each alert drawn is drawn whole: its line, wrapped, is on screen.
		flat := strings.Join(strings.Fields(got), " ")
		shown := 0
		for _, al := range Alerts(ptr.To(alertsFrame()), now) {
			if strings.Contains(flat, al.Text) {
				shown++
				if !strings.Contains(flat, al.Line()) {
					t.Errorf("%dx%d: alert %q is not drawn whole", size[0], size[1], al.Line())
				}
			}
		}
		if more := len(Alerts(ptr.To(alertsFrame()), now)) - shown; more > 0 && !strings.Contains(got, fmt.Sprintf("… %d more", more)) {
			t.Errorf("%dx%d: %d alerts not drawn and not counted:\n%s", size[0], size[1], more, got)
		}
		path := filepath.Join("testdata", fmt.Sprintf("overview-alerts-%dx%d.golden", size[0], size[1]))
		checkGolden(t, path, got)
	}
}
