// Package workloads stops the containers k3s started on this node, without
// k3s: containers keep running when k3s stops (each is held by its
// containerd shim, not by k3s), so a node that leaves its cluster, or
// fences itself off, stops them itself.
//
// Everything is found from /proc: the shims by their command line (as
// k3s-killall.sh finds them), a pod's processes by the cgroup the kubelet
// put them in (named after the pod's UID).
package workloads

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Dirs are where k3s keeps what its containers run from.
type Dirs struct {
	// DataDir is k3s's data directory: the shims run from binaries under it.
	DataDir string
	// RunDir is k3s's containerd state (sockets, the containers' root
	// file systems): the shims' -address is under it.
	RunDir string
	// KubeletDir holds the pods' volumes (pods/) and the CSI plugins'
	// mounts (plugins/).
	KubeletDir string
	// NetnsDir holds the pods' network namespaces (cni-*).
	NetnsDir string
	// PodLogDir is where the kubelet keeps each pod's container logs, in
	// a directory named NAMESPACE_NAME_UID: what pods this node runs, and
	// whose, read from the node alone.
	PodLogDir string
}

// DefaultDirs are k3s's own, as k3s-killall.sh names them.
var DefaultDirs = Dirs{DataDir: "/var/lib/rancher/k3s", RunDir: "/run/k3s", KubeletDir: "/var/lib/kubelet", NetnsDir: "/run/netns", PodLogDir: "/var/log/pods"}

// WithDefaults fills the empty fields from DefaultDirs.
func (d Dirs) WithDefaults() Dirs {
	if d.DataDir == "" {
		d.DataDir = DefaultDirs.DataDir
	}
	if d.RunDir == "" {
		d.RunDir = DefaultDirs.RunDir
	}
	if d.KubeletDir == "" {
		d.KubeletDir = DefaultDirs.KubeletDir
	}
	if d.NetnsDir == "" {
		d.NetnsDir = DefaultDirs.NetnsDir
	}
	if d.PodLogDir == "" {
		d.PodLogDir = DefaultDirs.PodLogDir
	}
	return d
}

// PodsInNamespace are the UIDs of the pods in namespace that the kubelet
// has started on this node, as its pod log directories name them
// (NAMESPACE_NAME_UID; a namespace and a pod name hold no underscore).
// It needs no API server: a node cut off, its agent restarted, reads it.
// A directory outlives its pod until the kubelet collects it: a UID here
// may have no process any more.
func (d Dirs) PodsInNamespace(namespace string) ([]string, error) {
	// No directory is not "no pods": the kubelet makes it at its first
	// start, so its absence means a directory other than the kubelet's
	// (--pod-log-dir), and a fence must not sign on what it did not read.
	entries, err := os.ReadDir(d.WithDefaults().PodLogDir)
	if err != nil {
		return nil, err
	}
	var uids []string
	for _, e := range entries {
		parts := strings.Split(e.Name(), "_")
		if e.IsDir() && len(parts) == 3 && parts[0] == namespace && parts[2] != "" {
			uids = append(uids, parts[2])
		}
	}
	return uids, nil
}

// Report says what a stop did.
type Report struct {
	// Killed are the processes sent SIGKILL (shims and what they ran, or
	// a pod's processes).
	Killed []int
	// Unmounted are the mount points taken down, deepest first.
	Unmounted []string
}

func (r Report) String() string {
	return fmt.Sprintf("%d processes killed, %d mounts taken down", len(r.Killed), len(r.Unmounted))
}

// gone bounds the wait for killed processes to be gone.
const gone = 10 * time.Second

