// Package e2e runs the sitecon binary against a sitebox, the way a technician
// runs it against a real cluster.
package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

func statusJSON(t *testing.T, kubeconfig string) kube.ClusterStatus {
	t.Helper()
	out, errOut, err := runSitecon(t, "status", "-o", "json", "--kubeconfig", kubeconfig)
	if code := exitCode(err); code != 0 && code != 1 { // 1: something needs attention, listed
		t.Fatalf("sitecon status: %v\n%s", err, errOut)
	}
	var st kube.ClusterStatus
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, out)
	}
	return st
}

// eventually runs sitecon status until cond holds or the deadline passes.
func eventually(t *testing.T, kubeconfig string, within time.Duration, what string, cond func(kube.ClusterStatus) bool) kube.ClusterStatus {
	t.Helper()
	return until(t, within, what, func() (kube.ClusterStatus, bool) {
		st := statusJSON(t, kubeconfig)
		return st, cond(st)
	}, func(st kube.ClusterStatus) string {
		dump, _ := json.MarshalIndent(st, "", "  ")
		return "last status:\n" + string(dump)
	})
}

func findNode(st kube.ClusterStatus, name string) (kube.NodeStatus, bool) {
	for _, n := range st.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return kube.NodeStatus{}, false
}

func findVolume(st kube.ClusterStatus, name string) (kube.VolumeStatus, bool) {
	for _, v := range st.Volumes {
		if v.Name == name {
			return v, true
		}
	}
	return kube.VolumeStatus{}, false
}

