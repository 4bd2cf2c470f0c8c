package views

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest"

	"github.com/sitecon/sitecon/kube"
)

// podFrame is sampleFrame with a crash-looping pod on the lost node-b and
// a pod the scheduler cannot place, each with its events.
func podFrame() Frame {
	f := sampleFrame()
	for i := range f.Pods {
		if f.Pods[i].Name == "coredns-x" {
			f.Pods[i].Conditions = []kube.Condition{
				{Type: "PodScheduled", Status: "True", Since: now.Add(-2 * time.Hour)},
				{Type: "Ready", Status: "False", Reason: "ContainersNotReady", Message: "containers with unready status: [coredns]", Since: now.Add(-3 * time.Minute)},
			}
			f.Pods[i].Containers = []kube.ContainerState{{Name: "coredns", State: "waiting", Reason: "CrashLoopBackOff",
				Message: "back-off 2m40s restarting failed container=coredns", Restarts: 4, LastTermination: "Error, exit 1", LastEnded: now.Add(-2 * time.Minute)}}
		}
	}
	f.Pods = append(f.Pods, kube.PodRow{Namespace: "kube-system", Name: "metrics-pending", Phase: "Pending", Ready: "0/1", Created: now.Add(-4 * time.Minute),
		Conditions:  []kube.Condition{{Type: "PodScheduled", Status: "False", Reason: "Unschedulable", Message: "0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 2 Insufficient memory.", Since: now.Add(-4 * time.Minute)}},
		Unscheduled: &kube.Condition{Type: "PodScheduled", Status: "False", Reason: "Unschedulable", Message: "0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 2 Insufficient memory.", Since: now.Add(-4 * time.Minute)},
		Containers:  []kube.ContainerState{{Name: "metrics", State: "waiting", Reason: "ContainerCreating"}}})
	f.Events = append(f.Events,
		kube.EventRow{Time: now.Add(-30 * time.Second), Type: "Warning", Reason: "BackOff", Object: "Pod/coredns-x", Namespace: "kube-system", Message: "Back-off restarting failed container coredns", Count: 9},
		kube.EventRow{Time: now.Add(-40 * time.Second), Type: "Warning", Reason: "FailedScheduling", Object: "Pod/metrics-pending", Namespace: "kube-system", Message: "0/3 nodes are available"})
	return f
}

func podApp(w, h int) *App {
	a := NewApp(testContext(w, h))
	a.Update(FrameMsg(podFrame()))
	press(a, "3", "enter") // kube-system's pods
	return a
}

// Enter on a pod opens its detail: phase and readiness, node, conditions,
// each container's state with its restarts and last termination, and the
// pod's events from the frame; esc comes back to the pods, and esc again
// to the namespaces.
func TestPodDetail(t *testing.T) {
	a := podApp(100, 40)
	selectRow(t, a, "3", "coredns-x")
	press(a, "enter")
	v := ansi.Strip(a.View())
	for _, want := range []string{"pod kube-system/coredns-x", "Unknown (it last reported Running; node-b is lost)", "node-b",
		"Ready=False for 3m · ContainersNotReady: containers with unready status: [coredns]",
		"coredns: waiting (CrashLoopBackOff) · 4 restart(s) · last ended Error, exit 1, 2m ago",
		"! BackOff: Back-off restarting failed container coredns (×9)"} {
		if !strings.Contains(v, want) {
			t.Errorf("coredns-x's detail lacks %q:\n%s", want, v)
		}
	}
	if strings.Contains(v, "FailedScheduling") {
		t.Errorf("another pod's event in coredns-x's detail:\n%s", v)
	}
	press(a, "esc")
	if v := a.View(); !strings.Contains(v, "pods in kube-system") || !strings.Contains(v, "metrics-pending") {
		t.Fatalf("esc from the detail did not come back to the pods:\n%s", v)
	}
	press(a, "esc")
	if v := a.View(); !strings.Contains(v, "longhorn-system") {
		t.Errorf("esc from the pods did not come back to the namespaces:\n%s", v)
	}
}

// A Pending pod's detail says the scheduler's reason, whole.
// A pod's detail shows its own events only: a pod of the same name in
// another namespace has its own.
func TestPodDetailEventsAreItsNamespaces(t *testing.T) {
	f := podFrame()
	f.Events = append(f.Events, kube.EventRow{Time: now.Add(-20 * time.Second), Type: "Warning", Reason: "Evicted",
		Object: "Pod/coredns-x", Namespace: "other", Message: "the other namespace's coredns-x"})
	a := NewApp(testContext(100, 40))
	a.Update(FrameMsg(f))
	press(a, "3", "enter")
	selectRow(t, a, "3", "coredns-x")
	press(a, "enter")
	if v := ansi.Strip(a.View()); !strings.Contains(v, "Back-off restarting") || strings.Contains(v, "the other namespace's coredns-x") {
		t.Errorf("kube-system/coredns-x's detail shows another namespace's event:\n%s", v)
	}
}

func TestPodDetailPending(t *testing.T) {
	a := podApp(100, 40)
	selectRow(t, a, "3", "metrics-pending")
	press(a, "enter")
	v := strings.Join(strings.Fields(ansi.Strip(a.View())), " ")
	for _, want := range []string{"Node none: not scheduled", "Scheduler Unschedulable for 4m: 0/3 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, 2 Insufficient memory.",
		"metrics: waiting (ContainerCreating) · 0 restart(s)", "! FailedScheduling: 0/3 nodes are available"} {
		if !strings.Contains(v, want) {
			t.Errorf("the pending pod's detail lacks %q:\n%s", want, a.View())
		}
	}
}

// A pod's detail at the device console's 80x24 (go test ./views -run
// GoldenPodDetail -update rewrites it).
func TestGoldenPodDetail(t *testing.T) {
	a := podApp(80, 24)
	selectRow(t, a, "3", "coredns-x")
	tm := teatest.NewTestModel(t, a, teatest.WithInitialTermSize(80, 24))
	tm.Send(tea.KeyMsg{Type: tea.KeyEnter})
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	got := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*App).View() + "\n"
	for i, l := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		if w := ansi.StringWidth(l); w != 80 {
			t.Errorf("line %d is %d wide: %q", i, w, l)
		}
	}
	path := filepath.Join("testdata", "detail-pod-80x24.golden")
	checkGolden(t, path, got)
}
