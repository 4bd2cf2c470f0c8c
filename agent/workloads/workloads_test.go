package workloads

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary doubles as a containerd shim and as the container it
// runs (a shim's command line names the binary and its flags, which a
// copied sleep would refuse).
func TestMain(m *testing.M) {
	switch os.Getenv("SITECON_TEST_ROLE") {
	case "shim":
		// A shim runs its container as a child, and reports its pid.
		child := exec.Command(os.Args[0])
		child.Env = append(os.Environ(), "SITECON_TEST_ROLE=container")
		if err := child.Start(); err != nil {
			os.Exit(3)
		}
		fmt.Println(child.Process.Pid)
		_ = child.Wait()
		os.Exit(0)
	case "container":
		// Not select{}: with no other goroutine that is a deadlock, and
		// the runtime ends the process.
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// running is a process the test started, with its container's pid (a
// shim's child) when it has one.
type running struct {
	cmd       *exec.Cmd
	container int
}

// startAs runs the test binary copied to path, with args, in role.
func startAs(t *testing.T, path, role string, args ...string) running {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), "SITECON_TEST_ROLE="+role)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	r := running{cmd: cmd}
	if role == "shim" {
		var line [32]byte
		n, err := io.ReadAtLeast(out, line[:], 2)
		if err != nil {
			t.Fatalf("the stand-in shim did not start its container: %v", err)
		}
		if r.container, err = strconv.Atoi(strings.TrimSpace(string(line[:n]))); err != nil {
			t.Fatalf("the stand-in shim said %q", line[:n])
		}
		t.Cleanup(func() { _ = syscall.Kill(r.container, syscall.SIGKILL) })
	}
	return r
}

// alive: pid runs (a zombie does not).
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	_, state, ok := parseStat(stat)
	return ok && state != 'Z'
}

func mountTmpfs(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("sitecon-test", path, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(path, unix.MNT_DETACH) })
}

func mounted(t *testing.T, path string) bool {
	t.Helper()
	mounts, err := mountPoints()
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(mounts, path)
}

// A leaving node's containers: k3s's shim (run from its data directory,
// serving its containerd) goes with the container it runs, as does a shim
// found by its -address alone; a shim of another containerd with the same
// name outside k3s's directories runs on. The mounts below k3s's and the
// kubelet's directories go, deepest first; the directories themselves
// (a disk of their own) and mounts elsewhere stay.
func TestStopAllKillsK3sShimsAndUnmounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mounts)")
	}
	root := t.TempDir()
	dirs := Dirs{DataDir: filepath.Join(root, "k3s"), RunDir: filepath.Join(root, "run", "k3s"),
		KubeletDir: filepath.Join(root, "kubelet"), NetnsDir: filepath.Join(root, "netns")}
	address := filepath.Join(dirs.RunDir, "containerd", "containerd.sock")
	k3sShim := startAs(t, filepath.Join(dirs.DataDir, "data", "4f2c", "bin", "containerd-shim-runc-v2"), "shim",
		"-namespace", "k8s.io", "-id", "8a1d", "-address", address)
	// Run from elsewhere (an upgrade moved k3s's binaries), found by the
	// containerd it serves.
	movedShim := startAs(t, filepath.Join(root, "opt", "bin", "containerd-shim-runc-v2"), "shim",
		"-namespace", "k8s.io", "-id", "9b2e", "-address="+address)
	otherShim := startAs(t, filepath.Join(root, "docker", "bin", "containerd-shim-runc-v2"), "shim",
		"-namespace", "moby", "-id", "77aa", "-address", filepath.Join(root, "run", "docker", "containerd.sock"))

	mountTmpfs(t, dirs.DataDir) // the data directory on a disk of its own
	rootfs := filepath.Join(dirs.RunDir, "containerd", "io.containerd.runtime.v2.task", "k8s.io", "8a1d", "rootfs")
	volume := filepath.Join(dirs.KubeletDir, "pods", "0f6e", "volumes", "kubernetes.io~csi", "pvc-1", "mount")
	netns := filepath.Join(dirs.NetnsDir, "cni-5d1e")
	elsewhere := filepath.Join(root, "elsewhere")
	for _, m := range []string{rootfs, volume, netns, elsewhere} {
		mountTmpfs(t, m)
	}
	nested := filepath.Join(volume, "sub")
	mountTmpfs(t, nested)

	rep, err := StopAll(context.Background(), dirs)
	if err != nil {
		t.Fatalf("StopAll: %v (%s)", err, rep)
	}
	for name, pid := range map[string]int{
		"k3s's shim": k3sShim.cmd.Process.Pid, "its container": k3sShim.container,
		"the shim found by its address": movedShim.cmd.Process.Pid, "that shim's container": movedShim.container,
	} {
		if alive(pid) {
			t.Errorf("%s (pid %d) still runs after StopAll (%s)", name, pid, rep)
		}
	}
	for name, pid := range map[string]int{"another containerd's shim": otherShim.cmd.Process.Pid, "its container": otherShim.container} {
		if !alive(pid) {
			t.Errorf("%s (pid %d) was killed: it is not k3s's", name, pid)
		}
	}
	for _, m := range []string{rootfs, volume, nested, netns} {
		if mounted(t, m) {
			t.Errorf("%s is still mounted (%s)", m, rep)
		}
	}
	if i, j := slices.Index(rep.Unmounted, nested), slices.Index(rep.Unmounted, volume); i < 0 || j < 0 || i > j {
		t.Errorf("unmounted %v: want %s before %s", rep.Unmounted, nested, volume)
	}
	for _, m := range []string{dirs.DataDir, elsewhere} {
		if !mounted(t, m) {
			t.Errorf("%s was unmounted: it is not below k3s's directories", m)
		}
	}
}

