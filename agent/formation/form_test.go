package formation

import (
	"bytes"
	"errors"
	mathrand "math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
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

func TestBundleRoundTripAndChecksum(t *testing.T) {
	plan, err := Plan(formRequest())
	if err != nil {
		t.Fatal(err)
	}
	line, err := plan.Nodes[1].Encode()
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(line, " \n") || !strings.HasPrefix(line, BundlePrefix) {
		t.Errorf("bundle is not one line: %q", line)
	}
	got, err := DecodeBundle(line[:40] + "\n  " + line[40:]) // wrapped by a terminal
	if err != nil {
		t.Fatal(err)
	}
	if got != plan.Nodes[1] {
		t.Errorf("round trip: %+v != %+v", got, plan.Nodes[1])
	}
	// Any single mistyped character is caught.
	for i := len(BundlePrefix); i < len(line); i += 7 {
		typo := []byte(line)
		typo[i] ^= 0x01
		if _, err := DecodeBundle(string(typo)); err == nil {
			t.Fatalf("typo at %d accepted", i)
		}
	}
	if _, err := DecodeBundle(line[:len(line)-5]); !errors.Is(err, ErrBundleChecksum) {
		t.Errorf("cut short: %v", err)
	}
	if _, err := DecodeBundle("hello"); err == nil || !strings.Contains(err.Error(), "not a sitecon join bundle") {
		t.Errorf("not a bundle: %v", err)
	}
}

func TestNodeFilesWrite(t *testing.T) {
	plan, err := Plan(formRequest())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, err := plan.Nodes[2].Files(dir, "eth7")
	if err != nil {
		t.Fatal(err)
	}
	if err := files.Write(); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(filepath.Join(dir, "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClusterInterface != "eth7" || cfg.TokenFile != filepath.Join(dir, "token") {
		t.Errorf("config = %+v", cfg)
	}
	for _, name := range []string{"cluster.json", "token"} {
		st, _ := os.Stat(filepath.Join(dir, name))
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", name, st.Mode().Perm())
		}
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "cluster.json")); bytes.Contains(data, []byte(plan.Token.Reveal())) {
		t.Error("the config must name the token file, not hold the token")
	}
	entries, _ := os.ReadDir(dir)
	names := []string{}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"cluster.json", "token"}) {
		t.Errorf("dir holds %v", names)
	}
}

func FuzzDecodeBundle(f *testing.F) {
	plan, err := Plan(formRequest())
	if err != nil {
		f.Fatal(err)
	}
	line, _ := plan.Nodes[0].Encode()
	f.Add(line)
	f.Add(BundlePrefix + "e30.44136fa355b3678a")
	f.Add(BundlePrefix + "....")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := DecodeBundle(s)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to a bundle that decodes the same.
		again, err := b.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if b2, err := DecodeBundle(again); err != nil || b2 != b {
			t.Fatalf("re-encode: %v %+v != %+v", err, b2, b)
		}
	})
}

func TestNextFreeAddress(t *testing.T) {
	network := netip.MustParsePrefix("10.244.244.0/29")
	used := []netip.Addr{netip.MustParseAddr("10.244.244.1"), netip.MustParseAddr("10.244.244.2"), netip.MustParseAddr("10.244.244.4")}
	if got, err := NextFreeAddress(network, used); err != nil || got.String() != "10.244.244.3" {
		t.Errorf("got %s, %v", got, err)
	}
	for i := 3; i <= 6; i++ {
		used = append(used, netip.AddrFrom4([4]byte{10, 244, 244, byte(i)}))
	}
	if _, err := NextFreeAddress(network, used); err == nil {
		t.Error("a full prefix (broadcast excluded) must be an error")
	}
}
