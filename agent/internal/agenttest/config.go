// Package agenttest holds what the agent's packages test with: the node
// config of the config package's own tests (node-b of site1, its token in
// a file) and a cluster CA as k3s serves it. Only tests import it.
package agenttest

import (
	"encoding/json"
	"io/fs"
	"os"
	"testing"

	"github.com/sitecon/sitecon/agent/config"
)

// GoodToken is the token in node-b's token file.
const GoodToken = "3f9c2a7e4b1d8f6a0c5e9b2d7a4f1c8e6b3d0a9f5c2e7b4d1a8f6c3e0b9d5a2f"

// TokenPassword is a cluster token's password, the part after "::server:"
// in k3s's secure form.
const TokenPassword = "5e1b0c7a9d2f4e6b8a1c3d5f7e9b0a2c4d6f8e1b3a5c7d9f0e2b4a6c8d0f1e3a"

// Config is node-b's config, a fresh copy each call.
func Config() *config.Config {
	return &config.Config{
		ClusterName:      "site1",
		ClusterID:        "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60",
		ClusterInterface: "eth1",
		ClusterIPPrefix:  "10.244.244.2/28",
		JoinServerIP:     "10.244.244.1",
		TokenFile:        "/persist/sitecon/token",
		NodeName:         "node-b",
		NodeUUID:         "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
		ResourceLabels:   map[string]string{"gpu": "2"},
	}
}

// Env is a host with the cluster interface eth1 whose token file holds
// token.
func Env(token string) config.Environment {
	return config.Environment{
		InterfaceExists: func(name string) bool { return name == "eth1" },
		ReadFile: func(path string) ([]byte, error) {
			if path != "/persist/sitecon/token" {
				return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
			}
			return []byte(token + "\n"), nil
		},
	}
}

// Validated is node-b's config after edit (nil: none), validated on Env.
func Validated(t *testing.T, edit func(*config.Config)) *config.Validated {
	t.Helper()
	c := Config()
	if edit != nil {
		edit(c)
	}
	v, err := config.Validate(c, Env(GoodToken))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// WriteConfig writes node-b's config to path.
func WriteConfig(t *testing.T, path string) {
	t.Helper()
	data, err := json.Marshal(Config())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