// cgroupFor makes a pids cgroup at rel under a test root and puts r in it.
func cgroupFor(t *testing.T, rel string, r running) {
	pid := r.cmd.Process.Pid
	t.Helper()
	base := "/sys/fs/cgroup/pids"
	if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
		t.Skipf("no cgroup v1 pids hierarchy to place test processes in: %v", err)
	}
	dir := filepath.Join(base, "sitecon-test-"+strconv.Itoa(os.Getpid()), rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() {
		// A cgroup goes only once empty: its process first.
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		for d := dir; d != base; d = filepath.Dir(d) {
			_ = os.Remove(d)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A fencing node stops the pods named (in the kubelet's cgroups named
// after them, either cgroup driver) and no other.
func TestStopPodsKillsOnlyTheNamedPods(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (cgroups)")
	}
	root := t.TempDir()
	auto := startAs(t, filepath.Join(root, "auto"), "container")
	autoSystemd := startAs(t, filepath.Join(root, "auto2"), "container")
	pinned := startAs(t, filepath.Join(root, "pinned"), "container")
	const autoUID, auto2UID, pinnedUID = "6b0c1f4e-2a51-4c1e-9d3a-0e8f5a7b9c01", "1d2e3f40-5a6b-4c7d-8e9f-a0b1c2d3e4f5", "a3c1e5f7-0b2d-4f6a-8c1e-3a5c7e9b1d20"
	cgroupFor(t, "kubepods/besteffort/pod"+autoUID+"/c1", auto)
	cgroupFor(t, "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"+strings.ReplaceAll(auto2UID, "-", "_")+".slice/cri-containerd-1.scope", autoSystemd)
	cgroupFor(t, "kubepods/besteffort/pod"+pinnedUID+"/c1", pinned)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := StopPods(ctx, []string{autoUID, auto2UID})
	if err != nil {
		t.Fatal(err)
	}
	if alive(auto.cmd.Process.Pid) || alive(autoSystemd.cmd.Process.Pid) {
		t.Errorf("the named pods' processes still run (%s, killed %v)", rep, rep.Killed)
	}
	if !alive(pinned.cmd.Process.Pid) {
		t.Errorf("the pinned pod's process (pid %d) was killed", pinned.cmd.Process.Pid)
	}
}

// After a fence, a pod whose containers the kubelet holds in their crash
// back-off has only its sandbox's pause running: not running. A pod with a
// container process runs; a pod with nothing runs not.
func TestRunningPodsCountsContainersNotTheSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (cgroups)")
	}
	root := t.TempDir()
	const withContainer, sandboxOnly, empty = "0c9a1f4e-2a51-4c1e-9d3a-0e8f5a7b9c11", "1c9a1f4e-2a51-4c1e-9d3a-0e8f5a7b9c12", "2c9a1f4e-2a51-4c1e-9d3a-0e8f5a7b9c13"
	cgroupFor(t, "kubepods/besteffort/pod"+withContainer+"/c1", startAs(t, filepath.Join(root, "app"), "container"))
	cgroupFor(t, "kubepods/besteffort/pod"+sandboxOnly+"/sandbox", startAs(t, filepath.Join(root, "sandbox", "pause"), "container"))
	got, err := RunningPods([]string{withContainer, sandboxOnly, empty})
	if err != nil {
		t.Fatal(err)
	}
	if !got[withContainer] || got[sandboxOnly] || got[empty] || len(got) != 1 {
		t.Errorf("running %v, want only %s (the pause of %s is no container)", got, withContainer, sandboxOnly)
	}
}

// The pods of a namespace on this node, from the kubelet's log
// directories alone: another namespace's, a stray file and a malformed
// name are not counted; no directory at all is an error, not "no pod".
func TestPodsInNamespaceReadsTheKubeletsLogDirectories(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"eve-kube-app_plc-gateway-5b0f7c1e-7d9c_6b0c1f4e-2a51", "eve-kube-app_virt-launcher-hmi-x_1d2e3f40-5a6b", "kube-system_coredns-1_a3c1e5f7-0b2d", "eve-kube-app_broken"} {
		if err := os.MkdirAll(filepath.Join(dir, name, "c1"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "eve-kube-app_file_0c9a1f4e"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Dirs{PodLogDir: dir}.PodsInNamespace("eve-kube-app")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"1d2e3f40-5a6b", "6b0c1f4e-2a51"}; !slices.Equal(got, want) {
		t.Errorf("pods %v, want %v", got, want)
	}
	// No directory is no reading (a wrong --pod-log-dir), never "no pods":
	// the fence must not sign on it.
	if got, err := (Dirs{PodLogDir: filepath.Join(dir, "none")}).PodsInNamespace("eve-kube-app"); err == nil {
		t.Errorf("no log directory: %v, no error; want an error", got)
	}
}