func TestStatusFollowsNodeFailure(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	ctx := t.Context()
	kubeconfig := site.Kubeconfig()

	clients := site.Clients(t)
	kv := clients.KubeVirt
	// In use on node-a (Longhorn attaches only a volume in use); node-b fails.
	site.Volume(t, "vol-e2e", sitebox.VolumeOptions{Replicas: 3, Size: 10 << 30, UsedOn: "node-a"})
	_, err := kv.KubevirtV1().VirtualMachineInstances(kube.AppNamespace).Create(ctx, &kvv1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Name: "hmi", Labels: map[string]string{kube.LabelAppName: "hmi"}},
		// KubeVirt admits no VMI without memory.
		Spec: kvv1.VirtualMachineInstanceSpec{Domain: kvv1.DomainSpec{Resources: kvv1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	st := eventually(t, kubeconfig, 30*time.Second, "3 ready nodes, a healthy volume and a running VM", func(st kube.ClusterStatus) bool {
		v, ok := findVolume(st, "vol-e2e")
		running := false
		for _, a := range st.Apps {
			running = running || (a.Name == "hmi" && a.Kind == kube.AppKindVM && a.Phase == "Running" && a.Node != "")
		}
		settled := true
		for _, ns := range st.Namespaces {
			settled = settled && ns.Ready > 0
		}
		return st.NodesReady == 3 && ok && v.Robustness == "healthy" && len(v.Replicas) == 3 && running && settled
	})
	if st.NodesTotal != 3 {
		t.Errorf("nodesTotal = %d, want 3", st.NodesTotal)
	}
	// kube-vip's lease may have moved in earlier tests: any server may own it.
	if owner, ok := findNode(st, st.VIP.Owner); !ok || !owner.Ready || st.VIP.Address == "" {
		t.Errorf("vip = %+v, want an address owned by a Ready node", st.VIP)
	}
	if st.Cluster.Name != "sitebox-test" || st.Cluster.SeedNode != "node-a" {
		t.Errorf("cluster = %+v, want sitebox-test seeded by node-a", st.Cluster)
	}
	if len(st.Namespaces) != len(kube.Namespaces) {
		t.Errorf("namespaces = %+v, want one entry per watched namespace", st.Namespaces)
	}
	// sitebox runs k3s/Longhorn/KubeVirt-like system workloads: every
	// namespace but eve-kube-app has some, and the VM's launcher pod is an app pod.
	for _, ns := range st.Namespaces {
		if ns.Ready < 1 || ns.Failed != 0 {
			t.Errorf("namespace %+v, want ready pods and none failed", ns)
		}
	}

	// What is shown of node-b is under test, not etcd's election.
	if err := site.MoveEtcdLeaderOff("node-b"); err != nil {
		t.Fatal(err)
	}
	failedAt := time.Now()
	if err := site.Fail("node-b"); err != nil {
		t.Fatal(err)
	}
	site.RecoverOnCleanup(t, "node-b")
	st = eventually(t, kubeconfig, 45*time.Second, "node-b not ready, its pods not ready, vol-e2e degraded", func(st kube.ClusterStatus) bool {
		notReady := 0
		for _, ns := range st.Namespaces {
			if ns.Name == kube.LonghornNamespace {
				notReady = ns.NotReady
			}
		}
		n, _ := findNode(st, "node-b")
		v, _ := findVolume(st, "vol-e2e")
		// At least node-b's longhorn-manager, csi-plugin and engine-image
		// pods (a Deployment's pod may have been there too).
		return !n.Ready && v.Robustness == "degraded" && notReady >= 3
	})
	n, _ := findNode(st, "node-b")
	if n.Status == kube.NodeReady || n.Since.Before(failedAt.Add(-time.Second)) {
		t.Errorf("node-b = %+v, want not Ready since after the failure at %s", n, failedAt)
	}
	if st.NodesReady != 2 {
		t.Errorf("nodesReady = %d, want 2", st.NodesReady)
	}
	v, _ := findVolume(st, "vol-e2e")
	if !v.SinceExact || v.Since.Before(failedAt.Add(-time.Second)) || v.Since.After(time.Now()) {
		t.Errorf("vol-e2e degraded since %s (exact %v), want an exact time after the failure at %s", v.Since, v.SinceExact, failedAt)
	}
	for _, r := range v.Replicas {
		want := kube.ReplicaHealthy
		if r.Node == "node-b" {
			want = kube.ReplicaFailed
		}
		if r.State != want {
			t.Errorf("replica on %s is %s, want %s", r.Node, r.State, want)
		}
	}
	table, errOut, err := runSitecon(t, "status", "--kubeconfig", kubeconfig)
	if code := exitCode(err); code != 1 {
		t.Errorf("status with node-b failed exited %d (%v), want 1 (needs attention); stderr %q", code, err, errOut)
	}
	if !strings.Contains(table, "node-b:failed") || !strings.Contains(table, "degraded") {
		t.Errorf("table output misses the failure:\n%s", table)
	}
	if _, problems, _ := strings.Cut(table, "Problems:"); !strings.Contains(problems, "node node-b") || !strings.Contains(problems, "volume vol-e2e degraded") {
		t.Errorf("the problems do not name node-b and vol-e2e:\n%s", table)
	}

	recoveredAt := time.Now()
	if err := site.Recover("node-b"); err != nil {
		t.Fatal(err)
	}
	st = eventually(t, kubeconfig, 45*time.Second, "node-b ready and vol-e2e healthy again", func(st kube.ClusterStatus) bool {
		n, _ := findNode(st, "node-b")
		v, _ := findVolume(st, "vol-e2e")
		return n.Ready && v.Robustness == "healthy"
	})
	if n, _ := findNode(st, "node-b"); n.Since.Before(recoveredAt.Add(-time.Second)) {
		t.Errorf("node-b Ready since %s, want the recovery at %s", n.Since, recoveredAt)
	}
}

func TestStatusUnreachableAPIServer(t *testing.T) {
	site := sitebox.Shared(t)
	data, err := os.ReadFile(site.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	// Port 1 on loopback: nothing listens, the connection is refused.
	closed := strings.Replace(string(data), fmt.Sprintf("127.0.0.1:%d", site.APIPort), "127.0.0.1:1", 1)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(closed), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, errOut, err := runSitecon(t, "status", "--kubeconfig", path, "--config", filepath.Join(t.TempDir(), "none.json"))
	took := time.Since(start)
	if code := exitCode(err); code != 2 {
		t.Fatalf("status against a closed port exited %d (%v), want 2:\n%s", code, err, out)
	}
	if took > 10*time.Second {
		t.Errorf("took %s, want under 10s", took)
	}
	// The third line: without this machine's cluster config, no node can
	// be asked for its own report, and it says what that needs.
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "cannot reach the API server at https://127.0.0.1:1") || !strings.HasPrefix(lines[1], "check: ") ||
		!strings.HasPrefix(lines[2], "node reports: ") || !strings.Contains(lines[2], "--config") {
		t.Errorf("stderr = %q, want a line naming the unreachable API server, one saying what to check and one saying what the node reports need", errOut)
	}
	if out != "" {
		t.Errorf("stdout = %q, want nothing", out)
	}
}

func TestStatusBadInput(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("clusters: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing kubeconfig", []string{"status", "--kubeconfig", filepath.Join(dir, "nope")}, "no such file"},
		{"malformed kubeconfig", []string{"status", "--kubeconfig", garbage}, "error loading config file"},
		{"no kubeconfig at all", []string{"status"}, "no kubeconfig found"},
		{"unknown output format", []string{"status", "-o", "xml", "--kubeconfig", garbage}, `unknown output format "xml"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, err := runSitecon(t, tc.args...)
			if err == nil || !strings.Contains(errOut, tc.want) {
				t.Errorf("err = %v, stderr = %q, want failure mentioning %q", err, errOut, tc.want)
			}
			if strings.Contains(errOut, "goroutine ") {
				t.Errorf("stack trace on bad input: %s", errOut)
			}
		})
	}
}
