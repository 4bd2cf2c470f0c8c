package sitebox

import (
	"net/netip"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Every node a site can run has its own name, a valid node name, and the
// first 26 keep the names the tests and the demo use.
func TestNodeNamesAreDistinctValidNames(t *testing.T) {
	seen := map[string]int{}
	for i := range MaxNodes {
		name := NodeName(i)
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Fatalf("node %d is named %q: %v", i, name, errs)
		}
		if j, ok := seen[name]; ok {
			t.Fatalf("nodes %d and %d are both named %q", j, i, name)
		}
		seen[name] = i
	}
	for i, want := range map[int]string{0: "node-a", 1: "node-b", 25: "node-z", 26: "node-aa", 29: "node-ad", 52: "node-ba"} {
		if got := NodeName(i); got != want {
			t.Errorf("NodeName(%d) = %q, want %q", i, got, want)
		}
	}
}

// The VIP in a site's records is no node's address, at any size of site.
func TestVIPIsNoNodesAddress(t *testing.T) {
	prefix := netip.MustParsePrefix("127.188.245.0/24")
	vip := vipAddr(prefix)
	if !prefix.Contains(vip) {
		t.Fatalf("the VIP %s is outside the node network %s", vip, prefix)
	}
	for i := range MaxNodes {
		if a := nodeAddr(prefix, i); a == vip {
			t.Fatalf("node %d (%s) has the VIP's address %s", i, NodeName(i), a)
		}
	}
}

// A bootstrap-mode site's cluster network holds every node it can run and
// the VIP: a formation refuses a prefix with fewer host addresses.
func TestBootPrefixHoldsEveryNode(t *testing.T) {
	for nodes := 1; nodes <= MaxNodes; nodes++ {
		prefix := netip.MustParsePrefix(bootPrefix(nodes))
		hosts := 1<<(32-prefix.Bits()) - 2
		if hosts < nodes+1 {
			t.Fatalf("%d nodes: %s has %d host addresses, fewer than the nodes and the VIP", nodes, prefix, hosts)
		}
	}
}
