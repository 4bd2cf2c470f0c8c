package sitebox

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
)

// TestOptions are the site settings tests use: failures are noticed in
// seconds, not minutes, so tests can wait on them with short deadlines.
func TestOptions(dir string) Options {
	return Options{
		Dir:   dir,
		Nodes: 3,
		// Short enough to see a failure quickly, long enough that the
		// etcd election a lost server's member costs (its leader gone: a
		// few seconds without writes on a busy two-core machine) does not
		// turn every other node NotReady too. At 8 s it did, now and then.
		NodeMonitorGracePeriod: 12 * time.Second,
		NodeLeaseDuration:      12 * time.Second,
		EvictionToleration:     10 * time.Second,
		// A deleted VolumeAttachment is noticed within seconds, not the
		// minute a k3s node takes: the order of events is the same.
		AttachDetachSyncPeriod: 5 * time.Second,
		ClusterName:            "sitebox-test",
		DieWithParent:          os.Getenv("SITEBOX_KEEP") == "",
		Simulators:             SimulatorOptions{RebuildTime: 2 * time.Second},
	}
}

// TestSite is a site shared by the tests of one package, with the
// simulators running inside the test process.
type TestSite struct {
	*Site
	Config *rest.Config
	stop   context.CancelFunc
	done   sync.WaitGroup
	// provenLive is the restart (Site.restarts) after which
	// WaitSimulatorsLive last saw every kubelet and simulator act.
	provenLive atomic.Int64
}

// The package's site: started by the first test that asks for it, so a
// run of pure tests (go test -run TestSomePureThing) boots nothing.
var (
	sharedOnce sync.Once
	shared     *TestSite
	sharedErr  error
	sharedDir  string
	mainRan    bool
)

// RunMain runs a package's tests and tears down the site they shared, if
// one asked for it: call it from TestMain as os.Exit(sitebox.RunMain(m)).
// The site's logs stay in a temporary directory named on failure.
func RunMain(m *testing.M) int {
	mainRan = true
	code := m.Run()
	if shared == nil {
		if sharedErr != nil && code == 0 {
			code = 1
		}
		return code
	}
	if os.Getenv("SITEBOX_KEEP") != "" {
		// Debugging: leave the site up to look at (sitebox down --dir).
		fmt.Fprintf(os.Stderr, "sitebox: SITEBOX_KEEP set, site left running in %s\n", sharedDir)
		return code
	}
	shared.Stop()
	if code == 0 {
		_ = os.RemoveAll(sharedDir)
	} else {
		fmt.Fprintf(os.Stderr, "sitebox: logs kept in %s\n", filepath.Join(sharedDir, "logs"))
	}
	return code
}

// Shared returns the package's site, starting it on first use.
func Shared(t testing.TB) *TestSite {
	t.Helper()
	if !mainRan {
		t.Fatal("no sitebox: call sitebox.RunMain from TestMain")
	}
	sharedOnce.Do(startShared)
	if sharedErr != nil {
		t.Fatalf("sitebox: %v", sharedErr)
	}
	return shared
}

func startShared() {
	dir, err := os.MkdirTemp("", "sitebox-test-")
	if err != nil {
		sharedErr = err
		return
	}
	sharedDir = dir
	// client-go in this process (the tests' agents, snapshots and leader
	// elections) logs through klog to stderr; it goes to a file beside the
	// site's logs instead, so a failing test's own words are what stand out.
	// klog's logger is set before the simulators' informers start: set
	// later, it races with their reads of it (go test -race).
	var clientGoLog lateFile
	klog.SetSlogLogger(slog.New(slog.NewTextHandler(&clientGoLog, nil)))
	site, err := StartTestSite(TestOptions(dir))
	if err != nil {
		sharedErr = fmt.Errorf("%w (logs in %s)", err, filepath.Join(dir, "logs"))
		return
	}
	f, err := os.OpenFile(filepath.Join(dir, "logs", "client-go.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		site.Stop()
		sharedErr = err
		return
	}
	clientGoLog.open(f)
	shared = site
}

// lateFile is a log file that exists only once the site made its logs
// directory; what is written before is dropped.
type lateFile struct {
	mu sync.Mutex
	f  *os.File
}

func (l *lateFile) open(f *os.File) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f = f
}

