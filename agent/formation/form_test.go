package formation

import (
	"errors"
	mathrand "math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/k3s"
)

func formRequest() FormRequest {
	return FormRequest{
		ClusterName: "site1",
		Interface:   "eth1",
		Nodes:       []FormNode{{Name: "node-a"}, {Name: "node-b", UUID: "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}, {Name: "node-c"}, {Name: "node-d", Worker: true}},
		Seed:        "node-b",
		// Deterministic randomness: UUIDs and token are reproducible.
		Rand: mathrand.NewChaCha8([32]byte{1, 2, 3}),
	}
}

func TestPlanAssignsAddressesAndOneToken(t *testing.T) {
	plan, err := Plan(formRequest())
	if err != nil {
		t.Fatal(err)
	}
	wantOrder := []string{"node-b", "node-a", "node-c", "node-d"}
	wantAddr := []string{"10.244.244.1/28", "10.244.244.2/28", "10.244.244.3/28", "10.244.244.4/28"}
	for i, n := range plan.Nodes {
		if n.NodeName != wantOrder[i] || n.ClusterIPPrefix != wantAddr[i] || n.JoinServerIP != "10.244.244.1" || n.ClusterID != plan.ClusterID || n.Token != plan.Token {
			t.Errorf("node %d = %+v, want %s at %s joining the seed", i, n, wantOrder[i], wantAddr[i])
		}
	}
	if plan.Nodes[0].NodeUUID != "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d" || !config.UUIDPattern.MatchString(plan.Nodes[1].NodeUUID) {
		t.Errorf("UUIDs: given one kept, others generated: %s %s", plan.Nodes[0].NodeUUID, plan.Nodes[1].NodeUUID)
	}
	if !plan.Nodes[3].IsWorkerNode || config.EntropyBits(plan.Token.Reveal()) < config.MinTokenEntropyBytes*8 {
		t.Errorf("worker flag or token entropy wrong")
	}
	// Every node's config validates and renders the role it was given.
	env := config.Environment{InterfaceExists: func(string) bool { return true }, ReadFile: func(string) ([]byte, error) { return []byte(plan.Token.Reveal()), nil }}
	wantRoles := []k3s.Role{k3s.RoleSeed, k3s.RoleServer, k3s.RoleServer, k3s.RoleAgent}
	for i, n := range plan.Nodes {
		files, err := n.Files(t.TempDir(), "")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse(files.Config)
		if err != nil {
			t.Fatal(err)
		}
		v, err := config.Validate(cfg, env)
		if err != nil {
			t.Fatalf("%s: %v", n.NodeName, err)
		}
		if k3s.DecideRole(v) != wantRoles[i] {
			t.Errorf("%s role %s, want %s", n.NodeName, k3s.DecideRole(v), wantRoles[i])
		}
	}
}

func TestPlanRefusals(t *testing.T) {
	cases := []struct {
		name string
		edit func(*FormRequest)
		say  string
	}{
		{"overlap", func(r *FormRequest) { r.ExistingPrefixes = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")} }, "overlaps 10.244.0.0/16"},
		{"too small", func(r *FormRequest) { r.Prefix = "10.244.244.0/30" }, "2 host addresses for 4 nodes"},
		{"bad prefix", func(r *FormRequest) { r.Prefix = "fd00::/64" }, "not an IPv4 prefix"},
		{"duplicate", func(r *FormRequest) { r.Nodes = append(r.Nodes, FormNode{Name: "node-a"}) }, "named twice"},
		{"worker seed", func(r *FormRequest) { r.Seed = "node-d" }, "is a worker node"},
		{"unknown seed", func(r *FormRequest) { r.Seed = "node-z" }, "not one of the nodes"},
		{"bad uuid", func(r *FormRequest) { r.Nodes[0].UUID = "123" }, "not a UUID"},
		{"no interface", func(r *FormRequest) { r.Interface = "" }, "interface: missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := formRequest()
			tc.edit(&req)
			_, err := Plan(req)
			var verr *config.ValidationError
			if !errors.As(err, &verr) || !strings.Contains(err.Error(), tc.say) {
				t.Errorf("err = %v, want a validation error saying %q", err, tc.say)
			}
		})
	}
}
