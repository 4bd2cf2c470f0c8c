package cmd

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/doctor"
)

// A mistyped command line says what was wrong, how the command is used,
// and, for a misspelt command, what was probably meant; it never runs
// anything and never exits 0 (issue 20: `sitecon cordon` with no node
// printed no usage line, an unknown command got no "did you mean", and
// `sitecon node remov` printed the help and succeeded).
func TestMistypedCommandLines(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"cordn"}, []string{`unknown command "cordn"`, "did you mean", "cordon"}},
		{[]string{"cordon"}, []string{"accepts 1 arg", "usage: sitecon cordon NODE"}},
		{[]string{"drain", "node-a", "node-b"}, []string{"usage: sitecon drain NODE"}},
		{[]string{"node", "remov", "node-c"}, []string{`unknown command "remov"`, "did you mean", "remove"}},
		{[]string{"drain", "--bogus", "node-a"}, []string{"unknown flag: --bogus", "usage: sitecon drain NODE"}},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, err := runCLI(t, filepath.Join(t.TempDir(), "audit.jsonl"), c.args...)
			if err == nil {
				t.Fatalf("succeeded; printed:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error %q does not say %q", err, w)
				}
			}
		})
	}
}

// sitecon status's usage errors exit 3, not 1 (1 says the cluster needs
// attention); its help documents the codes. The cluster's codes (0, 1, 2)
// are tested against sitebox (test/e2e: TestStatusExitCodes).
func TestStatusUsageExitCode(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--bogus"},
		{"status", "extra"},
		{"status", "-o", "xml"},
		{"status", "--kubeconfig", filepath.Join(t.TempDir(), "none")},
	} {
		root := newRoot()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(args)
		cmd, err := root.ExecuteC()
		if code := exitCode(cmd, err); err == nil || code != 3 {
			t.Errorf("%v: exit %d (%v), want 3", args, code, err)
		}
	}
	// Other commands keep exit status 1 for their errors.
	root := newRoot()
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"cordon"})
	if cmd, err := root.ExecuteC(); exitCode(cmd, err) != 1 {
		t.Errorf("sitecon cordon without a node: exit %d, want 1", exitCode(cmd, err))
	}
	var help strings.Builder
	root = newRoot()
	root.SetOut(&help)
	root.SetArgs([]string{"status", "--help"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Exit status:", "0  healthy", "1  something needs attention", "2  the cluster API could not be read", "3  usage"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("status --help does not say %q:\n%s", want, help.String())
		}
	}
}

// sitecon doctor and sitecon status are read by the same scripts: one exit
// status means one thing for both (0 nothing to do, 1 something needs
// attention, 2 the cluster API could not be read, 3 usage). Before, the
// doctor's 2 was "an error found" and its 3 "API unreadable", the
// opposite of status's.
func TestDoctorAndStatusExitCodesMeanTheSame(t *testing.T) {
	for _, c := range []struct {
		what           string
		doctor, status int
	}{
		{"attention", doctor.ExitAttention, statusUnhealthy},
		{"the cluster API unreadable", doctor.ExitAPIUnreachable, statusUnreadable},
	} {
		if c.doctor != c.status {
			t.Errorf("%s: doctor exits %d, status %d", c.what, c.doctor, c.status)
		}
	}
	for _, worst := range []doctor.Severity{doctor.Warn, doctor.Error} {
		if got := (doctor.Report{Worst: worst}).ExitStatus(); got != statusUnhealthy {
			t.Errorf("doctor with a finding of %s: exit %d, want %d as status's problems", worst, got, statusUnhealthy)
		}
	}
	for _, args := range [][]string{{"doctor", "--bogus"}, {"doctor", "extra"}, {"doctor", "-o", "xml"}} {
		root := newRoot()
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetArgs(args)
		cmd, err := root.ExecuteC()
		if code := exitCode(cmd, err); err == nil || code != statusUsage {
			t.Errorf("%v: exit %d (%v), want %d", args, code, err, statusUsage)
		}
	}
}

// `sitecon agent --gc-percent 0` (or below: Go's GOGC=off) is refused
// before the agent does anything: no log file, no state.
func TestAgentRefusesAGCPercentBelowOne(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "agent.log")
	for _, p := range []string{"0", "-1"} {
		// --no-bootstrap without --node-name: were the target taken, the
		// agent would stop at that instead, having made its log.
		_, err := runCLI(t, filepath.Join(dir, "audit.jsonl"), "agent", "--no-bootstrap", "--gc-percent", p, "--log-file", logFile,
			"--state-dir", filepath.Join(dir, "state"), "--config", filepath.Join(dir, "cluster.json"))
		if err == nil || !strings.Contains(err.Error(), "give at least 1") {
			t.Errorf("--gc-percent %s: %v", p, err)
		}
	}
	for _, made := range []string{logFile, filepath.Join(dir, "state")} {
		if _, err := os.Stat(made); !os.IsNotExist(err) {
			t.Errorf("a refused --gc-percent made %s (%v)", made, err)
		}
	}
}

// A VM's console off loopback is served only when asked for in words: it
// has no password. Refused before anything is read from the cluster (no
// kubeconfig here: the refusal comes first).
func TestVNCOffLoopbackNeedsExpose(t *testing.T) {
	for _, addr := range []string{"0.0.0.0", "::", "10.1.2.3"} {
		_, err := runCLI(t, filepath.Join(t.TempDir(), "audit.jsonl"), "vnc", "hmi", "--address", addr, "--kubeconfig", filepath.Join(t.TempDir(), "none"))
		if err == nil || !strings.Contains(err.Error(), "--expose") || !strings.Contains(err.Error(), "no password") {
			t.Errorf("vnc --address %s: %v, want a refusal naming --expose", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1", "::1", "localhost"} {
		if loopbackAddress(addr) != true {
			t.Errorf("%s is loopback", addr)
		}
	}
	_, err := runCLI(t, filepath.Join(t.TempDir(), "audit.jsonl"), "vnc", "hmi", "--address", "0.0.0.0", "--expose", "--kubeconfig", filepath.Join(t.TempDir(), "none"))
	if err == nil || strings.Contains(err.Error(), "--expose") {
		t.Errorf("vnc --expose: %v, want it to go on (and fail on the missing kubeconfig)", err)
	}
}

// The agent's VM consoles off loopback need --vnc-expose, refused before
// the agent does anything; with it, the agent goes on (to the next flag it
// checks, here a --gc-percent of 0).
func TestAgentVNCOffLoopbackNeedsExpose(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-config.json")
	for _, addr := range []string{"0.0.0.0", "10.1.2.3"} {
		_, err := runCLI(t, filepath.Join(t.TempDir(), "audit.jsonl"), "agent", "--config", missing, "--vnc-address", addr)
		if err == nil || !strings.Contains(err.Error(), "--vnc-expose") {
			t.Errorf("agent --vnc-address %s: %v, want a refusal naming --vnc-expose", addr, err)
		}
	}
	_, err := runCLI(t, filepath.Join(t.TempDir(), "audit.jsonl"), "agent", "--config", missing, "--vnc-address", "0.0.0.0", "--vnc-expose", "--gc-percent", "0")
	if err == nil || !strings.Contains(err.Error(), "--gc-percent") {
		t.Errorf("agent --vnc-expose: %v, want it to go on (and stop at --gc-percent 0)", err)
	}
}
