package agent

import (
	"net/netip"
	"strings"
	"testing"
)

// join-info: a server's bundle takes the first free address of the prefix
// and decodes to this cluster; an edgeworker gets the k3s setup and never
// the token; a wrong role or a missing UUID is a clear error.
func TestJoinInfo(t *testing.T) {
	dir := t.TempDir()
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
	v, err := LoadClusterConfig(files.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	used := []netip.Addr{netip.MustParseAddr("10.250.0.2"), netip.MustParseAddr("10.250.0.3")}
	text, err := JoinInfo(v, JoinRequest{Role: "server", NodeName: "node-d", NodeUUID: "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d", NodeIP: ""}, used, "")
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
	edge, err := JoinInfo(v, JoinRequest{Role: "edgeworker", NodeName: "edge-1", NodeUUID: "", NodeIP: ""}, used, "v1.34.4+k3s1")
	if err != nil || !strings.Contains(edge, "k3s agent") || strings.Contains(edge, plan.Token.Reveal()) {
		t.Fatalf("edgeworker: %v\n%s", err, edge)
	}
	if _, err := JoinInfo(v, JoinRequest{Role: "hub", NodeName: "x", NodeUUID: "", NodeIP: ""}, nil, ""); err == nil || !strings.Contains(err.Error(), "server, agent or edgeworker") {
		t.Fatalf("wrong role: %v", err)
	}
	if _, err := JoinInfo(v, JoinRequest{Role: "agent", NodeName: "x", NodeUUID: "", NodeIP: ""}, nil, ""); err == nil || !strings.Contains(err.Error(), "UUID") {
		t.Fatalf("missing UUID: %v", err)
	}
	// The cluster could not be asked which addresses its nodes have: no
	// guess (10.250.0.2 is node-b's), an address must be given.
	const uuid = "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	if text, err := JoinInfo(v, JoinRequest{Role: "agent", NodeName: "node-d", NodeUUID: uuid, NodeIP: ""}, nil, ""); err == nil || !strings.Contains(err.Error(), "--node-ip") {
		t.Fatalf("unknown addresses gave %v\n%s", err, text)
	}
	given, err := JoinInfo(v, JoinRequest{Role: "agent", NodeName: "node-d", NodeUUID: uuid, NodeIP: "10.250.0.9"}, nil, "")
	if err != nil || !strings.Contains(given, "as an agent at 10.250.0.9/28") {
		t.Fatalf("a given address: %v\n%s", err, given)
	}
}
