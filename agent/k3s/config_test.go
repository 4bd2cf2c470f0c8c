package k3s

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
)

// k3sFlags are the k3s v1.34 flags each subcommand accepts that sitecon may
// write (from `k3s server --help` / `k3s agent --help`). A key outside its
// subcommand's set makes k3s refuse to start.
var k3sFlags = map[string][]string{
	"server": {"cluster-init", "server", "token", "tls-san", "node-ip", "flannel-iface", "node-name", "node-label", "data-dir", "kube-controller-manager-arg"},
	"agent":  {"server", "token", "node-ip", "flannel-iface", "node-name", "node-label", "data-dir"},
}

// merged reads the files as k3s does: the main file, then each drop-in.
func merged(t *testing.T, k Config, redacted bool) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, f := range k.Files {
		content := f.Content
		if redacted {
			content = f.Redacted
		}
		var m map[string]any
		if err := yaml.Unmarshal(content, &m); err != nil {
			t.Fatalf("%s is not YAML: %v\n%s", f.Path, err, content)
		}
		for key, v := range m {
			if _, dup := out[key]; dup {
				t.Errorf("%s sets %s again: drop-ins replace lists, the files must not overlap", f.Path, key)
			}
			out[key] = v
		}
	}
	return out
}

func TestRenderK3s(t *testing.T) {
	labels := []any{"node-uuid=0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "gpu=2"}
	// Every server's controller-manager runs with the failover timings
	// (agent.FailoverBudget): any server may hold its lead.
	kcm := []any{"node-monitor-grace-period=15s", "node-monitor-period=1s", "attach-detach-reconcile-sync-period=2s"}
	cases := []struct {
		name       string
		edit       func(*config.Config)
		etcdData   bool
		role       Role
		firstBoot  bool
		subcommand string
		want       map[string]any
	}{
		{
			name: "seed first boot", edit: func(c *config.Config) { c.ClusterIPPrefix = "10.244.244.1/28" },
			role: RoleSeed, firstBoot: true, subcommand: "server",
			want: map[string]any{"cluster-init": true, "tls-san": []any{"10.244.244.1"}, "token": agenttest.GoodToken,
				"node-ip": "10.244.244.1", "flannel-iface": "eth1", "node-name": "node-b", "node-label": labels, "kube-controller-manager-arg": kcm},
		},
		{
			name: "seed restart", edit: func(c *config.Config) { c.ClusterIPPrefix = "10.244.244.1/28" }, etcdData: true,
			role: RoleSeed, subcommand: "server",
			want: map[string]any{"server": "https://10.244.244.1:6443", "tls-san": []any{"10.244.244.1"}, "token": agenttest.GoodToken,
				"node-ip": "10.244.244.1", "flannel-iface": "eth1", "node-name": "node-b", "node-label": labels, "kube-controller-manager-arg": kcm},
		},
		{
			name: "joining server", role: RoleServer, subcommand: "server",
			want: map[string]any{"server": "https://10.244.244.1:6443", "tls-san": []any{"10.244.244.1"}, "token": agenttest.GoodToken,
				"node-ip": "10.244.244.2", "flannel-iface": "eth1", "node-name": "node-b", "node-label": labels, "kube-controller-manager-arg": kcm},
		},
		{
			name: "worker", edit: func(c *config.Config) { c.IsWorkerNode = true }, role: RoleAgent, subcommand: "agent",
			want: map[string]any{"server": "https://10.244.244.1:6443", "token": agenttest.GoodToken,
				"node-ip": "10.244.244.2", "flannel-iface": "eth1", "node-name": "node-b", "node-label": labels},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := Render(agenttest.Validated(t, tc.edit), DefaultPaths, tc.etcdData)
			if k.Role != tc.role || k.FirstBoot != tc.firstBoot || k.Subcommand != tc.subcommand {
				t.Errorf("role %s firstBoot %v subcommand %s", k.Role, k.FirstBoot, k.Subcommand)
			}
			if !slices.Equal(k.Args, []string{tc.subcommand}) {
				t.Errorf("args = %v, want just the subcommand with default paths", k.Args)
			}
			got := merged(t, k, false)
			for key, want := range tc.want {
				if !equalYAML(got[key], want) {
					t.Errorf("%s = %#v, want %#v", key, got[key], want)
				}
			}
			for key := range got {
				if _, ok := tc.want[key]; !ok {
					t.Errorf("unexpected key %s", key)
				}
				if !slices.Contains(k3sFlags[k.Subcommand], key) {
					t.Errorf("%s is not a k3s %s flag", key, k.Subcommand)
				}
			}
			red := merged(t, k, true)
			if tok, _ := red["token"].(string); strings.Contains(tok, agenttest.GoodToken) || !strings.Contains(tok, "redacted") {
				t.Errorf("redacted token = %q", tok)
			}
		})
	}
}

