package formation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBundleFromText(t *testing.T) {
	plan, err := Plan(FormRequest{ClusterName: "site1", Interface: "lo", Prefix: "10.250.0.0/28",
		Nodes: []FormNode{{Name: "node-a"}, {Name: "node-b"}, {Name: "node-c"}}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := plan.Nodes[1].Encode()
	c, _ := plan.Nodes[2].Encode()
	wrapped := b[:30] + "\n" + b[30:70] + "\n" + b[70:]
	for _, tc := range []struct {
		name, text, want, err string
	}{
		{"bare", b, b, ""},
		{"bare with newline", b + "\n", b, ""},
		{"saved file", "# join bundle for node-b\n# on node-b: sitecon form --join THIS-FILE\n" + b + "\n", b, ""},
		{"wrapped by a narrow screen", "# node-b: on node-b run 'sitecon form --join -', paste\n" + wrapped + "\n", b, ""},
		{"wrapped comment after it", b + "\nthere and run 'sitecon form --join node-b.bundle'\n", b, ""},
		{"old printed line", "# node-b\nsitecon form --join " + b + "\n", b, ""},
		{"two bundles", "# node-b\n" + b + "\n# node-c\n" + c + "\n", "", "2 join bundles"},
		{"none", "hello\n", "", "no sitecon join bundle"},
		{"empty", "", "", "no sitecon join bundle"},
	} {
		got, err := BundleFromText(tc.text)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want the bundle", tc.name, got, err)
			continue
		}
		if jb, err := DecodeBundle(got); err != nil || jb.NodeName != "node-b" {
			t.Errorf("%s: decodes to %+v, %v", tc.name, jb, err)
		}
	}
}

// Saved bundles are root-only; removing the joined ones touches only
// <node>.bundle regular files of nodes that joined.
func TestSaveAndRemoveJoinBundles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "join-bundles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	paths, err := SaveJoinBundles(dir, map[string]string{"node-b": "B\n", "node-c": "C\n"})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("an existing directory kept mode %v; want 0700", st.Mode().Perm())
	}
	for node, p := range paths {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v mode %v", node, err, st.Mode())
		}
	}
	if _, err := SaveJoinBundles(dir, map[string]string{"../escape": "x"}); err == nil {
		t.Error("a node name with a slash should be refused")
	}
	// Not a bundle, and a symlink named like one: left alone.
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, "node-d.bundle")); err != nil {
		t.Fatal(err)
	}
	removed, left, err := RemoveJoinedBundles(dir, func(node string) bool { return node == "node-b" || node == "node-d" || node == "notes.txt" })
	if err != nil || strings.Join(removed, ",") != "node-b" || left != 3 {
		t.Fatalf("removed %v, %d left, %v; want node-b only, 3 left", removed, left, err)
	}
	for _, name := range []string{"node-c.bundle", "notes.txt", "node-d.bundle"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s should stay: %v", name, err)
		}
	}
	if removed, left, err := RemoveJoinedBundles(filepath.Join(t.TempDir(), "none"), func(string) bool { return true }); err != nil || len(removed) != 0 || left != 0 {
		t.Errorf("a missing directory is nothing to do: %v %d %v", removed, left, err)
	}
}
