package formation

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
	"github.com/sitecon/sitecon/agent/k3s"
)

// formedSeed plans site1 (three servers, cluster addresses from
// 10.250.0.0/28) and writes its first node's files into dir, as the seed
// holds them after formation.
func formedSeed(t *testing.T, dir string) (*FormPlan, NodeFiles) {
	t.Helper()
	plan, err := Plan(FormRequest{ClusterName: "site1", Interface: "lo", Prefix: "10.250.0.0/28",
		Nodes: []FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	files, err := plan.Nodes[0].Files(dir, "")
	if err == nil {
		err = files.Write()
	}
	if err != nil {
		t.Fatal(err)
	}
	return plan, files
}

// join-info: a server's bundle takes the first free address of the prefix
// and decodes to this cluster; an edgeworker gets the k3s setup and never
// the token; a wrong role or a missing UUID is a clear error.
func TestJoinInfo(t *testing.T) {
	dir := t.TempDir()
	plan, files := formedSeed(t, dir)
	v, err := LoadClusterConfig(files.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	used := []netip.Addr{netip.MustParseAddr("10.250.0.2"), netip.MustParseAddr("10.250.0.3")}
	// Never the machine's own k3s data: this node's holds no CA.
	paths := k3s.Paths{DataDir: t.TempDir()}
	text, err := JoinInfo(v, paths, JoinRequest{Role: "server", NodeName: "node-d", NodeUUID: "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d", NodeIP: ""}, used, "")
	if err != nil {
		t.Fatal(err)
	}
	line, err := BundleFromText(text)
	if err != nil {
		t.Fatalf("no bundle in:\n%s", text)
	}
	if strings.Contains(text, "--join "+line) {
		t.Errorf("join-info puts the bundle in a command line:\n%s", text)
	}
	b, err := DecodeBundle(line)
	if err != nil || b.ClusterID != plan.ClusterID || b.ClusterIPPrefix != "10.250.0.4/28" || b.NodeName != "node-d" || b.IsWorkerNode {
		t.Fatalf("bundle %+v, %v", b, err)
	}
	edge, err := JoinInfo(v, paths, JoinRequest{Role: "edgeworker", NodeName: "edge-1", NodeUUID: "", NodeIP: ""}, used, "v1.34.4+k3s1")
	if err != nil || !strings.Contains(edge, "k3s agent") || strings.Contains(edge, plan.Token.Reveal()) {
		t.Fatalf("edgeworker: %v\n%s", err, edge)
	}
	if _, err := JoinInfo(v, paths, JoinRequest{Role: "hub", NodeName: "x", NodeUUID: "", NodeIP: ""}, nil, ""); err == nil || !strings.Contains(err.Error(), "server, agent or edgeworker") {
		t.Fatalf("wrong role: %v", err)
	}
	if _, err := JoinInfo(v, paths, JoinRequest{Role: "agent", NodeName: "x", NodeUUID: "", NodeIP: ""}, nil, ""); err == nil || !strings.Contains(err.Error(), "UUID") {
		t.Fatalf("missing UUID: %v", err)
	}
	// The cluster could not be asked which addresses its nodes have: no
	// guess (10.250.0.2 is node-b's), an address must be given.
	const uuid = "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	if text, err := JoinInfo(v, paths, JoinRequest{Role: "agent", NodeName: "node-d", NodeUUID: uuid, NodeIP: ""}, nil, ""); err == nil || !strings.Contains(err.Error(), "--node-ip") {
		t.Fatalf("unknown addresses gave %v\n%s", err, text)
	}
	given, err := JoinInfo(v, paths, JoinRequest{Role: "agent", NodeName: "node-d", NodeUUID: uuid, NodeIP: "10.250.0.9"}, nil, "")
	if err != nil || !strings.Contains(given, "as an agent at 10.250.0.9/28") {
		t.Fatalf("a given address: %v\n%s", err, given)
	}
}

// A member whose k3s keeps its data somewhere else than k3s's default
// (the agent's --k3s-data-dir) hands out bundles that pin the cluster's CA
// it holds there: the new node then joins only a server serving it.
func TestJoinInfoPinsTheCAInTheConfiguredDataDir(t *testing.T) {
	dir := t.TempDir()
	plan, files := formedSeed(t, dir)
	paths := k3s.Paths{ConfigFile: filepath.Join(dir, "k3s", "config.yaml"), DataDir: filepath.Join(dir, "k3s-data")}
	ca := agenttest.NewCA(t, "site1").PEM
	if err := config.WriteFileAtomic(filepath.Join(paths.DataDir, "server", "tls", "server-ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(ca)
	want := hex.EncodeToString(sum[:])
	req := JoinRequest{Role: "server", NodeName: "node-d", NodeUUID: "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d", NodeIP: "10.250.0.9"}
	text, _, err := MakeJoinInfo(JoinSource{ConfigPath: files.ConfigPath, K3sPaths: paths}, ClusterView{}, req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := BundleFromText(text)
	if err != nil {
		t.Fatal(err)
	}
	b, err := DecodeBundle(line)
	if err != nil {
		t.Fatal(err)
	}
	pin, password := config.ParseToken(b.Token.Reveal())
	if pin != want {
		t.Fatalf("a bundle made on a member whose k3s data is in %s pins %q, want the CA there (%s)", paths.DataDir, pin, want)
	}
	if password != plan.Token.Reveal() {
		t.Errorf("the pinned token lost the cluster's password")
	}
	// An edgeworker's k3s is told to pin it too (the token itself is never
	// printed: the technician copies it).
	edge, _, err := MakeJoinInfo(JoinSource{ConfigPath: files.ConfigPath, K3sPaths: paths}, ClusterView{},
		JoinRequest{Role: "edgeworker", NodeName: "edge-1", NodeIP: "10.250.0.10"})
	if err != nil || !strings.Contains(edge, "K10"+want+"::server:") || strings.Contains(edge, plan.Token.Reveal()) {
		t.Errorf("an edgeworker's instructions do not pin the cluster's CA %s (or show the token): %v\n%s", want, err, edge)
	}
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
