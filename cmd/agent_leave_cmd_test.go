package cmd

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/audit/audittest"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/kube/safety"
)

// sitecon agent leave, with the cluster out of reach: refused (quorum and
// volume copies unknown), nothing written; --force needs the node name
// typed; forced and typed, the leave request is written for this node's
// cluster, root-only, and recorded (intent, then outcome).
func TestAgentLeaveCLI(t *testing.T) {
	config, plan := siteOfThree(t) // node-c's config
	request := formation.Records{Dir: stateOf(config)}.LeaveRequestFile()
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	if out, err := runCLI(t, auditLog, "agent", "leave", "--config", config, "--state-dir", stateOf(config), "--agent-socket", noAgent(t), "--yes"); err == nil || !strings.Contains(err.Error(), "quorum and volume copies are unknown") {
		t.Fatalf("a leave with the cluster out of reach should be refused: %v\n%s", err, out)
	}
	if _, err := os.Stat(request); err == nil {
		t.Fatal("a refused leave wrote its request")
	}
	if out, err := runCLI(t, auditLog, "agent", "leave", "--config", config, "--state-dir", stateOf(config), "--agent-socket", noAgent(t), "--yes", "--force"); err == nil || !strings.Contains(err.Error(), "--confirm node-c") {
		t.Fatalf("--force without the node name typed should be refused: %v\n%s", err, out)
	}
	if _, err := os.Stat(request); err == nil {
		t.Fatal("an unconfirmed leave wrote its request")
	}
	out, err := runCLI(t, auditLog, "agent", "leave", "--config", config, "--state-dir", stateOf(config), "--agent-socket", noAgent(t), "--yes", "--force", "--confirm", "node-c")
	if err != nil {
		t.Fatalf("forced leave: %v\n%s", err, out)
	}
	req, ok, err := formation.ReadLeaveRequest(request)
	if err != nil || !ok || req.NodeName != "node-c" || req.ClusterID != plan.ClusterID || req.By == "" {
		t.Fatalf("leave request %+v ok=%v err=%v", req, ok, err)
	}
	if st, _ := os.Stat(request); st.Mode().Perm() != 0o600 {
		t.Errorf("leave request mode %v, want 0600", st.Mode().Perm())
	}
	got := audittest.Outcomes(t, auditLog)
	if !strings.HasSuffix(got, "leave:intent leave:done") {
		t.Errorf("audit %q should end with the forced leave's intent and outcome", got)
	}
}

// The leave request goes only where the agent alone may write: a state
// directory others may write is refused, nothing written.
func TestAgentLeaveRefusesAStateDirectoryOthersMayWrite(t *testing.T) {
	config, _ := siteOfThree(t)
	state := stateOf(config)
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(state, 0o777); err != nil {
		t.Fatal(err)
	}
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	out, err := runCLI(t, auditLog, "agent", "leave", "--config", config, "--state-dir", state, "--agent-socket", noAgent(t), "--yes", "--force", "--confirm", "node-c")
	if err == nil || !strings.Contains(err.Error(), "may be written by others") {
		t.Fatalf("a leave into a state directory others may write: %v\n%s", err, out)
	}
	if _, err := os.Stat(formation.Records{Dir: state}.LeaveRequestFile()); !os.IsNotExist(err) {
		t.Errorf("the request was written: %v", err)
	}
	if got := audittest.Outcomes(t, auditLog); !strings.HasSuffix(got, "leave:failed") {
		t.Errorf("audit %q should end with the leave failed", got)
	}
}

// noAgent is an agent socket nobody answers on (the machine's own agent,
// if any, is not the test's).
func noAgent(t *testing.T) string { return filepath.Join(t.TempDir(), "no-agent.sock") }

