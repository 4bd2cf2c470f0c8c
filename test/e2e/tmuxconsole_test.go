package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/test/prereq"
	"github.com/sitecon/sitecon/views"
)

// tmuxConsole runs the console in a detached tmux session, as a technician
// on an 80x24 terminal would see it.
type tmuxConsole struct {
	t       *testing.T
	session string
}

// startConsole runs the console on a colour terminal, whatever the
// environment of the test says about colour.
func startConsole(t *testing.T, args ...string) *tmuxConsole {
	t.Helper()
	return startConsoleWith(t, []string{"-u", "NO_COLOR"}, args...)
}

// startConsoleNoColor runs the console as a terminal with NO_COLOR set
// shows it: the selected row is marked "> " and the current tab bracketed.
func startConsoleNoColor(t *testing.T, args ...string) *tmuxConsole {
	t.Helper()
	return startConsoleWith(t, []string{"NO_COLOR=1"}, args...)
}

// startCommand runs a sitecon command on a terminal (its questions need
// one) and keeps the pane after it ends, with "exited N" as its last line.
func startCommand(t *testing.T, args ...string) *tmuxConsole {
	t.Helper()
	// The joined line is a shell command: what follows sitecon's arguments
	// runs once sitecon has exited.
	return startConsoleWith(t, []string{"-u", "NO_COLOR"}, append(args, ";", "echo", "exited", "$?;", "sleep", "3600")...)
}

func startConsoleWith(t *testing.T, colourEnv []string, args ...string) *tmuxConsole {
	t.Helper()
	_, err := exec.LookPath("tmux")
	prereq.Need(t, err == nil, "the console end-to-end test needs tmux")
	session := fmt.Sprintf("sitecon-e2e-%d", time.Now().UnixNano())
	// One shell command: tmux runs it with sh -c. The tmux server's own
	// environment (CI's, or an earlier session's) must not decide colour.
	cmdline := append([]string{"env", "-u", "CLICOLOR", "-u", "CLICOLOR_FORCE"}, colourEnv...)
	cmdline = append(cmdline, "HOME="+t.TempDir(), "KUBECONFIG=", "TERM=xterm-256color", sitecon)
	// The machine's own audit log (root-owned, under /var/log) is neither
	// read nor written by a test that does not name one: its records would
	// show on the events screen, and a demo's would change what a test sees.
	if !slices.Contains(args, "--audit-log") {
		end := slices.Index(args, ";")
		if end < 0 {
			end = len(args)
		}
		args = slices.Insert(slices.Clone(args), end, "--audit-log", filepath.Join(t.TempDir(), "audit.jsonl"))
	}
	cmdline = append(cmdline, args...)
	cmd := exec.Command("tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", strings.Join(cmdline, " "))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "kill-session", "-t", session).Run() })
	return &tmuxConsole{t: t, session: session}
}

func (c *tmuxConsole) keys(keys ...string) {
	c.t.Helper()
	if out, err := exec.Command("tmux", append([]string{"send-keys", "-t", c.session}, keys...)...).CombinedOutput(); err != nil {
		c.t.Fatalf("send-keys: %v\n%s", err, out)
	}
}

func (c *tmuxConsole) screen() string {
	out, err := exec.Command("tmux", "capture-pane", "-p", "-t", c.session).CombinedOutput()
	if err != nil {
		return ""
	}
	return string(out)
}

// waitScreen waits until the screen satisfies cond, with the cluster
// read whole: the overview shows the nodes and the VIP before the pods
// and volumes are read (views.ReadingTheCluster), and a test's next step
// (a screen of pods, an action) needs them.
func (c *tmuxConsole) waitScreen(within time.Duration, what string, cond func(string) bool) string {
	c.t.Helper()
	return until(c.t, within, what, func() (string, bool) {
		s := c.screen()
		return s, cond(s) && !strings.Contains(s, views.ReadingTheCluster)
	}, func(s string) string { return "screen:\n" + s })
}