// StopAll stops every container k3s started on this node, as
// k3s-killall.sh does, for a node that leaves: it kills each containerd
// shim whose binary lies under the data directory or whose containerd
// address lies under k3s's directories, with everything the shim runs,
// waits until they are gone, then takes down the mounts k3s and the
// kubelet made below their directories (the containers' root file
// systems, the pods' volumes, the CSI plugins' mounts, the pods' network
// namespaces), deepest first. Unlike k3s-killall.sh it removes nothing:
// the directories and their data stay, and the directories themselves
// are never unmounted (one may be a disk of its own).
//
// k3s must already be stopped: a running kubelet starts the containers
// again.
func StopAll(ctx context.Context, dirs Dirs) (Report, error) {
	dirs = dirs.WithDefaults()
	procs, err := readProcs()
	if err != nil {
		return Report{}, err
	}
	var shims []int
	for _, p := range procs {
		if dirs.isK3sShim(p.argv) {
			shims = append(shims, p.pid)
		}
	}
	rep := Report{Killed: killTrees(procs, shims)}
	err = waitGone(ctx, rep.Killed)
	mounts, merr := mountPoints()
	if merr != nil {
		return rep, errors.Join(err, merr)
	}
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, m := range dirs.k3sMounts(mounts) {
		if err := unmount(m); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Unmounted = append(rep.Unmounted, m)
	}
	return rep, errors.Join(errs...)
}

// StopPods kills every process in the cgroups of the pods with these UIDs
// (their containers and sandboxes), and waits until they are gone. The
// shims stay (they end when their containers do). For a node that fences
// itself: only the pods named stop, the others run on.
func StopPods(ctx context.Context, podUIDs []string) (Report, error) {
	if len(podUIDs) == 0 {
		return Report{}, nil
	}
	procs, err := readProcs()
	if err != nil {
		return Report{}, err
	}
	var pids []int
	for _, p := range procs {
		if p.pid != os.Getpid() && inPodCgroup(p.cgroups, podUIDs) {
			pids = append(pids, p.pid)
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return Report{Killed: pids}, waitGone(ctx, pids)
}

// RunningPods are those of these pod UIDs that have a container process
// running: a process in the pod's cgroup other than its sandbox's pause,
// which the kubelet starts again at once while it holds the containers
// themselves in their crash back-off.
func RunningPods(podUIDs []string) (map[string]bool, error) {
	procs, err := readProcs()
	if err != nil {
		return nil, err
	}
	running := map[string]bool{}
	for _, p := range procs {
		if p.pid == os.Getpid() || len(p.argv) == 0 || filepath.Base(p.argv[0]) == "pause" {
			continue
		}
		for _, uid := range podUIDs {
			if !running[uid] && inPodCgroup(p.cgroups, []string{uid}) {
				running[uid] = true
			}
		}
	}
	return running, nil
}

// inPodCgroup: one of the process's cgroup paths names one of the pods,
// as the kubelet names them: pod<uid> (cgroupfs driver) or
// pod<uid with _ for -> (systemd driver).
func inPodCgroup(cgroups string, podUIDs []string) bool {
	for _, line := range strings.Split(cgroups, "\n") {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, elem := range strings.Split(parts[2], "/") {
			elem = strings.TrimSuffix(elem, ".slice")
			i := strings.LastIndex(elem, "pod")
			if i < 0 {
				continue
			}
			id := elem[i+len("pod"):]
			for _, uid := range podUIDs {
				if uid != "" && (id == uid || id == strings.ReplaceAll(uid, "-", "_")) {
					return true
				}
			}
		}
	}
	return false
}

// isK3sShim: argv is a containerd shim's, run from k3s's data directory
// or serving k3s's containerd (its -address under k3s's directories). A
// shim of another containerd (docker's, a system containerd) is not k3s's.
func (d Dirs) isK3sShim(argv []string) bool {
	if len(argv) == 0 || !strings.HasPrefix(filepath.Base(argv[0]), "containerd-shim") {
		return false
	}
	if under(argv[0], d.DataDir) {
		return true
	}
	for i, a := range argv {
		v, ok := "", false
		switch {
		case (a == "-address" || a == "--address") && i+1 < len(argv):
			v, ok = argv[i+1], true
		case strings.HasPrefix(a, "-address="), strings.HasPrefix(a, "--address="):
			v, ok = a[strings.Index(a, "=")+1:], true
		}
		if ok && (under(v, d.RunDir) || under(v, d.DataDir)) {
			return true
		}
	}
	return false
}

// k3sMounts are the mount points below k3s's and the kubelet's
// directories, deepest first: what must go before the directories can.
func (d Dirs) k3sMounts(mounts []string) []string {
	var out []string
	for _, m := range mounts {
		switch {
		case below(m, d.RunDir), below(m, d.DataDir),
			below(m, filepath.Join(d.KubeletDir, "pods")), below(m, filepath.Join(d.KubeletDir, "plugins")),
			filepath.Dir(m) == filepath.Clean(d.NetnsDir) && strings.HasPrefix(filepath.Base(m), "cni-"):
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		if c := strings.Count(b, "/") - strings.Count(a, "/"); c != 0 {
			return c
		}
		return strings.Compare(b, a)
	})
	return slices.Compact(out)
}

// under: path is dir or inside it.
func under(path, dir string) bool {
	if dir == "" || !filepath.IsAbs(path) {
		return false
	}
	path, dir = filepath.Clean(path), filepath.Clean(dir)
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// below: path is inside dir, not dir itself.
func below(path, dir string) bool {
	return under(path, dir) && filepath.Clean(path) != filepath.Clean(dir)
}

type proc struct {
	pid, ppid int
	argv      []string
	cgroups   string
}

// readProcs reads every process's parent, command line and cgroups. A
// process that ends while it is read is skipped.
func readProcs() ([]proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		base := filepath.Join("/proc", e.Name())
		stat, err := os.ReadFile(filepath.Join(base, "stat"))
		if err != nil {
			continue
		}
		ppid, state, ok := parseStat(stat)
		if !ok || state == 'Z' {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(base, "cmdline"))
		cgroups, _ := os.ReadFile(filepath.Join(base, "cgroup"))
		var argv []string
		for _, a := range bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0}) {
			if len(a) > 0 || len(argv) > 0 {
				argv = append(argv, string(a))
			}
		}
		out = append(out, proc{pid: pid, ppid: ppid, argv: argv, cgroups: string(cgroups)})
	}
	return out, nil
}

