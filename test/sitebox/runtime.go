package sitebox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// The container runtime simulator (Options.Runtime, `sitebox up
// --runtime`): kwok's pods run no process, so nothing could tell whether
// an app runs on two nodes at once. With it, every pod a node's kubelet
// runs gets a real process (sleep) in a cgroup named after the pod's UID,
// under the node's own part of the machine's cgroup tree
// (RuntimeCgroupDir), as containerd's shims put a pod's containers: the
// agent's workloads package finds and stops it exactly as on a device, and
// "the app runs on node X" is a fact read from the machine.
//
// The simulator is the node's kubelet's container side, a site process
// (runtime-NODE) beside its kwok: it starts a pod's process once kwok has
// the pod Running and ends it once the pod is being deleted, finished or
// gone, as a kubelet does while it reaches the API server. A process
// that dies (a fence killed it) is started again with a kubelet's
// back-off (10 s, doubling to 5 min, back to 10 s after 10 min of running). A partition freezes the simulator
// with its kwok (Cut), so a cut-off node's processes run on, as its
// containers would; a power cut kills the simulator and every process of
// the node (PowerOff); nothing else ends them.

// RuntimeProcess names a node's runtime simulator among the site processes.
func RuntimeProcess(node string) string { return "runtime-" + node }

// cgroupBase is the hierarchy the simulator puts pods in: cgroup v1's pids
// hierarchy where the machine has one, else the v2 unified tree.
func cgroupBase() (string, error) {
	for _, dir := range []string{"/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("the container runtime simulator needs a cgroup hierarchy (/sys/fs/cgroup/pids or cgroup v2 at /sys/fs/cgroup)")
}

// RuntimeCgroupDir is the site's part of the cgroup tree for node: its pods
// are under kubepods/besteffort/pod<UID>/c1, as a kubelet's with the
// cgroupfs driver.
func (s *Site) RuntimeCgroupDir(node string) (string, error) {
	base, err := cgroupBase()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, s.netnsPrefix(), node), nil
}

// RuntimeCopies are the pods with a live process on node, by UID, each
// with its processes' PIDs. Read from the cgroup tree alone: no API
// server, no sitecon, so a checker can trust it whatever the site's state.
func (s *Site) RuntimeCopies(node string) (map[string][]int, error) {
	dir, err := s.RuntimeCgroupDir(node)
	if err != nil {
		return nil, err
	}
	return podProcesses(filepath.Join(dir, "kubepods", "besteffort"))
}

func podProcesses(podsDir string) (map[string][]int, error) {
	entries, err := os.ReadDir(podsDir)
	if errors.Is(err, os.ErrNotExist) {
		return map[string][]int{}, nil
	}
	if err != nil {
		return nil, err
	}
	copies := map[string][]int{}
	for _, e := range entries {
		uid, ok := strings.CutPrefix(e.Name(), "pod")
		if !e.IsDir() || !ok {
			continue
		}
		pids, err := cgroupPIDs(filepath.Join(podsDir, e.Name(), "c1"))
		if err != nil {
			return nil, err
		}
		if len(pids) > 0 {
			copies[uid] = pids
		}
	}
	return copies, nil
}

// cgroupPIDs are the live processes of one cgroup; a cgroup already gone
// has none.
func cgroupPIDs(dir string) ([]int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && !zombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// zombie: the process has ended and waits to be reaped: no copy runs.
func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, state, ok := parseProcStat(stat)
	return !ok || state == 'Z' || state == 'X'
}

// parseProcStat reads the parent PID and state from /proc/PID/stat (the
// command may hold spaces and parentheses: the fields start after the last ')').
func parseProcStat(stat []byte) (ppid int, state byte, ok bool) {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 2 || len(fields[0]) != 1 {
		return 0, 0, false
	}
	ppid, err := strconv.Atoi(fields[1])
	return ppid, fields[0][0], err == nil
}

