package kube

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/sitecon/sitecon/test/prereq"
)

func writeKubeconfig(t testing.TB, dir, name, server string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	data := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "` + server + `"}
users:
- name: u
  user: {token: t}
contexts:
- name: ctx
  context: {cluster: c, user: u}
- name: other
  context: {cluster: c, user: u, namespace: x}
current-context: ctx
`
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The k3s rule, in order: --kubeconfig, then $KUBECONFIG, then
// /etc/rancher/k3s/k3s.yaml, then ~/.kube/config; each case with every
// later file present, so a rule that looks in the wrong order or skips
// one loads the wrong file. The files are real: the cases run in a child
// process with a temporary directory mounted over /etc in a mount
// namespace of its own and $HOME in another (clientcmd fixes the home
// file at init, hence the child).
func TestLoadRESTConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	etc, home := filepath.Join(dir, "etc"), filepath.Join(dir, "home")
	for _, d := range []string{filepath.Join(etc, "rancher", "k3s"), filepath.Join(home, ".kube")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	explicit := writeKubeconfig(t, dir, "explicit", "https://explicit:6443")
	env := writeKubeconfig(t, dir, "env", "https://env:6443")
	cases := []precedenceCase{
		{Name: "explicit wins", Explicit: explicit, Env: env, K3s: true, Home: true, Want: "https://explicit:6443"},
		{Name: "then KUBECONFIG", Env: env, K3s: true, Home: true, Want: "https://env:6443"},
		{Name: "then the k3s file", K3s: true, Home: true, Want: "https://k3s:6443"},
		{Name: "then ~/.kube/config", Home: true, Want: "https://home:6443"},
		{Name: "explicit over the k3s file", Explicit: explicit, K3s: true, Want: "https://explicit:6443"},
		{Name: "nothing", Want: ErrNoKubeconfig.Error()},
	}
	spec, _ := json.Marshal(cases)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), precedenceChildEnv+"="+string(spec), precedenceEtcEnv+"="+etc, "HOME="+home, "KUBECONFIG=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	if os.Geteuid() != 0 {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	out, err := cmd.Output()
	var got []string
	if err == nil {
		err = json.Unmarshal(out, &got)
	}
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		prereq.Need(t, false, fmt.Sprintf("a mount namespace for the kubeconfig precedence child: %v\n%s%s", err, out, stderr))
		return
	}
	for i, c := range cases {
		if got[i] != c.Want {
			t.Errorf("%s: loaded %s, want %s", c.Name, got[i], c.Want)
		}
	}
}

type precedenceCase struct {
	Name, Explicit, Env string
	K3s, Home           bool
	Want                string
}

const (
	precedenceChildEnv = "SITECON_TEST_PRECEDENCE_CHILD"
	precedenceEtcEnv   = "SITECON_TEST_PRECEDENCE_ETC"
)

// A child of TestLoadRESTConfigPrecedence runs its cases before TestMain
// boots a site.
func init() {
	if os.Getenv(precedenceChildEnv) != "" {
		os.Exit(precedenceChild())
	}
}

// precedenceChild runs in a mount namespace of its own (see
// TestLoadRESTConfigPrecedence): it mounts the test's directory over /etc,
// then loads each case and prints the hosts (or errors) as JSON.
func precedenceChild() int {
	var cases []precedenceCase
	if err := json.Unmarshal([]byte(os.Getenv(precedenceChildEnv)), &cases); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// Private first: nothing mounted here may reach the host's namespace.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		fmt.Fprintln(os.Stderr, "make mounts private:", err)
		return 2
	}
	if err := syscall.Mount(os.Getenv(precedenceEtcEnv), "/etc", "", syscall.MS_BIND, ""); err != nil {
		fmt.Fprintln(os.Stderr, "mount over /etc:", err)
		return 2
	}
	k3sDir, homeFile := filepath.Dir(K3sKubeconfig), clientcmd.RecommendedHomeFile
	var got []string
	for _, c := range cases {
		_ = os.Remove(K3sKubeconfig)
		_ = os.Remove(homeFile)
		if c.K3s {
			writeKubeconfig(failNow{}, k3sDir, filepath.Base(K3sKubeconfig), "https://k3s:6443")
		}
		if c.Home {
			writeKubeconfig(failNow{}, filepath.Dir(homeFile), filepath.Base(homeFile), "https://home:6443")
		}
		_ = os.Setenv("KUBECONFIG", c.Env)
		cfg, err := LoadRESTConfig(c.Explicit, "")
		if err != nil {
			got = append(got, err.Error())
		} else {
			got = append(got, cfg.Host)
		}
	}
	out, _ := json.Marshal(got)
	_, _ = os.Stdout.Write(out)
	return 0
}

// failNow is the little of testing.T writeKubeconfig needs, in the child.
type failNow struct{ testing.TB }

func (failNow) Helper()           {}
func (failNow) Fatal(args ...any) { fmt.Fprintln(os.Stderr, args...); os.Exit(2) }

func TestLoadRESTConfigErrors(t *testing.T) {
	// A $KUBECONFIG naming only missing files is as good as no kubeconfig.
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	if _, err := LoadRESTConfig("", ""); !errors.Is(err, ErrNoKubeconfig) {
		t.Errorf("no kubeconfig anywhere: err = %v, want ErrNoKubeconfig", err)
	}
	path := writeKubeconfig(t, t.TempDir(), "k", "https://x:6443")
	if _, err := LoadRESTConfig(path, "missing-context"); err == nil {
		t.Error("an unknown context must be an error")
	}
	if _, err := LoadRESTConfig(path, "other"); err != nil {
		t.Errorf("a named context: %v", err)
	}
}
