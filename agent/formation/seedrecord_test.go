package formation

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
	"github.com/sitecon/sitecon/agent/k3s"
)

// A recorded seed change holds only for the cluster it was made in, against
// the join address the config still names, inside the prefix.
func TestApplySeedRecord(t *testing.T) {
	v, err := config.Validate(agenttest.Config(), agenttest.Env(agenttest.GoodToken)) // node-b, 10.244.244.2, seed 10.244.244.1
	if err != nil {
		t.Fatal(err)
	}
	rec := func(edit func(*SeedRecord)) SeedRecord {
		r := SeedRecord{ClusterID: v.ClusterID, ConfigJoinIP: "10.244.244.1", JoinServerIP: "10.244.244.3", At: time.Now()}
		if edit != nil {
			edit(&r)
		}
		return r
	}
	cases := []struct {
		name     string
		r        SeedRecord
		wantJoin string
		wantSeed bool
		applied  bool
		stale    bool
	}{
		{"moved to another server", rec(nil), "10.244.244.3", false, true, false},
		{"moved to this node", rec(func(r *SeedRecord) { r.JoinServerIP = "10.244.244.2" }), "10.244.244.2", true, true, false},
		{"another cluster's record", rec(func(r *SeedRecord) { r.ClusterID = "00000000-0000-4000-8000-000000000000" }), "10.244.244.1", false, false, true},
		{"the controller set a new seed since", rec(func(r *SeedRecord) { r.ConfigJoinIP = "10.244.244.5" }), "10.244.244.1", false, false, true},
		{"outside the prefix", rec(func(r *SeedRecord) { r.JoinServerIP = "192.168.1.3" }), "10.244.244.1", false, false, true},
		{"not an address", rec(func(r *SeedRecord) { r.JoinServerIP = "node-c" }), "10.244.244.1", false, false, true},
		{"back at the config's seed", rec(func(r *SeedRecord) { r.JoinServerIP = "10.244.244.1" }), "10.244.244.1", false, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, applied, stale := ApplySeedRecord(v, tc.r)
			if applied != tc.applied || stale != tc.stale || out.JoinIP.String() != tc.wantJoin || out.JoinServerIP != tc.wantJoin || out.IsSeed != tc.wantSeed {
				t.Fatalf("got join %s (config %s) seed=%v applied=%v stale=%v", out.JoinIP, out.JoinServerIP, out.IsSeed, applied, stale)
			}
			if v.JoinIP.String() != "10.244.244.1" || v.JoinServerIP != "10.244.244.1" {
				t.Fatal("the config itself was changed")
			}
		})
	}
	// A moved seed renders a joining server, never cluster-init.
	moved, _, _ := ApplySeedRecord(v, rec(nil))
	k := k3s.Render(moved, k3s.Paths{ConfigFile: "/x/config.yaml", DataDir: "/x/data"}, true)
	if !strings.Contains(string(k.Files[0].Redacted), `server: "https://10.244.244.3:6443"`) {
		t.Fatalf("rendered config does not join through the moved seed:\n%s", k.Files[0].Redacted)
	}
}

func TestSeedRecordFile(t *testing.T) {
	path := Records{Dir: t.TempDir()}.SeedRecordFile()
	if _, ok, err := ReadSeedRecord(path); ok || err != nil {
		t.Fatalf("no file: ok=%v err=%v", ok, err)
	}
	want := SeedRecord{ClusterID: "c", ConfigJoinIP: "10.0.0.1", JoinServerIP: "10.0.0.2", At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if err := WriteSeedRecord(path, want); err != nil {
		t.Fatal(err)
	}
	got, ok, err := ReadSeedRecord(path)
	if !ok || err != nil || got != want {
		t.Fatalf("read back %+v ok=%v err=%v", got, ok, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	if err := os.WriteFile(path, []byte(`{"cluster_id": "c", "typo": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadSeedRecord(path); err == nil || !strings.Contains(err.Error(), "typo") {
		t.Fatalf("a bad record must be an error naming the problem: %v", err)
	}
}
