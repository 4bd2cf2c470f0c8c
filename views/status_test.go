package views

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/sitecon/sitecon/kube"
)

var now = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

func sample() kube.ClusterStatus {
	since := now.Add(-3 * time.Hour)
	return kube.ClusterStatus{
		Cluster:    kube.ClusterIdentity{Name: "site1", UUID: "7f3e2a10", SeedAddress: "10.244.244.1", SeedNode: "node-a"},
		VIP:        kube.VIPStatus{Address: "10.244.244.14", Owner: "node-a", Since: &since},
		NodesReady: 1, NodesTotal: 2,
		Nodes: []kube.NodeStatus{
			{Name: "node-a", Ready: true, Status: kube.NodeReady, Since: since, Roles: []string{"control-plane", "etcd"}, Seed: true, Schedulable: true},
			{Name: "node-b", Status: kube.NodeUnknown, Since: now.Add(-90 * time.Second), Roles: []string{"agent"}},
		},
		Longhorn: true,
		Volumes: []kube.VolumeStatus{{
			Name: "vol-1", State: "attached", Robustness: "degraded", Since: now.Add(-7 * 24 * time.Hour), SinceExact: true,
			Size: 10 << 30, WantReplicas: 3,
			Replicas: []kube.ReplicaStatus{{Node: "node-a", State: kube.ReplicaHealthy}, {Node: "node-b", State: kube.ReplicaFailed}},
		}},
		Apps: []kube.AppStatus{{Name: "hmi", Kind: kube.AppKindVM, Node: "node-a", Phase: "Running", Ready: true}},
		API:  kube.Health{Connected: true},
	}
}

func TestWriteStatusTable(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteStatus(&buf, StatusReport{ClusterStatus: sample()}, now, FormatTable); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"site1 (7f3e2a10)", "node-a (10.244.244.1)", "10.244.244.14 on node-a for 3h",
		"1/2", "(seed)", "cordoned", "Unknown", "90s", // Each problem says why and what next, as the overview's alerts do.
		"Problems:\n  volume vol-1 degraded for 7d (1 of 2 replicas not healthy): replica on lost node-b",
		"→ keep node-a up: only healthy copy [SC-VOL-DEGRADED]\n  node node-b Unknown for 90s: kubelet stopped posting status → check power/network, sitecon doctor [SC-NODE-NOT-READY]\n",
		"degraded", "7d", "node-a:healthy node-b:failed (2 of 3)", "10Gi",
		"hmi", "Running",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "STALE") {
		t.Errorf("a connected status must not say stale:\n%s", out)
	}
}

func TestWriteStatusStale(t *testing.T) {
	st := sample()
	st.API = kube.Health{Connected: false, Since: now.Add(-42 * time.Second), LastError: "connection refused", LastContact: now.Add(-50 * time.Second)}
	st.Stale = &kube.Staleness{Since: st.API.Since, AsOf: st.API.LastContact, Reason: st.API.LastError} // as kube.Derive makes it
	var buf bytes.Buffer
	if err := WriteStatus(&buf, StatusReport{ClusterStatus: st}, now, FormatTable); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.HasPrefix(out, "STALE: the cluster API has not answered for 42s: connection refused\nThis is the cluster as of 50s ago") {
		t.Errorf("stale status should lead with its age and reason:\n%s", out)
	}
	// Every figure from the cache says how old it is; nothing says all is well.
	if !strings.Contains(out, "1/2 (as of 50s ago)") || !strings.Contains(out, "Problems (as of 50s ago):") || strings.Contains(out, "every node ready") {
		t.Errorf("stale figures should say their age:\n%s", out)
	}
}

func TestWriteStatusJSONAndYAML(t *testing.T) {
	for _, f := range []Format{FormatJSON, FormatYAML} {
		var buf bytes.Buffer
		if err := WriteStatus(&buf, StatusReport{ClusterStatus: sample(), Agent: &AgentSummary{Running: true, Phase: "joined"}}, now, f); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		if f == FormatYAML {
			var err error
			if data, err = yaml.YAMLToJSON(data); err != nil {
				t.Fatal(err)
			}
		}
		var got map[string]any
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		nodes := got["nodes"].([]any)
		first := nodes[0].(map[string]any)
		for _, key := range []string{"name", "ready", "roles", "since"} {
			if _, ok := first[key]; !ok {
				t.Errorf("%s: nodes[] lacks %q", f, key)
			}
		}
		vip := got["vip"].(map[string]any)
		if vip["address"] != "10.244.244.14" || vip["owner"] != "node-a" {
			t.Errorf("%s: vip = %v", f, vip)
		}
		vol := got["volumes"].([]any)[0].(map[string]any)
		for _, key := range []string{"name", "state", "robustness", "since", "replicas"} {
			if _, ok := vol[key]; !ok {
				t.Errorf("%s: volumes[] lacks %q", f, key)
			}
		}
		if _, ok := got["namespaces"]; !ok {
			t.Errorf("%s: no namespaces", f)
		}
		if _, ok := got["apps"]; !ok {
			t.Errorf("%s: no apps", f)
		}
		if a, _ := got["agent"].(map[string]any); a["phase"] != "joined" {
			t.Errorf("%s: agent = %v", f, got["agent"])
		}
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"table": FormatTable, "JSON": FormatJSON, "yaml": FormatYAML, "": FormatTable} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseFormat("xml"); err == nil {
		t.Error("xml accepted")
	}
}