// The request goes where the agent on this node reads it: with the agent
// answering on its socket, another --state-dir is refused before anything
// changes; the agent's own is taken.
func TestAgentLeaveWritesWhereTheAgentReads(t *testing.T) {
	config, plan := siteOfThree(t)
	agentDir := t.TempDir()
	socket := filepath.Join(agentDir, "agent.sock")
	agentState := filepath.Join(agentDir, "state")
	// The agent's own config is absent: it holds, and answers on its socket.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- agent.New(agent.Options{ConfigPath: filepath.Join(agentDir, "config", "cluster.json"), StateDir: agentState,
			SocketPath: socket, ConfigPollInterval: 50 * time.Millisecond}).Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := localapi.Get[agent.State](ctx, socket, localapi.PathAgent); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent's socket never answered")
		}
		time.Sleep(20 * time.Millisecond)
	}
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	leave := func(state string) (string, error) {
		return runCLI(t, auditLog, "agent", "leave", "--config", config, "--state-dir", state, "--agent-socket", socket,
			"--yes", "--force", "--confirm", "node-c")
	}
	other := stateOf(config)
	out, err := leave(other)
	if err == nil || !strings.Contains(err.Error(), "keeps its records in "+agentState) {
		t.Fatalf("a leave into another state directory than the agent's: %v\n%s", err, out)
	}
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Errorf("the refused leave touched %s: %v", other, err)
	}
	// The running agent moves its own records (from beside its own
	// config); the CLI leaves that to it and takes nothing from beside
	// the config it was given.
	old := oldRecordBesideConfig(t, config, plan.ClusterID)
	if out, err := leave(agentState); err != nil {
		t.Fatalf("a leave into the agent's state directory: %v\n%s", err, out)
	}
	if _, err := os.Stat(formation.Records{Dir: agentState}.FormedMarkerFile()); !os.IsNotExist(err) {
		t.Errorf("the leave took %s into the running agent's state directory: %v", old, err)
	}
	req, ok, err := formation.ReadLeaveRequest(formation.Records{Dir: agentState}.LeaveRequestFile())
	if !ok || err != nil || req.NodeName != "node-c" || req.ClusterID != plan.ClusterID {
		t.Errorf("leave request %+v ok=%v err=%v", req, ok, err)
	}
}

