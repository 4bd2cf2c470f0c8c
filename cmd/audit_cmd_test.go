package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/audit/audittest"
)

// Safety rule 5 for the commands that only print: a join bundle carries
// the cluster token, so handing one out is gated and recorded.

// runCLI runs the CLI in-process with its own audit log; the cluster is
// out of reach (no kubeconfig).
func runCLI(t *testing.T, auditLog string, args ...string) (stdout string, err error) {
	t.Helper()
	root := newRoot()
	var out, errOut strings.Builder
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append(args, "--kubeconfig", filepath.Join(t.TempDir(), "none"), "--audit-log", auditLog))
	err = root.Execute()
	return out.String(), err
}

func joinArgs(config string) []string {
	return []string{"--config", config, "--state-dir", stateOf(config), "--role", "server", "--node-name", "node-d",
		"--node-uuid", "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "--node-ip", "10.250.0.5"}
}

// noToken fails the test if the log holds the cluster token.
func noToken(t *testing.T, auditLog, config string) {
	t.Helper()
	v, err := formation.LoadClusterConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(auditLog)
	if v.Token == "" || strings.Contains(string(raw), string(v.Token)) {
		t.Fatalf("the audit log holds the cluster token:\n%s", raw)
	}
}

// Under --readonly (or SITECON_READONLY) join-info and node add show
// nothing, and the refusal is recorded, without the token.
func TestJoinInfoReadOnlyRefusedAndRecorded(t *testing.T) {
	config, _ := siteOfThree(t)
	for _, cmd := range [][]string{{"join-info"}, {"node", "add"}} {
		auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
		out, err := runCLI(t, auditLog, append(append(cmd, "--readonly"), joinArgs(config)...)...)
		if err == nil || !strings.Contains(err.Error(), "read-only") || out != "" {
			t.Fatalf("%s --readonly: %v\n%s", cmd, err, out)
		}
		if got := audittest.Outcomes(t, auditLog); !strings.HasSuffix(got, ":refused") {
			t.Fatalf("%s --readonly recorded %q, want its refusal", cmd, got)
		}
		noToken(t, auditLog, config)
	}
	t.Setenv("SITECON_READONLY", "1")
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	if out, err := runCLI(t, auditLog, append([]string{"join-info"}, joinArgs(config)...)...); err == nil || out != "" {
		t.Fatalf("join-info under SITECON_READONLY: %v\n%s", err, out)
	}
}

// join-info shows the bundle only once who asked is on disk (intent, then
// outcome); a log it cannot write is refused with nothing shown.
func TestJoinInfoRecordedWithoutToken(t *testing.T) {
	config, _ := siteOfThree(t)
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	out, err := runCLI(t, auditLog, append([]string{"join-info"}, joinArgs(config)...)...)
	if err != nil || !strings.Contains(out, "sitecon form --join -") {
		t.Fatalf("join-info: %v\n%s", err, out)
	}
	if got := audittest.Outcomes(t, auditLog); got != "join-info:intent join-info:done" {
		t.Fatalf("join-info recorded %q", got)
	}
	noToken(t, auditLog, config)

	before, _ := os.Stat("/dev/null")
	out, err = runCLI(t, "/dev/null", append([]string{"join-info"}, joinArgs(config)...)...)
	if after, _ := os.Stat("/dev/null"); before != nil && after.Mode() != before.Mode() {
		_ = os.Chmod("/dev/null", before.Mode().Perm())
		t.Errorf("/dev/null's mode changed to %v", after.Mode())
	}
	if err == nil || out != "" {
		t.Fatalf("join-info with /dev/null as its audit log: %v\n%s", err, out)
	}
}

// sitecon form records a failure as a failure (the outcome is the error
// the command returns).
func TestFormFailureRecordedAsFailed(t *testing.T) {
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	if _, err := runCLI(t, auditLog, "form", "--join", "sitecon-join.v1.garbage", "--dir", t.TempDir(), "--state-dir", t.TempDir()); err == nil {
		t.Fatal("a bad bundle was taken")
	}
	if got := audittest.Outcomes(t, auditLog); got != "join:failed" {
		t.Fatalf("a failed join recorded as %q", got)
	}
}

// What a command prints on failure quotes the cluster and files: cleaned,
// its lines kept.
func TestErrorsReachTheTerminalClean(t *testing.T) {
	var b strings.Builder
	printError(&b, errString("drain node-b refused:\n  - pod \x1b]0;pwned\x07x\x1b[2J is pinned"))
	if got, want := b.String(), "sitecon: drain node-b refused:\n  - pod x is pinned\n"; got != want {
		t.Fatalf("printed %q, want %q", got, want)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
