package agent

import (
	"io/fs"

	"github.com/sitecon/sitecon/agent/config"
)

// The config fixtures of this package's tests: the same node as the
// config package's own tests (node-b of site1, its token in a file).

const goodToken = "3f9c2a7e4b1d8f6a0c5e9b2d7a4f1c8e6b3d0a9f5c2e7b4d1a8f6c3e0b9d5a2f"

func validConfig() *config.Config {
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

func testEnv(token string) config.Environment {
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
