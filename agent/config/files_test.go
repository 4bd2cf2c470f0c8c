package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// A write cut off by a kill leaves its temporary file (WriteFileAtomic's
// own clean-up never runs). RemoveStaleTemps, run while nothing writes,
// removes exactly those: never the files themselves, another program's
// dotfile, or a subdirectory's.
func TestRemoveStaleTemps(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteFileAtomic(filepath.Join(dir, "formed.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".formed.json.tmp-123456", ".records-upgrade.json.tmp-9", ".bashrc", "x.tmp-1", "sub/.a.json.tmp-1"} {
		write(name)
	}
	removed, err := RemoveStaleTemps(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{filepath.Join(dir, ".formed.json.tmp-123456"), filepath.Join(dir, ".records-upgrade.json.tmp-9")}
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	for _, name := range []string{"formed.json", ".bashrc", "x.tmp-1", "sub/.a.json.tmp-1"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s is gone: %v", name, err)
		}
	}
	if _, err := RemoveStaleTemps(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("a directory not made yet: %v", err)
	}
}