// signalRuntimeCopies sends sig to every process of node's pods.
func (s *Site) signalRuntimeCopies(node string, sig syscall.Signal) error {
	copies, err := s.RuntimeCopies(node)
	if err != nil || len(copies) == 0 {
		return nil // no hierarchy, no copies: nothing to signal
	}
	for _, pids := range copies {
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
	}
	return nil
}

// endRuntime is a node's power cut as its containers live it: the
// simulator and every process of the node's pods die at once; their
// cgroups go with the machine's state.
func (s *Site) endRuntime(node string) error {
	if s.Runtime == "" {
		return nil
	}
	errs := []error{s.kill(RuntimeProcess(node)), s.signalRuntimeCopies(node, syscall.SIGKILL)}
	dir, err := s.RuntimeCgroupDir(node)
	if err != nil {
		return errors.Join(errs...)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		copies, err := s.RuntimeCopies(node)
		if err != nil || len(copies) == 0 || time.Now().After(deadline) {
			if len(copies) > 0 {
				errs = append(errs, fmt.Errorf("%s: %d pods' processes outlived the power cut", node, len(copies)))
			}
			break
		}
		time.Sleep(20 * time.Millisecond) // SIGKILL sent: the kernel's reaping, bounded above
	}
	errs = append(errs, removeCgroupTree(dir))
	return errors.Join(errs...)
}

// removeCgroupTree removes a cgroup and everything below it, deepest
// first (a cgroup goes only empty, its children gone).
func removeCgroupTree(dir string) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return nil // gone meanwhile
		}
		if d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// startRuntime starts node's runtime simulator, if the site runs them.
func (s *Site) startRuntime(n Node) error {
	if s.Runtime == "" || s.running(RuntimeProcess(n.Name)) {
		return nil
	}
	if _, err := cgroupBase(); err != nil {
		return err
	}
	return s.StartProcess(RuntimeProcess(n.Name), s.Runtime, "runtime", "--dir", s.Dir, "--node", n.Name)
}

// Kubelet restart back-off, as a kubelet's for a container that exits.
const (
	runtimeBackoffFirst = 10 * time.Second
	runtimeBackoffMax   = 5 * time.Minute
)

// ServeRuntime runs node's container runtime simulator of the site in dir
// until ctx ends (see RuntimeProcess). Its processes outlive it, as
// containers outlive their kubelet.
func ServeRuntime(ctx context.Context, dir, node string, log *slog.Logger) error {
	s, err := Load(dir)
	if err != nil {
		return err
	}
	if _, err := s.node(node); err != nil {
		return err
	}
	root, err := s.RuntimeCgroupDir(node)
	if err != nil {
		return err
	}
	conf, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig())
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(conf)
	if err != nil {
		return err
	}
	r := &runtimeSim{root: root, logDir: s.PodLogDir(node), log: log, pods: map[string]*simPod{}}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	informer := factory.Core().V1().Pods().Informer()
	// Reconciled from the informer's store (memory, no LIST) at every
	// change it sees, as a kubelet acts on its pod watch: a pod being
	// deleted ends its process before kwok has it gone and the scheduler
	// can place a replacement. And once a second for the restarts' back-off.
	kick := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, DeleteFunc: poke, UpdateFunc: func(_, o any) { poke(o) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		r.reconcile(informer.GetStore().List(), time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-kick:
		}
	}
}

type simPod struct {
	cmd      *exec.Cmd
	exited   chan struct{}
	started  time.Time
	restarts int
	nextRun  time.Time
}

// runtimeBackoffReset is how long a process must have run for its next
// restart to wait the first back-off again, as a kubelet's.
const runtimeBackoffReset = 10 * time.Minute

type runtimeSim struct {
	root string
	// logDir is the node's pod log directory, where a kubelet makes one
	// directory per pod it starts (NAMESPACE_NAME_UID), until the pod is
	// gone: the agent's fence reads it.
	logDir string
	log    *slog.Logger
	pods   map[string]*simPod
}

