package views

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest"
	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	"github.com/muesli/termenv"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/keymap"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

// quorumLost is what the snapshot says when the API server answers but
// its etcd has no quorum (kube.Snapshot's /readyz probe).
const quorumLost = "the API server at https://10.244.244.14:6443 answers but is not ready: etcd failed: reason withheld (its etcd has no quorum or does not answer: are more than half the servers down?)"

// healthySiteData is a site whose cache says all is well: three Ready
// servers, a healthy volume, an app running, ready pods. health is what
// the snapshot knows of the API server.
func healthySiteData(health kube.Health) kube.Data {
	d := kube.Data{HasLonghorn: true, Health: health}
	d.ConfigMaps = []*corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Namespace: kube.AppNamespace, Name: kube.ClusterConfigMapName},
		Data: map[string]string{kube.ClusterKeyName: "site1", kube.ClusterKeyID: "7f3e2a10", kube.ClusterKeyJoinServerIP: "10.244.244.1", kube.ClusterKeyVIPAddress: "10.244.244.14"}}}
	d.Leases = []*coordinationv1.Lease{{ObjectMeta: metav1.ObjectMeta{Namespace: kube.VIPLeaseNamespace, Name: kube.VIPLeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a"), AcquireTime: &metav1.MicroTime{Time: now.Add(-3 * time.Hour)}}}}
	for i, name := range []string{"node-a", "node-b", "node-c"} {
		d.Nodes = append(d.Nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
				"node-role.kubernetes.io/control-plane": "true", "node-role.kubernetes.io/etcd": "true"}},
			Status: corev1.NodeStatus{
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}},
				Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.244.244.%d", i+1)}},
				NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.34.4+k3s1"},
			},
		})
	}
	running := func(ns, name, node string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true}}},
		}
	}
	d.Pods = []*corev1.Pod{
		running("kube-system", "coredns-x", "node-a", nil),
		running(kube.AppNamespace, "plc-gateway-1", "node-b", map[string]string{kube.LabelAppName: "plc-gateway"}),
	}
	v := &lhv1beta2.Volume{ObjectMeta: metav1.ObjectMeta{Name: "vol-plc", Namespace: kube.LonghornNamespace}}
	v.Spec.NumberOfReplicas = 3
	v.Status.State, v.Status.Robustness = lhv1beta2.VolumeStateAttached, lhv1beta2.VolumeRobustnessHealthy
	d.Volumes = []*lhv1beta2.Volume{v}
	for j, node := range []string{"node-a", "node-b", "node-c"} {
		r := &lhv1beta2.Replica{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("vol-plc-r-%d", j)}}
		r.Spec.VolumeName, r.Spec.NodeID, r.Spec.HealthyAt = v.Name, node, "2026-11-22T02:00:00Z"
		r.Status.CurrentState = lhv1beta2.InstanceStateRunning
		d.Replicas = append(d.Replicas, r)
	}
	d.Events = []*corev1.Event{{ObjectMeta: metav1.ObjectMeta{Namespace: kube.AppNamespace, Name: "ev-1"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "plc-gateway-1"}, Reason: "Started", Type: "Normal",
		Message: "Started container c", LastTimestamp: metav1.NewTime(now.Add(-5 * time.Minute))}}
	return d
}

// staleFrame is healthySiteData read last 2 minutes ago: since then the
// API server has not answered (its etcd lost quorum).
func staleFrame() Frame {
	d := healthySiteData(kube.Health{Connected: false, Since: now.Add(-2 * time.Minute), LastError: quorumLost})
	return FrameFromData(d, true, &AgentSummary{Running: true, Node: "node-a", Role: "seed", Phase: "joined", Since: now.Add(-48 * time.Hour)}, "", now)
}

// colourApp is the console at w×h drawing in colour (16 ANSI colours, as
// the device's console does), with frame f.
func colourApp(w, h int, f Frame) *App {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.ANSI)
	ctx := ui.NewContext(r, func() time.Time { return now }, nil)
	ctx.Width, ctx.Height = w, h
	a := NewApp(ctx)
	a.Update(FrameMsg(f))
	return a
}

// plainText is a view without its colours, each line trimmed, the lines
// joined by spaces: what a reader takes in, wherever a line was wrapped.
func plainText(view string) string {
	var words []string
	for _, l := range strings.Split(ansi.Strip(view), "\n") {
		words = append(words, strings.Fields(l)...)
	}
	return strings.Join(words, " ")
}

