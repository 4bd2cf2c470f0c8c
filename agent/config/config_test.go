package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

const goodToken = "3f9c2a7e4b1d8f6a0c5e9b2d7a4f1c8e6b3d0a9f5c2e7b4d1a8f6c3e0b9d5a2f"

func validConfig() *Config {
	return &Config{
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

func testEnv(token string) Environment {
	return Environment{
		InterfaceExists: func(name string) bool { return name == "eth1" },
		ReadFile: func(path string) ([]byte, error) {
			if path != "/persist/sitecon/token" {
				return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
			}
			return []byte(token + "\n"), nil
		},
	}
}

func TestValidateAcceptsAGoodConfig(t *testing.T) {
	v, err := Validate(validConfig(), testEnv(goodToken))
	if err != nil {
		t.Fatal(err)
	}
	if v.NodeIP.String() != "10.244.244.2" || v.JoinIP.String() != "10.244.244.1" || v.Network.String() != "10.244.244.0/28" || v.IsSeed {
		t.Errorf("parsed = %s %s %s seed=%v", v.NodeIP, v.JoinIP, v.Network, v.IsSeed)
	}
	if v.Token.Reveal() != goodToken {
		t.Errorf("token not read (trailing newline should be trimmed)")
	}
}

// Each rule, alone: the config fails on exactly that field.
func TestValidateRules(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*Config)
		token string
		field string
		say   string
	}{
		{"cluster name missing", func(c *Config) { c.ClusterName = "" }, goodToken, "cluster_name", "missing"},
		{"cluster name bad", func(c *Config) { c.ClusterName = "site 1!" }, goodToken, "cluster_name", "not a valid name"},
		{"cluster id not a uuid", func(c *Config) { c.ClusterID = "7f3e2a10" }, goodToken, "cluster_id", "not a UUID"},
		{"node uuid missing", func(c *Config) { c.NodeUUID = "" }, goodToken, "node_uuid", "missing"},
		{"node name bad", func(c *Config) { c.NodeName = "Node_B" }, goodToken, "node_name", "not a valid Kubernetes node name"},
		{"interface missing", func(c *Config) { c.ClusterInterface = "" }, goodToken, "cluster_interface", "missing"},
		{"interface absent", func(c *Config) { c.ClusterInterface = "eth9" }, goodToken, "cluster_interface", `"eth9" does not exist`},
		{"prefix garbage", func(c *Config) { c.ClusterIPPrefix = "10.244.244.2" }, goodToken, "cluster_ip_prefix", "does not parse"},
		{"prefix ipv6", func(c *Config) { c.ClusterIPPrefix = "fd00::2/64" }, goodToken, "cluster_ip_prefix", "IPv4"},
		{"prefix too small", func(c *Config) { c.ClusterIPPrefix = "10.244.244.2/30" }, goodToken, "cluster_ip_prefix", "no room"},
		{"node ip is network", func(c *Config) { c.ClusterIPPrefix = "10.244.244.0/28"; c.JoinServerIP = "10.244.244.1" }, goodToken, "cluster_ip_prefix", "network address"},
		{"node ip is broadcast", func(c *Config) { c.ClusterIPPrefix = "10.244.244.15/28" }, goodToken, "cluster_ip_prefix", "broadcast address"},
		{"join ip missing", func(c *Config) { c.JoinServerIP = "" }, goodToken, "join_server_ip", "missing"},
		{"join ip garbage", func(c *Config) { c.JoinServerIP = "seed" }, goodToken, "join_server_ip", "not an IP address"},
		{"join ip outside prefix", func(c *Config) { c.JoinServerIP = "10.244.245.1" }, goodToken, "join_server_ip", "outside the cluster prefix"},
		{"join ip is broadcast", func(c *Config) { c.JoinServerIP = "10.244.244.15" }, goodToken, "join_server_ip", "not a host address"},
		{"worker is seed", func(c *Config) { c.IsWorkerNode = true; c.JoinServerIP = "10.244.244.2" }, goodToken, "is_worker_node", "cannot be the seed"},
		{"no token", func(c *Config) { c.TokenFile = "" }, goodToken, "token_file", "no cluster token"},
		{"token file unreadable", func(c *Config) { c.TokenFile = "/nope" }, goodToken, "token_file", "cannot read /nope"},
		{"token short", func(*Config) {}, "0123456789abcdef", "token_file", "entropy"},
		{"token repetitive", func(*Config) {}, strings.Repeat("ab", 64), "token_file", "entropy"},
		{"token and encrypted", func(c *Config) { c.EncryptedClusterToken = json.RawMessage(`{"x":1}`) }, goodToken, "token_file", "both"},
		{"bad label", func(c *Config) { c.ResourceLabels = map[string]string{"gpu": "two gpus"} }, goodToken, "resource_labels", "not a valid Kubernetes label"},
		{"reserved label", func(c *Config) { c.ResourceLabels = map[string]string{"node-uuid": "x"} }, goodToken, "resource_labels", "set by the agent"},
		{"cluster type", func(c *Config) { c.ClusterType = "rke2" }, goodToken, "cluster_type", "not supported"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.edit(c)
			_, err := Validate(c, testEnv(tc.token))
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
			if got := verr.Fields(); !slices.Equal(got, []string{tc.field}) {
				t.Errorf("fields = %v, want just %s:\n%v", got, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.say) {
				t.Errorf("error %q does not say %q", err, tc.say)
			}
			if strings.Contains(err.Error(), goodToken) {
				t.Errorf("the token leaked into an error")
			}
		})
	}
}

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	c := &Config{ClusterIPPrefix: "10.244.244.0/28", JoinServerIP: "10.9.9.9", ClusterID: "x", NodeName: "N!"}
	_, err := Validate(c, testEnv(goodToken))
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("err = %v", err)
	}
	want := []string{"cluster_name", "cluster_id", "node_uuid", "node_name", "cluster_interface", "cluster_ip_prefix", "join_server_ip", "token_file"}
	if got := verr.Fields(); !slices.Equal(got, want) {
		t.Errorf("fields = %v, want %v", got, want)
	}
	if !strings.HasPrefix(err.Error(), fmt.Sprintf("invalid cluster config, %d problem(s):", len(want))) {
		t.Errorf("message = %q", err)
	}
}