// PodLogDir is node's pod log directory (a kubelet's /var/log/pods).
func (s *Site) PodLogDir(node string) string { return filepath.Join(s.BootDir(node), "pod-logs") }

func (r *runtimeSim) podDir(uid string) string {
	return filepath.Join(r.root, "kubepods", "besteffort", "pod"+uid)
}

func (r *runtimeSim) reconcile(objs []any, now time.Time) {
	want := map[string]bool{}
	logDirs := map[string]bool{}
	for _, o := range objs {
		pod, ok := o.(*corev1.Pod)
		if !ok || pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			continue
		}
		want[string(pod.UID)] = true
		logDirs[pod.Namespace+"_"+pod.Name+"_"+string(pod.UID)] = true
	}
	for uid := range want {
		r.ensure(uid, now)
	}
	// The pods' log directories: made for every pod it runs, gone with
	// the pod.
	for name := range logDirs {
		if err := os.MkdirAll(filepath.Join(r.logDir, name, "c1"), 0o755); err != nil {
			r.log.Warn("make the pod's log directory", "dir", name, "err", err)
		}
	}
	if entries, err := os.ReadDir(r.logDir); err == nil {
		for _, e := range entries {
			if !logDirs[e.Name()] {
				_ = os.RemoveAll(filepath.Join(r.logDir, e.Name()))
			}
		}
	}
	// Whatever runs here that no pod wants ends: deleted, finished, gone
	// (or force-deleted while this node was cut off), as a kubelet
	// ends it when it learns so.
	running, err := podProcesses(filepath.Join(r.root, "kubepods", "besteffort"))
	if err != nil {
		r.log.Warn("read the pods' cgroups", "err", err)
		return
	}
	for uid, pids := range running {
		if !want[uid] {
			r.log.Info("pod ended: its process stopped", "pod", uid, "pids", pids)
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	for uid := range r.pods {
		if !want[uid] {
			delete(r.pods, uid)
		}
	}
	// Empty cgroups of pods no longer wanted go.
	entries, _ := os.ReadDir(filepath.Join(r.root, "kubepods", "besteffort"))
	for _, e := range entries {
		uid, ok := strings.CutPrefix(e.Name(), "pod")
		if ok && !want[uid] && running[uid] == nil {
			_ = removeCgroupTree(r.podDir(uid))
		}
	}
}

// ensure runs uid's process: started when it has none, started again after
// the back-off when it died.
func (r *runtimeSim) ensure(uid string, now time.Time) {
	p := r.pods[uid]
	if p == nil {
		p = &simPod{}
		r.pods[uid] = p
	}
	pids, _ := cgroupPIDs(filepath.Join(r.podDir(uid), "c1"))
	if len(pids) > 0 {
		return
	}
	if p.cmd != nil {
		// It ran and died (killed by a fence, or a leave): a kubelet
		// starts it again after its back-off.
		select {
		case <-p.exited:
		default:
			return // its process is still being reaped
		}
		if p.nextRun.IsZero() {
			if now.Sub(p.started) >= runtimeBackoffReset {
				p.restarts = 0
			}
			backoff := min(runtimeBackoffFirst<<min(p.restarts, 5), runtimeBackoffMax)
			p.nextRun = now.Add(backoff)
			r.log.Info("container exited: restart after back-off", "pod", uid, "after", backoff)
			return
		}
		if now.Before(p.nextRun) {
			return
		}
		p.restarts++
	}
	if err := r.start(uid, p); err != nil {
		r.log.Warn("start the pod's process", "pod", uid, "err", err)
		return
	}
	p.nextRun = time.Time{}
	r.log.Info("pod's process started", "pod", uid, "pid", p.cmd.Process.Pid, "restarts", p.restarts)
}

func (r *runtimeSim) start(uid string, p *simPod) error {
	dir := filepath.Join(r.podDir(uid), "c1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cmd := exec.Command("sleep", "infinity")
	// Its own process group: a signal to the simulator's is not its.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.cmd, p.exited, p.started = cmd, exited, time.Now()
	return nil
}