// oldRecordBesideConfig puts a formed marker where agents before the
// state directory kept it, beside the config, and returns its path.
func oldRecordBesideConfig(t *testing.T, config, clusterID string) string {
	t.Helper()
	old := filepath.Join(filepath.Dir(config), "formed.json")
	if err := formation.MarkFormed(old, formation.FormedMarker{ClusterID: clusterID, NodeName: "node-c", How: "formed", At: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	return old
}

// A leave not confirmed changes nothing: no state directory made, no
// record of an older agent taken from beside the config.
func TestAgentLeaveDeclinedChangesNothing(t *testing.T) {
	config, plan := siteOfThree(t)
	old := oldRecordBesideConfig(t, config, plan.ClusterID)
	state := stateOf(config)
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	// No --yes and no terminal: not confirmed.
	out, err := runCLI(t, auditLog, "agent", "leave", "--config", config, "--state-dir", state, "--agent-socket", noAgent(t), "--force", "--confirm", "node-c")
	if err == nil || !strings.Contains(err.Error(), "no terminal to confirm on") {
		t.Fatalf("a leave with nobody to confirm it: %v\n%s", err, out)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("the declined leave made or touched the state directory %s: %v\n%s", state, err, out)
	}
	if _, err := os.Stat(old); err != nil {
		t.Errorf("the declined leave took the record beside the config: %v", err)
	}
}

// An agent that answers on its socket without its state directory is
// older than this sitecon: it reads its records beside its config, so a
// request written in any state directory would never be read. Refused
// before anything changes.
func TestAgentLeaveRefusesAnOlderAgent(t *testing.T) {
	config, plan := siteOfThree(t)
	old := oldRecordBesideConfig(t, config, plan.ClusterID)
	socket := filepath.Join(t.TempDir(), "agent.sock")
	srv, err := localapi.Serve(socket, map[string]func() any{
		localapi.PathAgent: func() any { return agent.State{Phase: agent.PhaseStarting, Since: time.Now()} },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	state := stateOf(config)
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	out, err := runCLI(t, auditLog, "agent", "leave", "--config", config, "--state-dir", state, "--agent-socket", socket, "--yes", "--force", "--confirm", "node-c")
	if err == nil || !strings.Contains(err.Error(), "restart the agent first") {
		t.Fatalf("a leave beside an agent that does not say its state directory: %v\n%s", err, out)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("the refused leave made or touched %s: %v", state, err)
	}
	if _, err := os.Stat(old); err != nil {
		t.Errorf("the refused leave took the record beside the config: %v", err)
	}
}

// Issue 36 C: an agent run with --no-bootstrap answers on its socket in
// its own phase ("no-bootstrap") and says no state directory: by design,
// not for being older. It did not start k3s, keeps no record of the
// node's place in a cluster and reads no leave request, so a leave has
// nobody to stop k3s after it removed the member: refused with that
// reason and what to do instead, before anything changes, with or
// without a cluster config on the node.
func TestAgentLeaveBesideANoBootstrapAgent(t *testing.T) {
	config, plan := siteOfThree(t)
	old := oldRecordBesideConfig(t, config, plan.ClusterID)
	agentDir := t.TempDir()
	socket := filepath.Join(agentDir, "agent.sock")
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		// As `sitecon agent --no-bootstrap --node-name node-c` runs, against
		// a cluster that does not answer here (loopback, nothing listens).
		done <- agent.New(agent.Options{NoBootstrap: true, NodeName: "node-c", StateDir: filepath.Join(agentDir, "state"), SocketPath: socket,
			RESTConfig: &rest.Config{Host: "https://127.0.0.1:1"}, Etcd: nodestate.EtcdAccess{Endpoint: "http://127.0.0.1:1"}}).Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := localapi.Get[agent.State](ctx, socket, localapi.PathAgent)
		if err == nil && st.Phase == agent.PhaseExternal {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the --no-bootstrap agent never said so on its socket: %+v, %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	state := stateOf(config)
	for name, args := range map[string][]string{
		"with its state directory given": {"--config", config, "--state-dir", state},
		"without":                        {"--config", config},
		"with no cluster config":         {"--config", filepath.Join(t.TempDir(), "cluster.json"), "--state-dir", state},
	} {
		t.Run(name, func(t *testing.T) {
			auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
			out, err := runCLI(t, auditLog, append(append([]string{"agent", "leave"}, args...),
				"--agent-socket", socket, "--yes", "--force", "--confirm", "node-c")...)
			if err == nil || strings.Contains(err.Error(), "older than this sitecon") ||
				!strings.Contains(err.Error(), "the agent on this node ("+socket+") runs --no-bootstrap") ||
				!strings.Contains(err.Error(), "sitecon node remove node-c") {
				t.Fatalf("a leave beside a --no-bootstrap agent: %v\n%s", err, out)
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Errorf("the refused leave made or touched %s: %v", state, err)
			}
			if _, err := os.Stat(old); err != nil {
				t.Errorf("the refused leave took the record beside the config: %v", err)
			}
		})
	}
}

// With no agent answering, the state directory is only a guess unless it
// is given: the default is refused, nothing written; given, it is taken.
func TestAgentLeaveWithoutAnAgentNeedsTheStateDirectoryGiven(t *testing.T) {
	config, _ := siteOfThree(t)
	if _, err := os.Stat(formation.DefaultStateDir); os.IsNotExist(err) {
		// Should the refusal break, what it wrote on this machine goes.
		t.Cleanup(func() { _ = os.RemoveAll(formation.DefaultStateDir) })
	}
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	out, err := runCLI(t, auditLog, "agent", "leave", "--config", config, "--agent-socket", noAgent(t), "--yes", "--force", "--confirm", "node-c")
	if err == nil || !strings.Contains(err.Error(), "give --state-dir") {
		t.Fatalf("a leave with no agent answering and no --state-dir: %v\n%s", err, out)
	}
	if _, err := os.Stat(formation.Records{Dir: formation.DefaultStateDir}.LeaveRequestFile()); err == nil {
		t.Errorf("a leave request is in %s", formation.DefaultStateDir)
	}
	state := stateOf(config)
	if out, err := runCLI(t, auditLog, "agent", "leave", "--config", config, "--state-dir", state, "--agent-socket", noAgent(t), "--yes", "--force", "--confirm", "node-c"); err != nil {
		t.Fatalf("a leave with --state-dir given: %v\n%s", err, out)
	}
	if _, ok, err := formation.ReadLeaveRequest(formation.Records{Dir: state}.LeaveRequestFile()); !ok || err != nil {
		t.Errorf("no leave request in the state directory given: ok=%v err=%v", ok, err)
	}
}

// Issue 36 B: with the cluster read, a leave's refusals are final, as a
// remove's are: --force accepts its warnings (the cluster no longer
// tolerating a failure, a pinned app stopping), never a refusal (the last
// copy of a volume, etcd's quorum lost or unknown, the seed).
func TestLeaveForceAcceptsWarningsNotRefusals(t *testing.T) {
	lastCopy := "node-c holds the only up-to-date copy of vol-1: replica stopped, volume detached; removing node-c would discard it"
	tolerance := "after removing node-c: 2 etcd members, 2 healthy, quorum needs 2: the cluster no longer tolerates a failure"
	for name, tc := range map[string]struct {
		p     safety.Preflight
		force bool
		stops bool
	}{
		"nothing in the way":              {p: safety.Preflight{Purpose: safety.PurposeLeave}},
		"a warning stops it":              {p: safety.Preflight{Warnings: []string{tolerance}}, stops: true},
		"--force accepts a warning":       {p: safety.Preflight{Warnings: []string{tolerance}}, force: true},
		"a refusal stops it":              {p: safety.Preflight{Refusals: []string{lastCopy}}, stops: true},
		"--force does not take a refusal": {p: safety.Preflight{Refusals: []string{lastCopy}, Warnings: []string{tolerance}}, force: true, stops: true},
	} {
		t.Run(name, func(t *testing.T) {
			stops := leaveStops(tc.p, tc.force)
			if (len(stops) > 0) != tc.stops {
				t.Fatalf("leaveStops(%+v, force %v) = %q; want stopped: %v", tc.p, tc.force, stops, tc.stops)
			}
			for _, r := range tc.p.Refusals {
				if !slices.Contains(stops, r) {
					t.Errorf("the refusal %q is not among the reasons given: %q", r, stops)
				}
			}
		})
	}
}