// Stale data is never drawn as healthy (issue 22): with the API down for 2
// minutes, every screen says its data is as of 2 minutes ago, nothing is
// green, and the overview says the cluster API is down and why, whole, in
// 80 columns. Before the fix the overview said "Nodes 3/3 ready" and, in
// green, "none: every node ready, every volume healthy, every app
// running", the nodes screen three green "Ready", and the only sign was a
// banner cut at 80 columns before its reason.
func TestStaleCacheNeverDrawnHealthy(t *testing.T) {
	f := staleFrame()
	green := colourApp(80, 24, Frame{}).ctx.Styles.OK.Render("x")
	green = green[:strings.Index(green, "x")] // the escape that starts green
	if green == "" {
		t.Fatal("no colour in the test renderer")
	}
	for i, name := range keymap.ScreenNames {
		a := colourApp(80, 24, f)
		press(a, fmt.Sprint(i+1))
		if name == "pods" {
			press(a, "enter") // kube-system's pods
		}
		v := a.View()
		for n, l := range strings.Split(v, "\n") {
			if w := ansi.StringWidth(l); w > 80 {
				t.Errorf("%s: line %d is %d cells wide: %q", name, n+1, w, ansi.Strip(l))
			}
		}
		if strings.Contains(v, green) {
			t.Errorf("%s draws something green from a stale cache:\n%s", name, ansi.Strip(v))
		}
		text := plainText(v)
		if !strings.Contains(text, "as of 2m ago") {
			t.Errorf("%s does not say its data is as of 2m ago:\n%s", name, ansi.Strip(v))
		}
		want := map[string][]string{
			"overview": {"Nodes 3/3 ready (as of 2m ago)", "cluster API is down", quorumLost},
			"nodes":    {"node-a server,seed Ready?", "node-b server Ready?", "node-c server Ready?"},
			"apps":     {"Running?"},
			"volumes":  {"healthy?"},
			"pods":     {"Running?"},
		}[name]
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("%s does not say %q:\n%s", name, w, ansi.Strip(v))
			}
		}
		if strings.Contains(text, "none: every node ready") {
			t.Errorf("%s says all is well from a stale cache:\n%s", name, ansi.Strip(v))
		}
	}
}

// An app on a lost node is not known to run: the apps screen and the
// overview say the same (issue 22: the apps screen said "node-b Running"
// while the overview said "not running: Running on node-b").
func TestAppOnLostNodeIsNotRunning(t *testing.T) {
	d := healthySiteData(kube.Health{Connected: true, Since: now.Add(-time.Hour)})
	lost := d.Nodes[1].DeepCopy() // node-b: its kubelet stopped posting
	lost.Status.Conditions[0].Status, lost.Status.Conditions[0].LastTransitionTime = corev1.ConditionUnknown, metav1.NewTime(now.Add(-time.Minute))
	d.Nodes[1] = lost
	app := d.Pods[1].DeepCopy() // on node-b: the node controller marks it not ready, its phase stays Running
	app.Status.Conditions[0].Status = corev1.ConditionFalse
	d.Pods[1] = app
	f := FrameFromData(d, true, nil, "", now)
	a := colourApp(80, 24, f)
	press(a, "5")
	apps := ansi.Strip(a.View())
	row := lineWith(apps, "plc-gateway")
	if !regexp.MustCompile(`\bUnknown\b`).MatchString(row) || strings.Contains(row, "Running") {
		t.Errorf("the apps screen shows the app on lost node-b as %q, want Unknown and not Running:\n%s", row, apps)
	}
	if !strings.Contains(plainText(apps), "node-b lost") {
		t.Errorf("the apps screen does not say node-b is lost:\n%s", apps)
	}
	press(a, "1")
	overview := plainText(a.View())
	if !strings.Contains(overview, "Unknown (node-b lost)") || strings.Contains(overview, "Running on node-b") {
		t.Errorf("the overview should say the app is Unknown (node-b lost):\n%s", ansi.Strip(a.View()))
	}
}

// lineWith is the view's line whose first word is word.
func lineWith(view, word string) string {
	for _, l := range strings.Split(view, "\n") {
		if strings.HasPrefix(strings.TrimPrefix(strings.TrimSpace(l), "> "), word) {
			return l
		}
	}
	return ""
}

