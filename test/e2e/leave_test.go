package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/test/netns"
)

// startShimStandIn runs the k3s stand-in copied to path, which makes it
// stand in for a containerd shim: a process that outlives k3s.
func startShimStandIn(t *testing.T, standin, path string, args ...string) *exec.Cmd {
	t.Helper()
	data, err := os.ReadFile(standin)
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
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// running: the process runs (a zombie does not).
func running(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// "pid (comm) S ...": the state follows the last parenthesis.
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' {
			return i+2 < len(stat) && stat[i+2] != 'Z'
		}
	}
	return false
}

// mountedAt: path is a mount point in this mount namespace.
func mountedAt(t *testing.T, path string) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

// A node that leaves takes its work with it: containers outlive k3s (each
// is held by its containerd shim), so once k3s is stopped the agent stops
// k3s's shims and takes down what k3s mounted, and only then drops the
// cluster address; a shim of another containerd runs on.
func TestLeaveStopsTheNodesWorkloads(t *testing.T) {
	netns.Skip(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	standin := buildStandin(t)
	host := netns.NewLAN(t, "a")[0]
	plan, err := formation.Plan(formation.FormRequest{
		ClusterName: "site1", Interface: netns.Interface,
		Nodes: []formation.FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	noKubeconfig := filepath.Join(t.TempDir(), "no-kubeconfig")
	n := startNodeAgent(t, ctx, &wg, noKubeconfig, standin, host, plan.Nodes[0], nil, func(o *agent.Options) {
		o.SocketPath = ""
		o.LeaderDurations = apps.LeaderDurations{}
	})
	waitState(t, n, 15*time.Second, "brought up", func(st agent.State) bool { return st.ClusterIPReady && st.K3sStarts == 1 })
	n.waitK3sStarted(t)

	dirs := n.workloads
	k3sShim := startShimStandIn(t, standin, filepath.Join(dirs.DataDir, "data", "4f2c", "bin", "containerd-shim-runc-v2"),
		"-namespace", "k8s.io", "-id", "8a1d", "-address", filepath.Join(dirs.RunDir, "containerd", "containerd.sock"))
	otherDir := t.TempDir()
	otherShim := startShimStandIn(t, standin, filepath.Join(otherDir, "bin", "containerd-shim-runc-v2"),
		"-namespace", "moby", "-id", "77aa", "-address", filepath.Join(otherDir, "containerd.sock"))
	rootfs := filepath.Join(dirs.RunDir, "containerd", "io.containerd.runtime.v2.task", "k8s.io", "8a1d", "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("sitecon-e2e", rootfs, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount a container's root stand-in: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(rootfs, unix.MNT_DETACH) })

	request := deviceRecords(n.config).LeaveRequestFile()
	if err := formation.WriteLeaveRequest(request, formation.LeaveRequest{ClusterID: plan.ClusterID, NodeName: plan.Nodes[0].NodeName, At: time.Now(), By: "e2e"}); err != nil {
		t.Fatal(err)
	}
	waitState(t, n, 15*time.Second, "left on request", func(st agent.State) bool { return st.Phase == agent.PhaseLeft && !st.ClusterIPReady })
	if running(k3sShim.Process.Pid) {
		t.Errorf("k3s's shim (pid %d) still runs after the node left: its containers would run on beside their replacements", k3sShim.Process.Pid)
	}
	if !running(otherShim.Process.Pid) {
		t.Errorf("another containerd's shim (pid %d) was killed: it is not k3s's", otherShim.Process.Pid)
	}
	if mountedAt(t, rootfs) {
		t.Errorf("%s is still mounted after the node left", rootfs)
	}
	_ = syscall.Kill(otherShim.Process.Pid, syscall.SIGKILL)
}
