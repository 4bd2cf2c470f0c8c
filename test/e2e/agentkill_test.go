package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/test/sitebox"
)

// Issue 23 §3: the agent killed mid-bootstrap and mid-write. In sitebox's
// bootstrap mode (each node's agent in its own network namespace, with its
// own cluster config, and the k3s stand-in as its k3s) the seed's and a
// joiner's agents are killed (SIGKILL, as a crash or the OOM killer does)
// at the first sight of each phase of their bring-up, the moments they
// write their records, and started again, while their k3s runs on. Each
// time, every file the agents keep is whole (it parses), no write is left
// half-done beside it, and the site ends as an undisturbed bring-up does:
// one cluster (the seed's k3s initialised it once), every node Ready,
// every agent joined and the app on its node.
func TestAgentKilledMidBootstrap(t *testing.T) {
	web := apps.AppConfig{UUID: "e2e00000-0000-4000-8000-0000000000f4", DisplayName: "kill-web", Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/web:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), Affinity: apps.AffinityPreferred}
	site, appsDir := startBootSite(t, web)
	nodes := []string{"node-a", "node-b", "node-c"}
	killed := []string{"node-a", "node-b"} // the seed and a joiner

	began := time.Now()
	if err := site.StartAgents(sitecon, appsDir, sitebox.QuickAgentTimings(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Each killed node's agent dies once at the first sight of each phase
	// it reaches (joined included), until it has been joined once after
	// its last kill.
	seen := map[string]map[agent.Phase]bool{}
	var kills []string
	for _, n := range killed {
		seen[n] = map[agent.Phase]bool{}
	}
	done := func() bool {
		for _, n := range killed {
			if !seen[n][agent.PhaseJoined] {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(3 * time.Minute)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("the killed agents' bring-up did not reach joined within 3m; kills so far: %v", kills)
		}
		for _, n := range killed {
			st, err := bootAgentState(site, n)
			if err != nil || st.Phase == "" || seen[n][st.Phase] {
				continue
			}
			seen[n][st.Phase] = true
			if err := site.KillAgent(n); err != nil {
				t.Fatal(err)
			}
			kill := fmt.Sprintf("%s at %s (+%.1fs)", n, st.Phase, time.Since(began).Seconds())
			if st.LastError != "" {
				kill += ": " + st.LastError
			}
			kills = append(kills, kill)
			// Cut off mid-write, a temporary file may stay beside the
			// file it was for (the restart removes it); the file is whole.
			checkAgentFilesWhole(t, site, n, true)
			if err := site.RestartAgent(n); err != nil {
				t.Fatal(err)
			}
		}
		<-time.After(20 * time.Millisecond)
	}
	t.Logf("agents killed and started again: %s", strings.Join(kills, "; "))
	for _, n := range killed {
		if len(seen[n]) < 2 {
			t.Errorf("%s's agent was killed only at %v: the bring-up's phases were not seen", n, seen[n])
		}
	}

	until(t, 3*time.Minute, "the site whole after its agents' kills", func() (string, bool) {
		return bootSiteWhole(t, site, nodes, web.DisplayName, "node-b")
	}, func(s string) string { return s })
	t.Logf("the site whole %.1fs after the agents started, through %d kills", time.Since(began).Seconds(), len(kills))
	for _, n := range nodes {
		checkAgentFilesWhole(t, site, n, false)
	}
	// One cluster: only the seed's k3s ever initialised, and only over no
	// etcd data of its own (a seed cut off before its first k3s made any
	// initialises again: nothing was formed) and never after it formed
	// the cluster.
	formed, ok, err := formation.ReadFormedMarker(filepath.Join(site.Dir, "state", "node-a", "formed.json"))
	if err != nil || !ok {
		t.Fatalf("the seed's formed marker: %v (found %v)", err, ok)
	}
	for _, n := range nodes {
		for _, s := range standinStarts(t, site.K3sDataDir(n)) {
			if !strings.Contains(s.line, "cluster-init") {
				continue
			}
			switch {
			case n != "node-a":
				t.Errorf("%s's k3s initialised a cluster: %s", n, s.line)
			case strings.Contains(s.line, "etcd-data=present"):
				t.Errorf("the seed's k3s initialised over its own etcd data (a second cluster): %s", s.line)
			case s.at.After(formed.At):
				t.Errorf("the seed's k3s initialised after it formed the cluster (%s): %s", formed.At, s.line)
			}
		}
	}
	// And the cluster has three members, each once.
	cs := clientset(t, site)
	list, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range list.Items {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, nodes) {
		t.Errorf("the cluster's nodes: %v, want %v", names, nodes)
	}
}

// checkAgentFilesWhole fails t for a file of node's agent (its state
// directory, its boot directory: cluster config, k3s config, records) that
// does not parse, or, unless tempsAllowed, for the temporary file of a
// write left half-done beside one.
func checkAgentFilesWhole(t *testing.T, site *sitebox.TestSite, node string, tempsAllowed bool) {
	t.Helper()
	for _, dir := range []string{filepath.Join(site.Dir, "state", node), site.BootDir(node)} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				// The k3s stand-in's own data (its etcd member's) is k3s's, not the agent's.
				if path == site.K3sDataDir(node) || d.Name() == "kubelet" || d.Name() == "run" {
					return filepath.SkipDir
				}
				return nil
			}
			if strings.Contains(d.Name(), ".tmp-") {
				if !tempsAllowed {
					t.Errorf("%s: a write cut off left its temporary file: %s", node, path)
				}
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			switch filepath.Ext(path) {
			case ".json":
				if !json.Valid(data) {
					t.Errorf("%s: %s does not parse as JSON (%d bytes)", node, path, len(data))
				}
			case ".yaml", ".yml":
				var v any
				if err := yaml.Unmarshal(data, &v); err != nil {
					t.Errorf("%s: %s does not parse as YAML: %v", node, path, err)
				}
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Errorf("%s: %v", node, err)
		}
	}
}