func (l *lateFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return len(p), nil
	}
	return l.f.Write(p)
}

// StartTestSite starts a site with the simulators running in this process,
// logging to DIR/logs/simulators.log.
func StartTestSite(opts Options) (*TestSite, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	site, err := Up(ctx, opts)
	if err != nil {
		return nil, err
	}
	cfg, err := site.RESTConfig()
	if err != nil {
		_ = site.Down()
		return nil, err
	}
	cfg.WarningHandler = rest.NoWarnings{}
	logFile, err := os.OpenFile(filepath.Join(site.Dir, "logs", "simulators.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		_ = site.Down()
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	ts := &TestSite{Site: site, Config: cfg, stop: stop}
	ts.done.Add(1)
	go func() {
		defer ts.done.Done()
		defer logFile.Close()
		log := slog.New(slog.NewTextHandler(io.Writer(logFile), nil))
		simOpts := opts.Simulators
		simOpts.PKIDir = filepath.Join(site.Dir, "pki")
		if err := RunSimulators(runCtx, cfg, simOpts, log); err != nil {
			log.Error("simulators stopped", "err", err)
		}
	}()
	return ts, nil
}

// Stop stops the simulators and every process of the site.
func (ts *TestSite) Stop() {
	ts.stop()
	ts.done.Wait()
	_ = ts.Down()
}

// RecoverOnCleanup makes sure a node failed by a test is back for the next one.
func (ts *TestSite) RecoverOnCleanup(t testing.TB, node string) {
	t.Cleanup(func() {
		if !ts.running("kwok-" + node) {
			if err := ts.Recover(node); err != nil {
				t.Errorf("recover %s: %v", node, err)
			}
		}
	})
}

// Clients are every client of the site's API server (core, KubeVirt,
// Longhorn), as sitecon builds them.
func (ts *TestSite) Clients(t testing.TB) *kube.Clients {
	t.Helper()
	c, err := kube.NewClients(ts.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// WaitSettled waits until every node is Ready and no pod is terminating: a
// test that failed a node may leave the site like that for the next one.
func (ts *TestSite) WaitSettled(t testing.TB, within time.Duration) {
	t.Helper()
	cs := ts.Clients(t).Core
	var unsettled, lastSeen []string
	touch := 0
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, within, true, func(ctx context.Context) (bool, error) {
		if len(unsettled) > 0 {
			lastSeen = append(lastSeen[:0], unsettled...)
		}
		unsettled = unsettled[:0]
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			unsettled = append(unsettled, err.Error())
			return false, nil
		}
		touch++
		for _, n := range nodes.Items {
			// Ready as the simulators judge it: a node back from a failure
			// reports Ready a moment before the node lifecycle controller
			// lifts its not-ready/unreachable taint, and until then Longhorn
			// puts no replica there and attaches nothing there.
			switch {
			case !kube.NodeIsReady(&n):
				unsettled = append(unsettled, "node "+n.Name)
				// kwok acts on a node only while its cache says it holds
				// the node's lease, and drops the events that come before
				// then for good: a kwok restarted just before the API
				// server went away never saw the node lifecycle
				// controller set its Ready Unknown, and leaves it so (a
				// full run: node-b not Ready for 7 minutes after the
				// outage, its lease renewed all along). A touch is an
				// event a live kwok acts on; a failed node's has no kwok
				// to act.
				if touch%2 == 0 {
					patch := fmt.Sprintf(`{"metadata":{"annotations":{"sitebox.sitecon.io/settle-touch":"%d"}}}`, touch)
					_, _ = cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				}
			case hasUnreachableTaint(&n):
				unsettled = append(unsettled, "node "+n.Name+" (still tainted not-ready or unreachable)")
			}
		}
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			unsettled = append(unsettled, err.Error())
			return false, nil
		}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			if p.DeletionTimestamp != nil {
				unsettled = append(unsettled, "pod "+p.Namespace+"/"+p.Name)
			}
		}
		return len(unsettled) == 0, nil
	})
	if err != nil {
		t.Fatalf("site not settled within %s: %v (before: %v)", within, unsettled, lastSeen)
	}
	// A site whose API server or a node restarted since the last proof
	// has settled only once its kubelets and simulators act on new
	// objects again: the next test's first pod must not wait on a
	// watch's backoff.
	if ts.restarts.Load() != ts.provenLive.Load() {
		ts.WaitSimulatorsLive(t, within)
	}
}