func TestParseConfig(t *testing.T) {
	good := `{"cluster_name": "site1", "cluster_id": "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60",
	 "cluster_interface": "eth1", "cluster_ip_prefix": "10.244.244.2/28",
	 "is_worker_node": false, "join_server_ip": "10.244.244.1",
	 "token_file": "/persist/sitecon/token", "encrypted_cluster_token": null,
	 "node_name": "node-b", "node_uuid": "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "resource_labels": {"gpu": "2"}}`
	c, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if c.ClusterName != "site1" || c.ResourceLabels["gpu"] != "2" || c.EncryptedClusterToken != nil {
		t.Errorf("parsed %+v", c)
	}
	for name, bad := range map[string]string{
		"misspelt field": `{"cluster_nmae": "x"}`,
		"not an object":  `[1,2]`,
		"trailing data":  `{} {}`,
		"wrong type":     `{"is_worker_node": "yes"}`,
		"truncated":      `{"cluster_name": "x"`,
	} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("%s: accepted %s", name, bad)
		}
	}
}

func TestSecretNeverPrints(t *testing.T) {
	s := Secret(goodToken)
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "token", s, "v", &Validated{Token: s, Config: validConfig()})
	js, _ := json.Marshal(struct{ T Secret }{s})
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %s %q %#v %x", s, s, s, s, s), buf.String(), string(js)} {
		if strings.Contains(out, goodToken) || strings.Contains(out, fmt.Sprintf("%x", goodToken)) {
			t.Errorf("secret printed: %s", out)
		}
	}
}

func TestEntropyBits(t *testing.T) {
	cases := []struct {
		token string
		pass  bool
	}{
		{goodToken, true}, // 32 random bytes, hex
		{"q2Vh7X0pZ8rN4kT1bW6yD3mF9sJ5cL0gH8uE2aR7vK4=", true}, // 32 random bytes, base64
		{"password123password123password123", false},
		{strings.Repeat("a", 200), false},
		{strings.Repeat("abcd", 50), false},
		{"", false},
	}
	for _, c := range cases {
		if got := EntropyBits(c.token) >= MinTokenEntropyBytes*8; got != c.pass {
			t.Errorf("%q: %.0f bits, pass=%v want %v", c.token, EntropyBits(c.token), got, c.pass)
		}
	}
}
