package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/applogs"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// startAppLogsAgent starts `sitecon agent --app-logs-dir DIR/applogs` for
// node, its state under dir; it is killed when the test ends.
func startAppLogsAgent(t *testing.T, site *sitebox.TestSite, node, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(sitecon, "agent", "--no-bootstrap", "--node-name", node, "--kubeconfig", site.Kubeconfig(),
		"--app-logs-dir", filepath.Join(dir, "applogs"), "--state-dir", filepath.Join(dir, "state"), "--socket", filepath.Join(dir, "agent.sock"),
		"--metrics-addr", "", "--log-file", filepath.Join(site.Dir, "logs", "agent-"+t.Name()+".log"), "--log-level", "debug")
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+dir)
	stderr, err := os.OpenFile(filepath.Join(site.Dir, "logs", "agent-"+t.Name()+".stderr"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// Issue 21 item 1, the agent: a container that restarts has its previous
// instance's log finished and its new one's started, each line written
// out once, tagged with the instance that wrote it: when the kubelet
// reports the restart at once, when it reports it only after the agent
// has opened a stream on the new instance (the API still showing the old
// one), and across an agent killed after that, with a container that
// logged its first instance's lines and restarted while the agent was
// down.
func TestAgentCollectsAppLogsAcrossContainerRestarts(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	const node, container = "node-a", "main"
	const sidecar = "sidecar"
	pod := appPod(t, cs, "restarts-6c9d-x1", "restarts", node, false, container, sidecar).Name
	line := func(instance, i int) string { return fmt.Sprintf("instance %d line %03d", instance, i) }
	writeTo := func(container string, instance, from, to int) {
		t.Helper()
		var lines []string
		for i := from; i < to; i++ {
			lines = append(lines, line(instance, i))
		}
		if err := site.AppendContainerLog(ctx, kube.AppNamespace, pod, container, lines...); err != nil {
			t.Fatal(err)
		}
	}
	write := func(instance, from, to int) { t.Helper(); writeTo(container, instance, from, to) }
	restartOf := func(container string, how sitebox.ContainerRestart) {
		t.Helper()
		if err := site.RestartContainer(ctx, kube.AppNamespace, pod, container, how); err != nil {
			t.Fatal(err)
		}
	}
	restart := func(how sitebox.ContainerRestart) { t.Helper(); restartOf(container, how) }
	dir := t.TempDir()
	logsDir := filepath.Join(dir, "applogs")
	// Waits until container's line is out, and returns what is.
	waitIn := func(container, line string) []applogs.Record {
		t.Helper()
		return until(t, 60*time.Second, fmt.Sprintf("%s's %q collected", container, line), func() ([]applogs.Record, bool) {
			got, _ := collected(t, logsDir)
			recs := got[pod+"/"+container]
			return recs, slices.ContainsFunc(recs, func(r applogs.Record) bool { return r.Line == line })
		}, func(recs []applogs.Record) string { return describeRecords(recs) })
	}
	waitFor := func(line string) []applogs.Record { t.Helper(); return waitIn(container, line) }

	write(0, 0, 10)
	agent := startAppLogsAgent(t, site, node, dir)
	waitFor(line(0, 9))
	// The old instance's last lines, then at once the restart, reported
	// at once: its follow ends before it sent them, perhaps.
	write(0, 10, 20)
	restart(sitebox.ContainerRestart{})
	write(1, 0, 10)
	waitFor(line(1, 9))
	// Again, last lines and all, reported late: the agent's next stream
	// reads the new instance while the API says the old one runs.
	write(1, 10, 20)
	restart(sitebox.ContainerRestart{ReportWhenFollowed: true})
	write(2, 0, 10)
	waitFor(line(2, 9))
	// The agent dies and comes back; the new instance logs on.
	if err := agent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = agent.Wait()
	// While it is down, the sidecar, which had logged nothing, logs and
	// restarts: the agent never read a line of its first instance.
	writeTo(sidecar, 0, 0, 5)
	restartOf(sidecar, sitebox.ContainerRestart{})
	writeTo(sidecar, 1, 0, 5)
	startAppLogsAgent(t, site, node, dir)
	write(2, 10, 20)
	got := waitFor(line(2, 19))
	side := waitIn(sidecar, line(1, 4))

	var want []string
	for instance := range 3 {
		for i := range 20 {
			want = append(want, fmt.Sprintf("%d: %s", instance, line(instance, i)))
		}
	}
	if have := tagged(got); strings.Join(have, "\n") != strings.Join(want, "\n") {
		t.Errorf("collected %d lines, want each of %d once, in order, tagged with its instance's restart count; got:\n%s", len(have), len(want), strings.Join(have, "\n"))
	}
	want = want[:0]
	for instance := range 2 {
		for i := range 5 {
			want = append(want, fmt.Sprintf("%d: %s", instance, line(instance, i)))
		}
	}
	if have := tagged(side); strings.Join(have, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s: collected %d lines, want each of %d once, in order, tagged with its instance's restart count; got:\n%s", sidecar, len(have), len(want), strings.Join(have, "\n"))
	}
}

// tagged is each record as "RESTARTS: LINE".
func tagged(recs []applogs.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%d: %s", r.Restarts, r.Line))
	}
	return out
}

func describeRecords(recs []applogs.Record) string {
	return fmt.Sprintf("%d lines:\n%s", len(recs), strings.Join(tagged(recs), "\n"))
}
