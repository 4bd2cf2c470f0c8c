package k3s

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
)

func FuzzParseAndValidateConfig(f *testing.F) {
	seed, _ := json.Marshal(agenttest.Config())
	f.Add(seed)
	f.Add([]byte(`{"cluster_ip_prefix": "10.0.0.255/24", "join_server_ip": "10.0.0.0"}`))
	f.Add([]byte(`{"resource_labels": {"a/b": "c"}, "encrypted_cluster_token": {"x": 1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data)
		if err != nil {
			return
		}
		v, err := config.Validate(c, agenttest.Env(agenttest.GoodToken))
		if err != nil {
			var verr *config.ValidationError
			if !errors.As(err, &verr) || len(verr.Problems) == 0 {
				t.Fatalf("validation failed without naming a field: %v", err)
			}
			return
		}
		// Whatever validates renders, and the addresses it renders are in
		// the prefix.
		k := Render(v, DefaultPaths, false)
		if !v.Network.Contains(v.NodeIP) || !v.Network.Contains(v.JoinIP) || len(k.Files) == 0 {
			t.Fatalf("validated config renders outside its prefix: %+v", v)
		}
	})
}