// parseStat reads the parent and the state from /proc/PID/stat; the
// command name in parentheses may itself hold spaces and parentheses.
func parseStat(stat []byte) (ppid int, state byte, ok bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

// killTrees sends SIGKILL to each root and everything below it, the
// children first found before any is killed (a killed parent's children
// are reparented, and would be lost from the tree).
func killTrees(procs []proc, roots []int) []int {
	children := map[int][]int{}
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	var all []int
	var walk func(int)
	walk = func(pid int) {
		if slices.Contains(all, pid) || pid <= 1 || pid == os.Getpid() {
			return
		}
		all = append(all, pid)
		for _, c := range children[pid] {
			walk(c)
		}
	}
	for _, r := range roots {
		walk(r)
	}
	for _, pid := range all {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return all
}

// waitGone waits until none of pids runs (a zombie counts as gone: it
// runs nothing, and only its parent can reap it).
func waitGone(ctx context.Context, pids []int) error {
	ctx, cancel := context.WithTimeout(ctx, gone)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var left []int
		for _, pid := range pids {
			stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
			if err != nil {
				continue
			}
			if _, state, ok := parseStat(stat); ok && state != 'Z' {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("processes %v still run after SIGKILL", left)
		case <-tick.C:
		}
	}
}

// mountPoints lists this mount namespace's mount points.
func mountPoints() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 {
			out = append(out, unescapeMount(f[4]))
		}
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmount takes a mount down; one still busy is detached (it goes once
// its last user does), as umount -l would.
func unmount(path string) error {
	err := unix.Unmount(path, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(path, unix.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) { // EINVAL: no longer mounted
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	return nil
}