// WaitSimulatorsLive waits until the in-process simulators and every
// Ready node's kubelet act on new objects again: a fresh Longhorn volume
// gets its replica and settles (detached: nothing uses it, as Longhorn
// leaves an unused volume), a fresh VMI (with memory: KubeVirt's admission
// refuses one without) runs, and a pod bound to each Ready node turns
// Ready. After the API server was away, their watches come back on
// client-go's re-list backoff (up to 30 s). WaitSettled calls this after
// each restart of the API server or a node.
func (ts *TestSite) WaitSimulatorsLive(t testing.TB, within time.Duration) {
	t.Helper()
	starts := ts.restarts.Load()
	ts.waitKubeletsLive(t, within)
	ts.waitControllersLive(t, within)
	ctx := context.Background()
	clients := ts.Clients(t)
	lh, kv := clients.Longhorn, clients.KubeVirt
	name := fmt.Sprintf("sitebox-probe-%d", time.Now().UnixNano())
	volumes := lh.LonghornV1beta2().Volumes(kube.LonghornNamespace)
	vmis := kv.KubevirtV1().VirtualMachineInstances(kube.AppNamespace)
	if _, err := volumes.Create(ctx, LonghornVolume(name, 1<<30, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := &kvv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: name}}
	probe.Spec.Domain.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}
	if _, err := vmis.Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = volumes.Delete(ctx, name, metav1.DeleteOptions{})
		_ = vmis.Delete(ctx, name, metav1.DeleteOptions{})
	}()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		v, err := volumes.Get(ctx, name, metav1.GetOptions{})
		if err != nil || v.Status.State != lhv1beta2.VolumeStateDetached {
			return false, nil
		}
		reps, err := clients.Longhorn.LonghornV1beta2().Replicas(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || !slices.ContainsFunc(reps.Items, func(r lhv1beta2.Replica) bool { return r.Spec.VolumeName == name }) {
			return false, nil
		}
		vmi, err := vmis.Get(ctx, name, metav1.GetOptions{})
		return err == nil && vmi.Status.Phase == kvv1.Running, nil
	})
	if err != nil {
		t.Fatalf("the simulators did not pick up new objects within %s", within)
	}
	ts.provenLive.Store(starts)
}

