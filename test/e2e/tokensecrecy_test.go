package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/test/netns"
	"github.com/sitecon/sitecon/test/sitebox"
)

// The cluster token is the key to the cluster: whoever holds it can join a
// server and read every secret. On a site whose agents bootstrapped for
// real, after the console has shown every screen and the commands a
// technician runs have run, it is in the files made to hold it (the token
// file the cluster config names and k3s's config, both 0600) and nowhere
// else: not in a log, a state or status file, the audit log, a command's
// output, the console's screen, or the command line of any of the site's
// processes (which every user of the machine can read in /proc).
func TestClusterTokenStaysSecret(t *testing.T) {
	netns.Skip(t)
	bin := buildSiteboxCLI(t)
	dir := t.TempDir()
	sb := func(args ...string) {
		t.Helper()
		out, err := exec.Command(filepath.Join(bin, "sitebox"), append(args, "--dir", dir)...).CombinedOutput()
		if err != nil {
			t.Fatalf("sitebox %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	sb("up", "--bootstrap", "--agents", sitecon, "--demo", "--node-monitor-grace-period", "12s", "--node-lease-duration", "12s")
	t.Cleanup(func() { _, _ = exec.Command(filepath.Join(bin, "sitebox"), "down", "--dir", dir).CombinedOutput() })
	site, err := sitebox.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	until(t, 90*time.Second, "every agent joined", func() (string, bool) {
		for _, n := range []string{"node-a", "node-b", "node-c"} {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			st, err := localapi.Get[agent.State](ctx, site.AgentSocket(n), localapi.PathAgent)
			cancel()
			if err != nil || st.Phase != agent.PhaseJoined {
				return fmt.Sprintf("%s's agent: %s %s %v", n, st.Phase, st.LastError, err), false
			}
		}
		return "", true
	}, func(s string) string { return s })
	raw, err := os.ReadFile(site.ClusterTokenFile())
	if err != nil {
		t.Fatal(err)
	}
	token := bytes.TrimSpace(raw)
	if len(token) < 16 {
		t.Fatalf("the site's token is %d bytes: too short to search for", len(token))
	}

	// What a technician runs, each output kept to be searched.
	audit := filepath.Join(dir, "audit.jsonl")
	kubeconfig := filepath.Join(dir, "kubeconfig")
	var outputs []string
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(sitecon, args...).CombinedOutput()
		// status exits 1 when something needs attention: still an answer.
		var exit *exec.ExitError
		if err != nil && !(args[0] == "status" && errors.As(err, &exit) && exit.ExitCode() == 1) {
			t.Fatalf("sitecon %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		outputs = append(outputs, "sitecon "+strings.Join(args, " ")+":\n"+string(out))
	}
	onSite := []string{"--kubeconfig", kubeconfig, "--audit-log", audit}
	run(append([]string{"status", "--agent-socket", site.AgentSocket("node-a")}, onSite...)...)
	run(append([]string{"status", "-o", "json", "--agent-socket", site.AgentSocket("node-a")}, onSite...)...)
	run(append([]string{"status", "-o", "yaml", "--agent-socket", site.AgentSocket("node-a")}, onSite...)...)
	run(append([]string{"cordon", "node-c", "--yes"}, onSite...)...)
	run(append([]string{"uncordon", "node-c", "--yes"}, onSite...)...)
	run("agent", "render", "--config", site.ClusterConfig("node-b"), "--no-host-checks")
	run("version")

	console := startConsole(t, append([]string{"--agent-socket", site.AgentSocket("node-a")}, onSite...)...)
	console.waitScreen(30*time.Second, "the overview", func(s string) bool { return strings.Contains(s, "node-a") })
	for _, key := range []string{"2", "3", "4", "5", "6", "1"} {
		console.keys(key)
		outputs = append(outputs, "console after "+key+":\n"+console.waitScreen(10*time.Second, "screen "+key, func(s string) bool { return s != "" }))
	}
	console.keys("q")

	for _, out := range outputs {
		if bytes.Contains([]byte(out), token) {
			t.Errorf("the token is in what the technician saw: %s", firstLine(out))
		}
	}
	// The files made to hold it, and nothing else under the site.
	holders := map[string]bool{site.ClusterTokenFile(): true}
	for _, n := range site.Nodes {
		holders[filepath.Join(site.BootDir(n.Name), "k3s", "config.yaml")] = true
	}
	found := map[string]bool{}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(data, token) {
			return nil
		}
		found[path] = true
		info, _ := d.Info()
		switch {
		case !holders[path] && !isTokenFile(site, path):
			t.Errorf("the token is in %s", path)
		case info.Mode().Perm()&0o077 != 0:
			t.Errorf("%s holds the token with mode %v: others can read it", path, info.Mode().Perm())
		}
		return nil
	})
	t.Logf("the files that hold the token: %v", slices.Sorted(maps.Keys(found)))
	if !found[site.ClusterTokenFile()] {
		t.Errorf("the search found the token not even in its own file: the search is broken")
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err == nil && bytes.Contains(cmdline, []byte(dir)) && bytes.Contains(cmdline, token) {
			t.Errorf("the token is on a command line: %s", bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
}

// isTokenFile says whether path is the token file a node's cluster config
// names (token_file).
func isTokenFile(site *sitebox.Site, path string) bool {
	for _, n := range site.Nodes {
		var cfg struct {
			TokenFile string `json:"token_file"`
		}
		data, err := os.ReadFile(site.ClusterConfig(n.Name))
		if err == nil && json.Unmarshal(data, &cfg) == nil && cfg.TokenFile == path {
			return true
		}
	}
	return false
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// buildSiteboxCLI builds the sitebox command and the k3s stand-in into a
// directory beside the sitecon binary, once per test binary (each build
// is some 20 s of a busy machine's CPU), for a test that drives a site as
// a user would.
func buildSiteboxCLI(t *testing.T) string {
	t.Helper()
	siteboxCLI.Do(func() {
		bin := filepath.Join(binDir, "sitebox-cli")
		if siteboxCLI.err = os.MkdirAll(bin, 0o755); siteboxCLI.err != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, "sitebox"), "./test/sitebox/cmd/sitebox")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			siteboxCLI.err = fmt.Errorf("build sitebox: %v\n%s", err, out)
			return
		}
		// The stand-in the other tests use, where sitebox looks for it.
		standin, err := buildStandinOnce()
		if err == nil {
			err = os.Symlink(standin, filepath.Join(bin, "k3sstandin"))
		}
		siteboxCLI.bin, siteboxCLI.err = bin, err
	})
	if siteboxCLI.err != nil {
		t.Fatal(siteboxCLI.err)
	}
	return siteboxCLI.bin
}

var siteboxCLI struct {
	sync.Once
	bin string
	err error
}
