package k3s

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/agent/internal/agenttest"
)

func TestEdgeworkerInstructions(t *testing.T) {
	v := agenttest.Validated(t, nil)
	out := EdgeworkerInstructions(v, "edge-1", netip.MustParseAddr("10.244.244.5"), "v1.34.4+k3s1", "")
	for _, want := range []string{`server: "https://10.244.244.1:6443"`, `token-file: "/etc/rancher/k3s/cluster-token"`, `node-ip: "10.244.244.5"`,
		`- "node-role.sitecon.io/edgeworker=true"`, "k3s agent", "10.244.244.5/28", "v1.34.4+k3s1"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, agenttest.GoodToken) {
		t.Error("the token was printed")
	}
	if !strings.Contains(out, "No cluster CA was found on this node to pin") {
		t.Errorf("instructions that pin no CA do not say so:\n%s", out)
	}
	// Every key is a k3s agent flag (token-file included).
	for _, line := range strings.Split(out, "\n") {
		if key, _, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, " ") {
			if !slices.Contains(append(k3sFlags["agent"], "token-file"), key) {
				t.Errorf("%s is not a k3s agent flag", key)
			}
		}
	}
}