// waitKubeletsLive waits until a probe pod bound to each Ready node is
// Ready, then removes the probes. kwok plays a pod only while its cache
// says it holds the node's lease, and drops the events that arrive before
// then for good: a kwok restarted just before the API server went away
// caches the old holder until its lease watch is back. So a probe not yet
// Ready is touched (an annotation) every two seconds: each touch is an
// event a live kwok acts on.
func (ts *TestSite) waitKubeletsLive(t testing.TB, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	pods := ts.Clients(t).Core.CoreV1().Pods(corev1.NamespaceDefault)
	nodes, err := ts.Clients(t).Core.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stamp := time.Now().UnixNano()
	var probes []string
	for _, n := range nodes.Items {
		if !kube.NodeIsReady(&n) {
			continue
		}
		name := fmt.Sprintf("sitebox-kubelet-probe-%s-%d", n.Name, stamp)
		probe := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kubeletProbeLabel: "true"}},
			Spec: corev1.PodSpec{NodeName: n.Name, Containers: []corev1.Container{{Name: "probe", Image: "registry.local/probe:1"}},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
		}
		if _, err := pods.Create(ctx, probe, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		probes = append(probes, name)
	}
	defer func() {
		for _, name := range probes {
			_ = pods.Delete(ctx, name, metav1.DeleteOptions{})
		}
		// Gone, played by their kubelets: a settled site has no pod
		// on its way out.
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
			l, err := pods.List(ctx, metav1.ListOptions{LabelSelector: kubeletProbeLabel})
			return err == nil && len(l.Items) == 0, nil
		})
	}()
	touch := 0
	var waiting []string
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, within, true, func(ctx context.Context) (bool, error) {
		touch++
		waiting = waiting[:0]
		for _, name := range probes {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err == nil && kube.PodReady(p) {
				continue
			}
			waiting = append(waiting, name)
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"sitebox.sitecon.io/probe-touch":"%d"}}}`, touch)
			_, _ = pods.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		}
		return len(waiting) == 0, nil
	})
	if err != nil {
		t.Fatalf("the kubelets did not run new pods within %s: %v not Ready", within, waiting)
	}
}

// waitControllersLive waits until the controller-manager's volume binder
// binds a pre-bound claim and the scheduler places a pod. A
// controller-manager started afresh (after the API server or etcd's quorum
// came back) syncs every informer before its controllers act: a claim made
// in that time waits, and a test giving it 5 s failed so in a full run
// (issue 23, TestClaimBindsOnceSettledAfterQuorumReturns).
func (ts *TestSite) waitControllersLive(t testing.TB, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	core := ts.Clients(t).Core.CoreV1()
	name := fmt.Sprintf("sitebox-controllers-probe-%d", time.Now().UnixNano())
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: corev1.NamespaceDefault, Name: name},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/nonexistent/" + name}},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: corev1.NamespaceDefault},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(""), VolumeName: name,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}},
		},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kubeletProbeLabel: "true"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "registry.local/probe:1"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}
	if _, err := core.PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = core.PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{}) }()
	// The binder marks the volume Available once it has it; the claim
	// made after that is bound on its own add event. One made sooner
	// waits for the binder's periodic resync (15 s), which would prove
	// nothing about its watches.
	var volumePhase corev1.PersistentVolumePhase
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		v, err := core.PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			volumePhase = v.Status.Phase
		}
		return volumePhase == corev1.VolumeAvailable, nil
	}); err != nil {
		t.Fatalf("the volume binder did not take a new volume within %s: phase %q", within, volumePhase)
	}
	if _, err := core.PersistentVolumeClaims(corev1.NamespaceDefault).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = core.PersistentVolumeClaims(corev1.NamespaceDefault).Delete(ctx, name, metav1.DeleteOptions{})
	}()
	if _, err := core.Pods(corev1.NamespaceDefault).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = core.Pods(corev1.NamespaceDefault).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
			_, err := core.Pods(corev1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}()
	claimed := time.Now()
	var claimPhase corev1.PersistentVolumeClaimPhase
	var podNode string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		if c, err := core.PersistentVolumeClaims(corev1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{}); err == nil {
			claimPhase = c.Status.Phase
		}
		if p, err := core.Pods(corev1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{}); err == nil {
			podNode = p.Spec.NodeName
		}
		return claimPhase == corev1.ClaimBound && podNode != "", nil
	})
	if err != nil {
		t.Fatalf("the controllers did not act within %s: probe claim %q, probe pod scheduled to %q", within, claimPhase, podNode)
	}
	t.Logf("sitebox: probe claim bound and probe pod scheduled %.1fs after the claim", time.Since(claimed).Seconds())
}

// kubeletProbeLabel marks waitKubeletsLive's probe pods.
const kubeletProbeLabel = "sitebox.sitecon.io/kubelet-probe"

// StartSnapshot starts the cluster cache a face starts (kube.Snapshot) on
// cfg, waits until its informers have synced, and stops it when t ends.
func StartSnapshot(t testing.TB, cfg *rest.Config) *kube.Snapshot {
	t.Helper()
	snap, err := kube.NewSnapshot(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	snap.Start(ctx)
	syncCtx, cancelSync := context.WithTimeout(ctx, 20*time.Second)
	defer cancelSync()
	if err := snap.WaitForSync(syncCtx); err != nil {
		t.Fatal(err)
	}
	return snap
}
