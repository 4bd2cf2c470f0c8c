package formation

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
)

// cluster-init only for the config's own seed, without etcd data, never
// part of the cluster before; a learnt seed or an unreadable marker never.
func TestInitCheck(t *testing.T) {
	seed := func(c *config.Config) { c.ClusterIPPrefix = "10.244.244.1/28" }
	dir := t.TempDir()
	marker := filepath.Join(dir, "formed.json")
	other := filepath.Join(dir, "other.json")
	unreadable := filepath.Join(dir, "garbage.json")
	if err := MarkFormed(marker, FormedMarker{ClusterID: "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", How: "joined the cluster"}); err != nil {
		t.Fatal(err)
	}
	if err := MarkFormed(other, FormedMarker{ClusterID: "another"}); err != nil {
		t.Fatal(err)
	}
	if err := config.WriteFileAtomic(unreadable, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	moved := &SeedRecord{ClusterID: "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", ConfigJoinIP: "10.244.244.3", JoinServerIP: "10.244.244.1"}
	cases := []struct {
		name     string
		edit     func(*config.Config)
		record   *SeedRecord
		etcd     bool
		marker   string
		init     bool
		refusal  string
		joinEdit func(*config.Config)
	}{
		{name: "seed, first boot", edit: seed, marker: filepath.Join(dir, "none.json"), init: true},
		{name: "seed with etcd data rejoins", edit: seed, etcd: true, marker: marker},
		{name: "joiner", marker: marker},
		{name: "seed formed before, data lost", edit: seed, marker: marker, refusal: "was part of cluster"},
		{name: "marker of another cluster does not count", edit: seed, marker: other, init: true},
		{name: "unreadable marker is unknown", edit: seed, marker: unreadable, refusal: "cannot tell"},
		{name: "seed learnt from a record never initialises", edit: func(c *config.Config) { seed(c); c.JoinServerIP = "10.244.244.3" },
			record: moved, marker: filepath.Join(dir, "none.json"), refusal: "never initialises"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := SeedInEffect(SeedInputs{Config: agenttest.Validated(t, tc.edit), Record: tc.record})
			init, err := InitCheck(d, tc.etcd, tc.marker)
			if init != tc.init || (err == nil) != (tc.refusal == "") || err != nil && !strings.Contains(err.Error(), tc.refusal) {
				t.Fatalf("init %v, err %v; want %v, %q", init, err, tc.init, tc.refusal)
			}
			if err != nil && !strings.Contains(err.Error(), "sitecon seed") && !strings.Contains(err.Error(), "remove it only if") {
				t.Errorf("the refusal does not say what to do: %v", err)
			}
		})
	}
}

// A node that ran in its cluster restarts k3s without the seed; one that
// never joined (a bundle of a running cluster, a member seen on the
// prefix, an unreadable marker) waits for the first join. Only a server's
// etcd data, with no marker of another cluster, answers /status from disk.
func TestHasBeenMemberAndDurableServerMember(t *testing.T) {
	const cluster = "7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60"
	dir := t.TempDir()
	write := func(name string, m FormedMarker) string {
		path := filepath.Join(dir, name)
		if err := MarkFormed(path, m); err != nil {
			t.Fatal(err)
		}
		return path
	}
	joined := write("joined.json", FormedMarker{ClusterID: cluster, NodeName: "node-b", How: "joined the cluster", Joined: true})
	bundle := write("bundle.json", FormedMarker{ClusterID: cluster, NodeName: "node-b", How: "given a join bundle made on the running cluster"})
	otherNode := write("othernode.json", FormedMarker{ClusterID: cluster, NodeName: "node-c", How: "joined the cluster", Joined: true})
	otherCluster := write("othercluster.json", FormedMarker{ClusterID: "another", NodeName: "node-b", How: "joined the cluster", Joined: true})
	garbage := filepath.Join(dir, "garbage.json")
	if err := config.WriteFileAtomic(garbage, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	none := filepath.Join(dir, "none.json")
	worker := func(c *config.Config) { c.IsWorkerNode = true }
	cases := []struct {
		name            string
		edit            func(*config.Config)
		etcd            bool
		marker          string
		member, durable bool
	}{
		{name: "server with etcd data", etcd: true, marker: none, member: true, durable: true},
		{name: "server joined, etcd data lost", marker: joined, member: true},
		{name: "worker joined", edit: worker, marker: joined, member: true},
		{name: "worker's stray etcd dir is no server", edit: worker, etcd: true, marker: none},
		{name: "bundle of a running cluster: first join waits", marker: bundle},
		{name: "marker of another node", marker: otherNode},
		{name: "marker of another cluster", marker: otherCluster},
		{name: "etcd data beside another cluster's marker", etcd: true, marker: otherCluster, member: true},
		{name: "unreadable marker waits", marker: garbage},
		{name: "etcd data and an unreadable marker answer", etcd: true, marker: garbage, member: true, durable: true},
		{name: "nothing", marker: none},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := agenttest.Validated(t, tc.edit)
			member, why := HasBeenMember(v, tc.etcd, tc.marker)
			if member != tc.member || why == "" {
				t.Errorf("HasBeenMember = %v (%q), want %v", member, why, tc.member)
			}
			if got := DurableServerMember(v, tc.etcd, tc.marker); got != tc.durable {
				t.Errorf("DurableServerMember = %v, want %v", got, tc.durable)
			}
		})
	}
}

// A marker written before the node joined (a bundle of a running cluster)
// gains Joined when it joins, and keeps what it said first.
func TestMarkFormedAddsJoined(t *testing.T) {
	path := filepath.Join(t.TempDir(), "formed.json")
	first := FormedMarker{ClusterID: "c1", NodeName: "node-b", How: "given a join bundle made on the running cluster"}
	if err := MarkFormed(path, first); err != nil {
		t.Fatal(err)
	}
	if err := MarkFormed(path, FormedMarker{ClusterID: "c1", NodeName: "node-b", How: "joined the cluster", Joined: true}); err != nil {
		t.Fatal(err)
	}
	m, ok, err := ReadFormedMarker(path)
	if err != nil || !ok || !m.Joined || m.How != first.How {
		t.Fatalf("marker = %+v (%v, %v), want the first How with Joined", m, ok, err)
	}
	// A later write without Joined never takes it away.
	if err := MarkFormed(path, FormedMarker{ClusterID: "c1", NodeName: "node-b", How: "a member answered"}); err != nil {
		t.Fatal(err)
	}
	if m, _, _ := ReadFormedMarker(path); !m.Joined {
		t.Errorf("Joined lost: %+v", m)
	}
}
