package formation

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
)

// The old place is read once, completely or not at all.
func TestRecordsUpgrade(t *testing.T) {
	v := agenttest.Validated(t, nil)
	formed := FormedMarker{ClusterID: v.ClusterID, NodeName: v.NodeName, How: "joined the cluster", Joined: true}
	setup := func(t *testing.T) (configPath string, r Records) {
		dir := t.TempDir()
		configPath = filepath.Join(dir, "config", "cluster.json")
		if err := os.MkdirAll(filepath.Dir(configPath), 0o755); err != nil {
			t.Fatal(err)
		}
		agenttest.WriteConfig(t, configPath)
		r = Records{Dir: filepath.Join(dir, "state")}
		if err := r.Prepare(configPath); err != nil {
			t.Fatal(err)
		}
		return configPath, r
	}
	old := func(configPath, name string) string { return filepath.Join(filepath.Dir(configPath), name) }

	t.Run("config directory absent: asked again", func(t *testing.T) {
		r := Records{Dir: filepath.Join(t.TempDir(), "state")}
		notes, done, err := r.Upgrade(filepath.Join(t.TempDir(), "persist", "sitecon", "cluster.json"))
		if done || err != nil || len(notes) > 0 {
			t.Fatalf("done %v, err %v, notes %q; want not done, no error", done, err, notes)
		}
		if _, err := os.Stat(filepath.Join(r.Dir, recordsUpgradeName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("upgrade recorded while the config's directory was absent: %v", err)
		}
	})
	t.Run("config absent, its directory present: asked again", func(t *testing.T) {
		// A mount point not mounted yet: the directory is there, empty.
		configPath, r := setup(t)
		if err := os.Remove(configPath); err != nil {
			t.Fatal(err)
		}
		notes, done, err := r.Upgrade(configPath)
		if done || err != nil || len(notes) > 0 {
			t.Fatalf("done %v, err %v, notes %q; want not done, no error", done, err, notes)
		}
		if _, err := os.Stat(filepath.Join(r.Dir, recordsUpgradeName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("upgrade recorded while the config was absent: %v", err)
		}
		// Mounted: the config and the records beside it arrive.
		agenttest.WriteConfig(t, configPath)
		if err := MarkFormed(old(configPath, formedMarkerName), formed); err != nil {
			t.Fatal(err)
		}
		if _, done, err := r.Upgrade(configPath); !done || err != nil {
			t.Fatalf("with the config there: done %v, err %v", done, err)
		}
		if m, ok, err := ReadFormedMarker(r.FormedMarkerFile()); !ok || err != nil || !m.Joined {
			t.Fatalf("the formed marker that arrived with the config: %+v %v %v", m, ok, err)
		}
	})
	t.Run("the originals stay, for a rollback", func(t *testing.T) {
		configPath, r := setup(t)
		if err := MarkFormed(old(configPath, formedMarkerName), formed); err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(old(configPath, formedMarkerName))
		if _, done, err := r.Upgrade(configPath); !done || err != nil {
			t.Fatalf("done %v, err %v", done, err)
		}
		if after, err := os.ReadFile(old(configPath, formedMarkerName)); err != nil || !bytes.Equal(after, before) {
			t.Fatalf("the original beside the config: %v, want it left as it was (the previous release reads it there)", err)
		}
		if got, err := os.ReadFile(r.FormedMarkerFile()); err != nil || !bytes.Equal(got, before) {
			t.Fatalf("the copy in the state directory: %v\n%s", err, got)
		}
	})
	t.Run("not a record: nothing moved, held, then done", func(t *testing.T) {
		configPath, r := setup(t)
		if err := MarkFormed(old(configPath, formedMarkerName), formed); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(old(configPath, removedMarkerName), []byte(`{"cluster_id": "x", "reason": "mine"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		_, done, err := r.Upgrade(configPath)
		if done || err == nil || !strings.Contains(err.Error(), "is not a removed marker") || !strings.Contains(err.Error(), "nothing copied") {
			t.Fatalf("done %v, err %v; want held, naming the file", done, err)
		}
		if _, err := os.Stat(old(configPath, removedMarkerName)); err != nil {
			t.Fatalf("the file that is not a record: %v", err)
		}
		if _, err := os.Stat(filepath.Join(r.Dir, recordsUpgradeName)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("upgrade recorded: %v", err)
		}
		if err := os.Remove(old(configPath, removedMarkerName)); err != nil {
			t.Fatal(err)
		}
		if _, done, err := r.Upgrade(configPath); !done || err != nil {
			t.Fatalf("once repaired: done %v, err %v", done, err)
		}
		if m, ok, err := ReadFormedMarker(r.FormedMarkerFile()); !ok || err != nil || !m.Joined {
			t.Fatalf("formed marker copied: %+v %v %v", m, ok, err)
		}
	})
	t.Run("a copy cut short before its mark is finished", func(t *testing.T) {
		configPath, r := setup(t)
		if err := MarkFormed(old(configPath, formedMarkerName), formed); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(old(configPath, formedMarkerName))
		if err := config.WriteFileAtomic(r.FormedMarkerFile(), data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, done, err := r.Upgrade(configPath); !done || err != nil {
			t.Fatalf("done %v, err %v", done, err)
		}
		if _, err := os.Stat(filepath.Join(r.Dir, recordsUpgradeName)); err != nil {
			t.Fatalf("upgrade not recorded: %v", err)
		}
	})
	t.Run("the state directory's own record wins", func(t *testing.T) {
		configPath, r := setup(t)
		if err := MarkFormed(old(configPath, formedMarkerName), FormedMarker{ClusterID: "old-cluster", NodeName: v.NodeName, Joined: true}); err != nil {
			t.Fatal(err)
		}
		if err := MarkFormed(r.FormedMarkerFile(), formed); err != nil {
			t.Fatal(err)
		}
		notes, done, err := r.Upgrade(configPath)
		if !done || err != nil || len(notes) != 1 || !strings.Contains(notes[0], "left where it is") {
			t.Fatalf("done %v, err %v, notes %q", done, err, notes)
		}
		if m, _, _ := ReadFormedMarker(r.FormedMarkerFile()); m.ClusterID != v.ClusterID {
			t.Fatalf("the state directory's marker replaced: %+v", m)
		}
		if _, err := os.Stat(old(configPath, formedMarkerName)); err != nil {
			t.Fatalf("the old marker: %v, want left alone", err)
		}
	})
	t.Run("once done, the old place is not read again", func(t *testing.T) {
		configPath, r := setup(t)
		if _, done, err := r.Upgrade(configPath); !done || err != nil {
			t.Fatalf("done %v, err %v", done, err)
		}
		if err := MarkFormed(old(configPath, formedMarkerName), formed); err != nil {
			t.Fatal(err)
		}
		if notes, done, err := r.Upgrade(configPath); !done || err != nil || len(notes) > 0 {
			t.Fatalf("done %v, err %v, notes %q", done, err, notes)
		}
		if _, ok, _ := ReadFormedMarker(r.FormedMarkerFile()); ok {
			t.Fatal("a marker put beside the config after the upgrade was moved")
		}
	})
}

// The state directory is the agent's alone: created 0700, refused when
// others may write it or when it is the config's own directory.
func TestRecordsPrepare(t *testing.T) {
	dir := t.TempDir()
	configPath := filepath.Join(dir, "cluster.json")
	r := Records{Dir: filepath.Join(dir, "var", "lib", "sitecon")}
	if err := r.Prepare(configPath); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(r.Dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("state directory %v, %v; want mode 0700", st, err)
	}
	if err := os.Chmod(r.Dir, 0o770); err != nil {
		t.Fatal(err)
	}
	if err := r.Prepare(configPath); err == nil || !strings.Contains(err.Error(), "may be written by others") {
		t.Errorf("a group-writable state directory: %v", err)
	}
	if err := (Records{Dir: dir}).Prepare(configPath); err == nil || !strings.Contains(err.Error(), "the cluster config's own directory") {
		t.Errorf("the config's directory as the state directory: %v", err)
	}
	if err := (Records{}).Prepare(configPath); err == nil || !strings.Contains(err.Error(), "--state-dir") {
		t.Errorf("no state directory: %v", err)
	}
}