func equalYAML(a, b any) bool {
	as, _ := yaml.Marshal(a)
	bs, _ := yaml.Marshal(b)
	return string(as) == string(bs)
}

func TestRenderK3sPathsAndWrite(t *testing.T) {
	dir := t.TempDir()
	paths := Paths{ConfigFile: filepath.Join(dir, "etc", "config.yaml"), DataDir: filepath.Join(dir, "data")}
	v := agenttest.Validated(t, func(c *config.Config) { c.ClusterIPPrefix = "10.244.244.1/28" })
	if paths.EtcdMemberDataPresent() {
		t.Fatal("no etcd data yet")
	}
	k := Render(v, paths, paths.EtcdMemberDataPresent())
	if !k.FirstBoot {
		t.Error("seed without etcd data is a first boot")
	}
	wantArgs := []string{"server", "--config", paths.ConfigFile, "--data-dir", paths.DataDir}
	if !slices.Equal(k.Args, wantArgs) {
		t.Errorf("args = %v, want %v", k.Args, wantArgs)
	}
	if err := k.Write(); err != nil {
		t.Fatal(err)
	}
	for _, f := range k.Files {
		st, err := os.Stat(f.Path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", f.Path, st.Mode().Perm())
		}
	}
	if _, err := os.Stat(filepath.Join(paths.DropInDir(), nodeDropIn)); err != nil {
		t.Errorf("drop-in not under %s: %v", paths.DropInDir(), err)
	}
	// Once etcd has member data, the seed rejoins instead of re-initialising.
	if err := os.MkdirAll(filepath.Join(paths.DataDir, "server", "db", "etcd", "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	if again := Render(v, paths, paths.EtcdMemberDataPresent()); again.FirstBoot {
		t.Error("seed with etcd member data must not cluster-init again")
	}
}

func TestWriteFileAtomicLeavesNoTemporaries(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, content := range []string{"one", "two"} {
		if err := config.WriteFileAtomic(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != content {
			t.Errorf("content %q, want %q", got, content)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want just the file", len(entries))
	}
	// A write that cannot happen leaves the old file intact.
	if err := config.WriteFileAtomic(filepath.Join(path, "sub"), []byte("x"), 0o600); err == nil {
		t.Error("writing under a file succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != "two" {
		t.Errorf("old file damaged: %q", got)
	}
}

// A worker reaches its cluster with its node's own identity, never a
// credential every node shares; a server with k3s's admin kubeconfig; a
// kubeconfig given on the command line wins.
func TestAgentKubeconfig(t *testing.T) {
	paths := Paths{DataDir: "/data/k3s"}
	const admin = "/etc/rancher/k3s/k3s.yaml"
	for _, tc := range []struct {
		explicit string
		role     Role
		want     string
	}{
		{"", RoleAgent, "/data/k3s/agent/kubelet.kubeconfig"},
		{"", RoleServer, admin},
		{"", RoleSeed, admin},
		{"/tmp/given", RoleAgent, "/tmp/given"},
		{"/tmp/given", RoleServer, "/tmp/given"},
	} {
		if got := AgentKubeconfig(tc.explicit, tc.role, paths, admin); got != tc.want {
			t.Errorf("AgentKubeconfig(%q, %s) = %q, want %q", tc.explicit, tc.role, got, tc.want)
		}
	}
}