func TestAgeAndBytes(t *testing.T) {
	if got := Age(now.Add(-5*time.Minute), now, false); got != ">5m" {
		t.Errorf("lower-bound age = %q", got)
	}
	// A lower bound of seconds says nothing (a one-shot `sitecon status`
	// started watching a moment ago): unknown, as kubectl writes it.
	if got := Age(now.Add(-2*time.Second), now, false); got != AgeUnknown {
		t.Errorf("a lower bound of 2s = %q, want %q", got, AgeUnknown)
	}
	if got := Age(now.Add(-2*time.Second), now, true); got != "2s" {
		t.Errorf("an exact age of 2s = %q", got)
	}
	if got := Age(time.Time{}, now, true); got != "n/a" {
		t.Errorf("zero age = %q", got)
	}
	for n, want := range map[int64]string{0: "0", 512: "512", 10 << 30: "10Gi", 3 << 29: "1.5Gi"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestWriteStatusAgent(t *testing.T) {
	cases := []struct {
		agent *AgentSummary
		want  []string
	}{
		{&AgentSummary{Running: false, Problem: "no agent socket at /run/sitecon/agent.sock"}, []string{"not running on this node (no agent socket at /run/sitecon/agent.sock)"}},
		{&AgentSummary{Running: true, Role: "server", Phase: "waiting-for-seed", Since: now.Add(-2 * time.Minute), Attempts: 7,
			LastError: "seed 10.244.244.1 is not a cluster member yet (empty /status)", ClusterIP: "10.244.244.2", ClusterIPReady: true},
			[]string{"server, waiting-for-seed for 2m, 7 attempts", "10.244.244.2 (on the interface, firewall in place)", "not a cluster member yet"}},
		{&AgentSummary{Running: true, Role: "seed", Phase: "joined", ConfigError: "invalid cluster config, 1 problem(s):\n  - x"}, []string{"Config rejected:", "problem(s):   - x"}},
		// Which evidence holds a failover back, or let it go, per app.
		{&AgentSummary{Running: true, Role: "server", Phase: "joined", Failovers: []AgentFailover{
			{App: "plc-gateway", Verdict: "not force-deleting plc-0: lost node node-b shows a sign of life: its host is up: 10.244.244.2:12346 refused the connection"},
			{App: "web\x1b[2J", Verdict: "force-deleting web-0 stuck on lost node node-b (no sign of life: 10.244.244.2:12346 answered without node-b's proof of life (GET /status/proof answered 404 Not Found): someone else answers at that address)"}}},
			[]string{"Last failover:", "plc-gateway: not force-deleting plc-0: lost node node-b shows a sign of life: its host is up", ": force-deleting web-0", "someone else answers at that address"}},
	}
	for _, c := range cases {
		var buf bytes.Buffer
		if err := WriteStatus(&buf, StatusReport{ClusterStatus: sample(), Agent: c.agent}, now, FormatTable); err != nil {
			t.Fatal(err)
		}
		for _, want := range c.want {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("lacks %q:\n%s", want, buf.String())
			}
		}
		if strings.Contains(buf.String(), "\x1b") {
			t.Errorf("a raw escape reached the output:\n%q", buf.String())
		}
	}
}

// `sitecon status --watch` at 100×30 (issue 20): the header and the
// summary stay on screen, no line wraps, and what does not fit is counted.
func TestStatusWatchFrameFitsTheTerminal(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	var body bytes.Buffer
	if err := WriteStatus(&body, StatusReport{ClusterStatus: sample()}, now, FormatTable); err != nil {
		t.Fatal(err)
	}
	// Longer and wider than the terminal, as a real site's is.
	long := body.String() + strings.Repeat(strings.Repeat("x", 140)+"\n", 40)
	frame := strings.TrimPrefix(string(watchFrame(long, now, 100, 30, true)), "\x1b[H\x1b[2J")
	lines := strings.Split(frame, "\n")
	if len(lines) != 30 {
		t.Errorf("%d lines, want the terminal's 30", len(lines))
	}
	for i, l := range lines {
		if w := ansi.StringWidth(l); w > 100 {
			t.Errorf("line %d is %d cells wide: it wraps at 100", i+1, w)
		}
	}
	if !strings.Contains(lines[0], "q or Ctrl-C to quit") {
		t.Errorf("the header %q does not say how to quit", lines[0])
	}
	firstOfBody := strings.SplitN(body.String(), "\n", 2)[0]
	if lines[2] != ansi.Truncate(firstOfBody, 100, "") {
		t.Errorf("the summary scrolled away: line 3 is %q, want %q", lines[2], firstOfBody)
	}
	if !strings.Contains(lines[29], "more lines") {
		t.Errorf("the last line %q does not count what was left out", lines[29])
	}
	// Not a terminal (a pipe): the frame is written whole.
	if whole := string(watchFrame(long, now, 0, 0, false)); !strings.Contains(whole, strings.Repeat("x", 140)) {
		t.Error("a frame for a pipe was cut")
	}
}

// q quits the watch, as in watch(1) and the console.
func TestStatusWatchQuitsOnQ(t *testing.T) {
	snap, err := kube.NewSnapshot(&rest.Config{Host: "https://127.0.0.1:1"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	keys, typed := io.Pipe()
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- WatchStatus(context.Background(), WatchTerminal{Out: &out, Keys: keys}, snap, func(context.Context) *AgentSummary { return nil }, FormatTable)
	}()
	if _, err := typed.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("ended on x: %v", err)
	default:
	}
	if _, err := typed.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("q did not end the watch within 10 s")
	}
}
