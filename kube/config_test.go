package kube

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func writeKubeconfig(t *testing.T, dir, name, server string) string {
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

// The loading rules are clientcmd's: explicit path, then $KUBECONFIG, then
// ~/.kube/config. (The k3s path is taken only where it exists, which a test
// machine cannot arrange without writing to /etc; clientcmd fixes the home
// file at init, so the last rule is checked by its presence in the rules.)
func TestLoadRESTConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	explicit := writeKubeconfig(t, dir, "explicit", "https://explicit:6443")
	env := writeKubeconfig(t, dir, "env", "https://env:6443")

	cases := []struct {
		name, explicit, env, want string
	}{
		{"explicit wins", explicit, env, "https://explicit:6443"},
		{"then KUBECONFIG", "", env, "https://env:6443"},
	}
	t.Setenv("KUBECONFIG", "")
	if rules := LoadingRules(""); !slices.Contains(rules.Precedence, clientcmd.RecommendedHomeFile) && len(rules.Precedence) != 1 {
		t.Errorf("precedence %v lacks ~/.kube/config", rules.Precedence)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", c.env)
			cfg, err := LoadRESTConfig(c.explicit, "")
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != c.want {
				t.Errorf("host = %s, want %s", cfg.Host, c.want)
			}
		})
	}
}

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
