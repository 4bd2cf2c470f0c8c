package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The layout's rooms import only down the list (docs/DESIGN.md, "Layout"): a
// screen never reaches into the agent, the agent never into the console,
// kube into nothing of sitecon's but its own safety rules. A change that
// adds an import across the layout fails here, not in review.
func TestPackagesImportOnlyDownTheLayout(t *testing.T) {
	const mod = "github.com/sitecon/sitecon"
	allowed := map[string][]string{
		// views names doctor's finding ids on the alerts it shares with it.
		"views":  {"ui", "keymap", "kube", "kube/flow", "kube/safety", "audit", "doctor"},
		"ui":     {"keymap", "kube"},
		"keymap": {},
		"agent": {"agent/config", "agent/k3s", "agent/formation", "agent/statusserver", "agent/configwatch",
			"agent/bringup", "agent/apps", "agent/applogs", "agent/localapi", "agent/workloads", "agent/vncbridge", "agent/drainrequest", "kube", "kube/flow", "kube/safety", "audit", "nodecheck",
			// The node report's network section: the cluster interface's MTU, the address probe.
			"netcfg"},
		// The agent's parts, each below the Agent that wires them.
		"agent/bringup":      {"agent/config", "agent/k3s", "agent/formation", "agent/statusserver", "agent/localapi", "agent/workloads", "kube", "netcfg"},
		"agent/statusserver": {"agent/config", "agent/k3s", "agent/formation", "agent/localapi", "kube"},
		"agent/configwatch":  {"agent/config", "agent/formation"},
		"agent/formation":    {"agent/config", "agent/k3s", "agent/localapi", "kube", "privdir"},
		"agent/k3s":          {"agent/config", "agent/procexit"},
		"agent/procexit":     {},
		"agent/apps":         {"agent/config", "agent/localapi", "agent/workloads", "kube", "kube/safety"},
		"agent/applogs":      {"agent/config", "kube"},
		"agent/config":       {},
		// The drains the device requests run the drain flow.
		"agent/drainrequest": {"agent/config", "kube", "kube/flow"},
		"agent/localapi":     {},
		"agent/workloads":    {},
		// sitecon doctor's checks: they read the cluster (kube) and the
		// quorum arithmetic, nothing of the agent or the console.
		"doctor": {"kube", "kube/safety", "nodecheck"},
		// The checks that need the node itself, made by each agent for its
		// report (and by the doctor on this machine): the report's shapes.
		"nodecheck": {"kube"},
		// sitecon bundle's collection: it reads the cluster (kube), asks
		// the agents on the status port and writes files (agent/config).
		"bundle": {"kube", "agent/config"},
		// Reading each agent's own report when the cluster API does not
		// answer: the cluster key (agent/config) and the report's shape
		// (kube); main hands the reports to the console and status.
		"nodereport":      {"agent/config", "agent/localapi", "kube"},
		"agent/vncbridge": {"kube"},
		"kube":            {"kube/safety"},
		"kube/flow":       {"kube", "kube/safety", "audit"},
		"kube/safety":     {},
		"netcfg":          {},
		"audit":           {"privdir"},
		"privdir":         {},
		// Packages only tests import: fixtures, kept below what they test.
		"agent/internal/agenttest": {"agent/config"},
		"audit/audittest":          {"audit"},
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], mod), "/")
		ok, ruled := allowed[pkg]
		if !ruled {
			// main and test/… may import anything; a new package gets a
			// rule here, or it would escape the layout unseen.
			if pkg != "" && !strings.HasPrefix(pkg, "test/") {
				t.Errorf("%s has no rule: add it to the layout (docs/DESIGN.md) and here", pkg)
			}
			continue
		}
		seen++
		for _, imp := range fields[1:] {
			dep, ours := strings.CutPrefix(imp, mod+"/")
			if !ours {
				continue
			}
			if !slices.Contains(ok, dep) {
				t.Errorf("%s imports %s: not below it in the layout (allowed: %v)", pkg, dep, ok)
			}
		}
	}
	if seen != len(allowed) {
		t.Errorf("go list showed %d of the %d ruled packages: a package moved or was renamed; update the rules", seen, len(allowed))
	}
}
