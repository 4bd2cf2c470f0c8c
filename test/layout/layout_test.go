// Package layout holds the tests of the repository's shape: which package
// may import which, and how long a product file may grow.
package layout

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// moduleRoot is the repository's root: go list and the file walk start there.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMOD: %v (%q)", err, out)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// The layout's rooms import only down the list (docs/DESIGN.md, "Layout"): a
// screen never reaches into the agent, the agent never into the console,
// kube into nothing of sitecon's but its own safety rules. A change that
// adds an import across the layout fails here, not in review.
func TestPackagesImportOnlyDownTheLayout(t *testing.T) {
	const mod = "github.com/sitecon/sitecon"
	allowed := map[string][]string{
		// main only calls the command tree.
		"": {"cmd"},
		// views names doctor's finding ids on the alerts it shares with it.
		"views":  {"ui", "keymap", "kube", "kube/change", "kube/nodestate", "kube/streams", "kube/flow", "kube/safety", "audit", "doctor"},
		"ui":     {"keymap", "kube"},
		"keymap": {},
		"agent": {"agent/config", "agent/k3s", "agent/formation", "agent/statusserver", "agent/configwatch",
			"agent/bringup", "agent/nodecred", "agent/apps", "agent/applogs", "agent/localapi", "agent/workloads", "agent/vncbridge", "agent/drainrequest", "kube", "kube/access", "kube/nodestate", "kube/flow", "kube/safety", "audit", "nodecheck",
			// The node report's network section: the cluster interface's MTU, the address probe.
			"netcfg"},
		// The agent's parts, each below the Agent that wires them.
		"agent/bringup":      {"agent/config", "agent/k3s", "agent/formation", "agent/statusserver", "agent/localapi", "agent/workloads", "kube", "kube/access", "kube/nodestate", "netcfg"},
		"agent/statusserver": {"agent/config", "agent/k3s", "agent/formation", "agent/localapi", "kube", "kube/nodestate"},
		"agent/configwatch":  {"agent/config", "agent/formation"},
		"agent/formation":    {"agent/config", "agent/k3s", "agent/localapi", "kube", "privdir"},
		"agent/k3s":          {"agent/config", "agent/procexit"},
		"agent/procexit":     {},
		"agent/apps":         {"agent/config", "agent/localapi", "agent/workloads", "kube", "kube/safety"},
		"agent/applogs":      {"agent/config", "kube", "kube/streams"},
		"agent/config":       {},
		"agent/nodecred":     {"agent/config"},
		// The drains the device requests run the drain flow.
		"agent/drainrequest": {"agent/config", "kube", "kube/change", "kube/flow"},
		"agent/localapi":     {},
		"agent/workloads":    {},
		// sitecon doctor's checks: they read the cluster (kube) and the
		// quorum arithmetic, nothing of the agent or the console.
		"doctor": {"kube", "kube/nodestate", "kube/safety", "nodecheck", "audit"},
		// The checks that need the node itself, made by each agent for its
		// report (and by the doctor on this machine): the report's shapes.
		"nodecheck": {"kube", "kube/nodestate"},
		// sitecon bundle's collection: it reads the cluster (kube), asks
		// the agents on the status port and writes files (agent/config).
		"bundle": {"kube", "agent/config"},
		// Reading each agent's own report when the cluster API does not
		// answer: the cluster key (agent/config) and the report's shape
		// (kube); main hands the reports to the console and status.
		"nodereport":      {"agent/config", "agent/localapi", "kube", "kube/nodestate"},
		"agent/vncbridge": {"kube", "kube/streams"},
		"kube":            {"kube/safety"},
		"kube/access":     {"kube"},
		"kube/streams":    {"kube"},
		"kube/nodestate":  {"kube", "kube/safety"},
		"kube/change":     {"kube", "kube/nodestate", "kube/safety"},
		"kube/flow":       {"kube", "kube/change", "kube/streams", "kube/safety", "audit"},
		"kube/safety":     {},
		"netcfg":          {},
		"audit":           {"privdir"},
		"privdir":         {},
		// Packages only tests import: fixtures, kept below what they test.
		"agent/internal/agenttest": {"agent/config"},
		"audit/audittest":          {"audit"},
		"kube/kubetest":            {},
	}
	list := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	list.Dir = moduleRoot(t)
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], mod), "/")
		ok, ruled := allowed[pkg]
		if !ruled {
			// The command tree and test/… may import anything; a new
			// package gets a rule here, or it would escape the layout unseen.
			if pkg != "cmd" && !strings.HasPrefix(pkg, "test/") {
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

// maxProductLines is how long a product Go file may grow: past it a file
// holds more than one idea, and a reader cannot keep it in mind.
const maxProductLines = 600

// No product Go file is longer than maxProductLines: tests, generated
// files and test/… (simulators and harnesses, not the product) aside.
func TestProductFilesStayShort(t *testing.T) {
	root := moduleRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "*.go").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): the product's files cannot be told from others", err)
	}
	checked := 0
	for _, rel := range strings.Fields(string(out)) {
		if strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(rel, "test/") || strings.HasPrefix(filepath.Base(rel), "zz_generated") {
			continue
		}
		lines, generated, err := countLines(filepath.Join(root, rel))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		checked++
		if !generated && lines > maxProductLines {
			t.Errorf("%s has %d lines, over the %d a product file may have: split it by what its parts do", rel, lines, maxProductLines)
		}
	}
	if checked == 0 {
		t.Fatal("no product Go file was found: the walk is broken")
	}
}

// countLines counts a file's lines and says whether it is generated (Go's
// convention: a "// Code generated … DO NOT EDIT." line).
func countLines(path string) (lines int, generated bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		lines++
		line := sc.Text()
		if strings.HasPrefix(line, "// Code generated ") && strings.HasSuffix(line, " DO NOT EDIT.") {
			generated = true
		}
	}
	return lines, generated, sc.Err()
}

// The repository's root holds main.go and the build's files; the commands
// live in cmd/, one file per command, and the rest in packages.
func TestRootHoldsOnlyMain(t *testing.T) {
	root := moduleRoot(t)
	gofiles, err := filepath.Glob(filepath.Join(root, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range gofiles {
		if filepath.Base(f) != "main.go" {
			t.Errorf("%s is at the repository's root: commands belong in cmd/, the rest in a package", filepath.Base(f))
		}
	}
}