// Golden frames of the overview and the nodes screen while the API has
// been down 2 minutes (etcd without quorum), at 80x24, made as
// TestGoldenFrames makes its own (go test ./views -run Golden -update
// rewrites them).
func TestGoldenStaleFrames(t *testing.T) {
	for _, name := range []string{"overview", "nodes"} {
		i := slices.Index(keymap.ScreenNames, name)
		tm := teatest.NewTestModel(t, NewApp(testContext(0, 0)), teatest.WithInitialTermSize(80, 24))
		tm.Send(FrameMsg(staleFrame()))
		tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(fmt.Sprint(i + 1))})
		tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
		a := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*App)
		if a.Screen() != name {
			t.Fatalf("key %d showed %s, not %s", i+1, a.Screen(), name)
		}
		got := a.View() + "\n"
		path := filepath.Join("testdata", name+"-stale-80x24.golden")
		checkGolden(t, path, got)
	}
}

// Issue 38: the doctor ran only once its screen was opened, so a quiet
// overview pointed at nothing it would find. It runs by itself once the
// cluster is read whole (not on a partial read), once; the screen's first
// showing still runs it afresh.
func TestDoctorRunsOnceTheClusterIsRead(t *testing.T) {
	a := NewApp(testContext(120, 40))
	var runs atomic.Int32
	a.SetDoctor(context.Background(), func(context.Context) doctor.Report { runs.Add(1); return doctorReport() })
	_, cmd := a.Update(FrameMsg(Frame{Problem: "reading the cluster", Synced: false}))
	runCmd(a, cmd)
	if runs.Load() != 0 {
		t.Fatalf("the doctor ran before the cluster was read whole")
	}
	_, cmd = a.Update(FrameMsg(FrameFromData(healthySiteData(kube.Health{Connected: true, Since: now.Add(-time.Hour), LastContact: now}), true, nil, "", now)))
	runCmd(a, cmd)
	if runs.Load() != 1 {
		t.Fatalf("the cluster read whole: %d doctor runs, want 1", runs.Load())
	}
	if v := ansi.Strip(a.View()); !strings.Contains(v, "the doctor's last run (0s ago) found 1 error(s), 3 warning(s): 7 shows them") {
		t.Errorf("the quiet overview does not point at what the doctor found by itself:\n%s", v)
	}
	_, cmd = a.Update(FrameMsg(FrameFromData(healthySiteData(kube.Health{Connected: true, Since: now.Add(-time.Hour), LastContact: now}), true, nil, "", now)))
	runCmd(a, cmd)
	if runs.Load() != 1 {
		t.Errorf("a later frame ran it again: %d runs", runs.Load())
	}
	// The screen's first showing still runs it afresh, after an automatic
	// run still under way.
	a2 := NewApp(testContext(120, 40))
	var runs2 atomic.Int32
	a2.SetDoctor(context.Background(), func(context.Context) doctor.Report { runs2.Add(1); return doctorReport() })
	_, auto := a2.Update(FrameMsg(sampleFrame()))
	if cmd := press(a2, "7"); cmd != nil && runs2.Load() == 0 {
		runCmd(a2, cmd) // nothing new may start while the automatic run is under way
	}
	runCmd(a2, auto)
	if runs2.Load() != 2 {
		t.Errorf("the screen shown while the automatic run was under way: %d runs, want 2 (it, then the screen's own)", runs2.Load())
	}
	runCmd(a, press(a, "7"))
	runCmd(a, press(a, "1"))
	if runs.Load() != 2 {
		t.Errorf("the doctor's screen shown: %d runs, want 2 (a fresh run, then no more)", runs.Load())
	}
}

// Issue 38: a healthy site's overview said "Alerts none" and never pointed
// at the doctor's warnings. Once the doctor has run and found something
// worse than info, the quiet overview says so and where to look; with
// nothing found, or no run yet, it says nothing more.
func TestQuietOverviewPointsAtTheDoctorsFindings(t *testing.T) {
	a := NewApp(testContext(120, 40))
	a.Update(FrameMsg(FrameFromData(healthySiteData(kube.Health{Connected: true, Since: now.Add(-time.Hour), LastContact: now}), true, nil, "", now)))
	if v := ansi.Strip(a.View()); !strings.Contains(v, "none: every node ready") || strings.Contains(v, "the doctor's last run") {
		t.Fatalf("a healthy site before any doctor run:\n%s", v)
	}
	a.doctor.report = &doctor.Report{Findings: []doctor.Finding{{ID: doctor.IDClockSkew, Severity: doctor.Warn, Summary: "node-b's clock is 3s ahead"},
		{ID: doctor.IDEtcdQuorum, Severity: doctor.OK}}}
	a.doctor.ranAt = now.Add(-2 * time.Minute)
	if v := ansi.Strip(a.View()); !strings.Contains(v, "the doctor's last run (2m ago) found 0 error(s), 1 warning(s): 7 shows them") {
		t.Errorf("the quiet overview does not point at the doctor's warning:\n%s", v)
	}
}
