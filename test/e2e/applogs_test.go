package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/agent/applogs"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/streams"
	"github.com/sitecon/sitecon/test/sitebox"
)

// collected reads the app-logs directory: per pod/container, its lines in
// the order written.
func collected(t testing.TB, dir string) (map[string][]applogs.Record, error) {
	t.Helper()
	files, err := applogs.Files(dir)
	if err != nil {
		return nil, err
	}
	out := map[string][]applogs.Record{}
	for _, path := range files {
		f, err := os.Open(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var r applogs.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
			}
			out[r.Pod+"/"+r.Container] = append(out[r.Pod+"/"+r.Container], r)
		}
		f.Close()
	}
	return out, nil
}

// Issue 21 item 1, the agent: with --app-logs-dir the agent writes its
// node's apps' log lines (each container of a container app; a VM's
// console log) as JSON lines, and an agent killed (SIGKILL) mid-stream and
// started again loses none and doubles none, lines written in the same
// instant included.
func TestAgentCollectsAppLogsAcrossAKill(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	ctx := context.Background()
	const node = "node-a"
	app := appPod(t, cs, "collect-5d8f-k2", "collect", node, false, "main", "sidecar")
	vm := appPod(t, cs, "virt-launcher-collectvm-q7x", "collectvm", node, true, "compute", streams.GuestConsoleLogContainer)
	// On another node: not this agent's.
	appPod(t, cs, "elsewhere-1", "elsewhere", "node-b", false, "main")
	if err := site.AppendContainerLog(ctx, kube.AppNamespace, "elsewhere-1", "main", "not mine"); err != nil {
		t.Fatal(err)
	}
	if err := site.AppendContainerLog(ctx, kube.AppNamespace, vm.Name, "compute", "launcher noise"); err != nil {
		t.Fatal(err)
	}

	// Each container's first burst is on its kubelet before the agent
	// starts: sitebox's kubelet (kwok) serves a container's file only once
	// it has seen the pod's log mapping, which the first write makes, and
	// a follow opened before that reads an empty default forever (a real
	// kubelet always serves the container's own file).
	const perContainer = 240
	writes := []struct{ pod, container string }{
		{app.Name, "main"}, {app.Name, "sidecar"}, {vm.Name, streams.GuestConsoleLogContainer},
	}
	burst := func(container string, from int) []string {
		var lines []string
		for j := from; j < from+4; j++ {
			lines = append(lines, fmt.Sprintf("%s line %04d", container, j))
		}
		return lines
	}
	for _, w := range writes {
		if err := site.AppendContainerLogAt(ctx, kube.AppNamespace, w.pod, w.container, time.Now(), burst(w.container, 0)...); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	logsDir := filepath.Join(dir, "applogs")
	agentCmd := func() *exec.Cmd {
		cmd := exec.Command(sitecon, "agent", "--no-bootstrap", "--node-name", node, "--kubeconfig", site.Kubeconfig(),
			"--app-logs-dir", logsDir, "--state-dir", filepath.Join(dir, "state"), "--socket", filepath.Join(dir, "agent.sock"),
			"--metrics-addr", "", "--log-file", filepath.Join(site.Dir, "logs", "agent-applogs.log"), "--log-level", "debug")
		cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+dir)
		stderr, err := os.OpenFile(filepath.Join(site.Dir, "logs", "agent-applogs.stderr"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer stderr.Close()
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	running := agentCmd()
	t.Cleanup(func() { _ = running.Process.Kill(); _ = running.Wait() })

	// The writers: each container gets the rest of its lines in bursts,
	// some bursts stamped with one instant.
	var wg sync.WaitGroup
	errs := make(chan error, len(writes))
	for _, w := range writes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 4; i < perContainer; i += 4 {
				lines := burst(w.container, i)
				var err error
				if (i/4)%3 == 0 {
					err = site.AppendContainerLogAt(ctx, kube.AppNamespace, w.pod, w.container, time.Now(), lines...)
				} else {
					err = site.AppendContainerLog(ctx, kube.AppNamespace, w.pod, w.container, lines...)
				}
				if err != nil {
					errs <- err
					return
				}
				time.Sleep(15 * time.Millisecond) // a paced writer, not a wait
			}
		}()
	}
	// Mid-stream: the agent dies at once, and comes back.
	until(t, 60*time.Second, "the agent writing lines out", func() (int, bool) {
		got, _ := collected(t, logsDir)
		return len(got[app.Name+"/main"]), len(got[app.Name+"/main"]) >= 40
	}, func(n int) string { return fmt.Sprintf("%d lines of main", n) })
	if err := running.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = running.Wait()
	killedAt, _ := collected(t, logsDir)
	running = agentCmd()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	want := func(container string) []string {
		var out []string
		for j := range perContainer {
			out = append(out, fmt.Sprintf("%s line %04d", container, j))
		}
		return out
	}
	got := until(t, 90*time.Second, "every line collected", func() (map[string][]applogs.Record, bool) {
		got, err := collected(t, logsDir)
		if err != nil {
			return nil, false
		}
		for _, w := range writes {
			if len(got[w.pod+"/"+w.container]) < perContainer {
				return got, false
			}
		}
		return got, true
	}, func(got map[string][]applogs.Record) string {
		var s []string
		for k, v := range got {
			s = append(s, fmt.Sprintf("%s: %d", k, len(v)))
		}
		return strings.Join(s, ", ")
	})
	if n := len(killedAt[app.Name+"/main"]); n >= perContainer {
		t.Fatalf("the agent was killed after every line was out (%d): not mid-stream", n)
	}
	for _, w := range writes {
		recs := got[w.pod+"/"+w.container]
		var lines []string
		for _, r := range recs {
			lines = append(lines, r.Line)
		}
		if strings.Join(lines, "\n") != strings.Join(want(w.container), "\n") {
			t.Errorf("%s/%s: %d lines, want each of %d once, in order; got:\n%s", w.pod, w.container, len(lines), perContainer, strings.Join(lines, "\n"))
		}
		wantApp := "collect"
		if w.pod == vm.Name {
			wantApp = "collectvm"
		}
		if r := recs[0]; r.AppName != wantApp || r.AppUUID == "" || r.Time.IsZero() || r.Container != w.container {
			t.Errorf("%s/%s: record %+v, want app %s with its UUID and the line's time", w.pod, w.container, r, wantApp)
		}
	}
	for k := range got {
		if strings.HasPrefix(k, "elsewhere-1/") || k == vm.Name+"/compute" {
			t.Errorf("collected %s: another node's app, or a VM's launcher log beside its console", k)
		}
	}
}

// procCPU is a process's user+system CPU time so far (/proc/PID/stat).
func procCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name: state is the 3rd; utime and
	// stime the 14th and 15th.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat field %q: %w", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100, nil // USER_HZ is 100 on Linux
}

