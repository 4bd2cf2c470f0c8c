//go:build faults

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// churnPods is how many pods the churn test makes and deletes.
const churnPods = 5000

// TestChurnLeavesNoGrowth (issue 23 §3): 5,000 pods are created on the
// three nodes and deleted again while the console and the three agents
// run. Afterwards the agents' goroutines and heap (they run in this
// process, beside sitebox's simulators) and the console's resident memory
// are back near where they were before: a leak per pod seen would leave
// thousands of goroutines or tens of MiB behind. The bounds are logged
// with what was measured.
func TestChurnLeavesNoGrowth(t *testing.T) {
	site, err := sitebox.StartTestSite(sitebox.TestOptions(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(site.Stop)
	site.WaitSettled(t, 90*time.Second)
	logDir := t.TempDir()
	nodes := []string{"node-a", "node-b", "node-c"}
	agents := map[string]*siteAgent{}
	for _, n := range nodes {
		agents[n] = startSiteAgent(t, site, n, t.TempDir(), logDir)
	}
	stopAgentsWithTest(t, agents)
	t.Cleanup(func() { logAgentsOnFailure(t, logDir, nodes...) })
	auditLog := filepath.Join(t.TempDir(), "audit.jsonl")
	c := startConsole(t, "--kubeconfig", site.Kubeconfig(), "--audit-log", auditLog)
	c.waitScreen(60*time.Second, "the console live", func(s string) bool { return strings.Contains(s, "3/3 ready") })
	consolePID := until(t, 10*time.Second, "the console's process", func() (int, bool) {
		pid := processWithArg(auditLog)
		return pid, pid != 0
	}, func(int) string { return "no process names " + auditLog })

	// What the pods' churn is measured against: the agents idle (no pass
	// running or due, no request made for a second).
	settled := func(what string) {
		t.Helper()
		if last, ok := waitSettledFor(agents, 2*time.Minute, 0, nil); !ok {
			t.Fatalf("the agents settled %s: not within 2m; %s", what, last)
		}
	}
	settled("at the start")
	g0, h0 := goroutinesAndHeap()
	r0 := residentKiB(consolePID)
	t.Logf("before: %d goroutines, heap %.1f MiB; console RSS %.1f MiB", g0, float64(h0)/(1<<20), float64(r0)/1024)

	cfg := *site.Config
	cfg.QPS, cfg.Burst = 500, 1000
	cs, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Where the agents watch the pods, and the overview counts them.
	const ns = kube.AppNamespace
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < churnPods; i += 8 {
				p := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: "churn-" + strconv.Itoa(i), Labels: map[string]string{"churn": "true"}},
					Spec: corev1.PodSpec{NodeName: nodes[i%len(nodes)], Containers: []corev1.Container{{Name: "c", Image: "registry.local/churn:1"}},
						TerminationGracePeriodSeconds: ptr.To[int64](0)},
				}
				if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("%d pods created in %.1fs", churnPods, time.Since(began).Seconds())
	settled("with the pods")
	// One request removes them all; on a loaded machine the API server may
	// cut it off mid-way (an HTTP/2 stream reset, the deletions going on):
	// asked again while any is left.
	deleteChurn := func() error {
		return cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{LabelSelector: "churn=true"})
	}
	lastDelete := deleteChurn()
	until(t, 5*time.Minute, "the churned pods gone", func() (int, bool) {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1, LabelSelector: "churn=true"})
		if err != nil {
			return -1, false
		}
		if len(l.Items) > 0 && lastDelete != nil {
			t.Logf("the collection's removal was cut off (%v): asking again", lastDelete)
			lastDelete = deleteChurn()
		}
		return len(l.Items), len(l.Items) == 0
	}, func(n int) string { return fmt.Sprintf("%d left (last removal: %v)", n, lastDelete) })
	t.Logf("created and deleted in %.1fs", time.Since(began).Seconds())
	settled("after the pods")
	c.waitScreen(time.Minute, "the console live", func(s string) bool { return strings.Contains(s, "3/3 ready") })

	g1, h1 := goroutinesAndHeap()
	r1 := residentKiB(consolePID)
	t.Logf("after: %d goroutines, heap %.1f MiB; console RSS %.1f MiB", g1, float64(h1)/(1<<20), float64(r1)/1024)
	// Bounds: a goroutine per pod would be thousands; a pod's worth of
	// cache kept (a few KiB each) would be tens of MiB.
	if g1 > g0+50 {
		t.Errorf("goroutines %d → %d after %d pods came and went", g0, g1, churnPods)
	}
	if h1 > h0+32<<20 {
		t.Errorf("heap %.1f → %.1f MiB after %d pods came and went", float64(h0)/(1<<20), float64(h1)/(1<<20), churnPods)
	}
	// Resident memory falls back more slowly than the heap (the runtime
	// returns pages to the system in the background): the bound is wider.
	if r1 > r0+64*1024 {
		t.Errorf("the console's RSS %.1f → %.1f MiB after %d pods came and went", float64(r0)/1024, float64(r1)/1024, churnPods)
	}
}

// goroutinesAndHeap are this process's goroutines and live heap, after a
// collection.
func goroutinesAndHeap() (int, uint64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), m.HeapAlloc
}

// residentKiB is a process's resident memory (VmRSS), 0 when unknown.
func residentKiB(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kib
		}
	}
	return 0
}

// processWithArg is the PID of the process one of whose arguments is arg
// (0: none).
func processWithArg(arg string) int {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && filepath.Base(args[0]) == "sitecon" {
			for _, a := range args {
				if a == arg {
					return pid
				}
			}
		}
	}
	return 0
}