// BenchmarkAppLogsCollectionCPU measures the agent's CPU for collecting
// app logs: five container apps on one node, each logging 20 lines a
// second for 15 s, collected by a `sitecon agent --app-logs-dir` whose
// CPU is read from /proc. Reports the agent's CPU milliseconds per app per
// minute of logging (the agent's idle work, its watch and leader lease,
// included).
func BenchmarkAppLogsCollectionCPU(b *testing.B) {
	site := sitebox.Shared(b)
	cs, err := kubernetes.NewForConfig(site.Config)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const node, apps, perSecond, seconds = "node-c", 5, 20, 15
	var pods []string
	for i := range apps {
		name := fmt.Sprintf("bench-logs-%d", i)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kube.LabelAppName: name}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Image: "registry.local/bench:1"}}}}
		if _, err := cs.CoreV1().Pods(kube.AppNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		defer func() {
			_ = cs.CoreV1().Pods(kube.AppNamespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}()
		pods = append(pods, name)
	}
	until(b, 30*time.Second, "the bench pods running", func() (int, bool) {
		running := 0
		for _, name := range pods {
			if p, err := cs.CoreV1().Pods(kube.AppNamespace).Get(ctx, name, metav1.GetOptions{}); err == nil && kube.PodReady(p) {
				running++
			}
		}
		return running, running == apps
	}, func(n int) string { return fmt.Sprintf("%d running", n) })
	for _, name := range pods {
		if err := site.AppendContainerLog(ctx, kube.AppNamespace, name, "main", "start"); err != nil {
			b.Fatal(err)
		}
	}
	dir := b.TempDir()
	cmd := exec.Command(sitecon, "agent", "--no-bootstrap", "--node-name", node, "--kubeconfig", site.Kubeconfig(),
		"--app-logs-dir", filepath.Join(dir, "applogs"), "--state-dir", filepath.Join(dir, "state"), "--socket", filepath.Join(dir, "agent.sock"),
		"--metrics-addr", "")
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+dir)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// Once every app's first line is out, the agent's start is behind.
	until(b, 60*time.Second, "the first lines collected", func() (int, bool) {
		got, _ := collected(b, filepath.Join(dir, "applogs"))
		return len(got), len(got) == apps
	}, func(n int) string { return fmt.Sprintf("%d apps collected", n) })
	before, err := procCPU(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	tick := time.NewTicker(time.Second / 5)
	for i := range seconds * 5 {
		<-tick.C
		for _, name := range pods {
			var lines []string
			for j := range perSecond / 5 {
				lines = append(lines, fmt.Sprintf("bench line %d.%d of %s: some ordinary application output", i, j, name))
			}
			if err := site.AppendContainerLog(ctx, kube.AppNamespace, name, "main", lines...); err != nil {
				b.Fatal(err)
			}
		}
	}
	tick.Stop()
	want := 1 + perSecond*seconds
	until(b, 60*time.Second, "every line collected", func() (int, bool) {
		got, _ := collected(b, filepath.Join(dir, "applogs"))
		least := want
		for _, name := range pods {
			least = min(least, len(got[name+"/main"]))
		}
		return least, least == want
	}, func(n int) string { return fmt.Sprintf("%d of %d lines for the slowest app", n, want) })
	b.StopTimer()
	after, err := procCPU(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	perAppMinute := float64((after - before).Milliseconds()) / apps * 60 / seconds
	b.ReportMetric(perAppMinute, "cpu-ms/app/min")
	b.ReportMetric(float64(perSecond), "lines/s/app")
}
