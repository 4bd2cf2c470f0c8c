package apps

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
)

// The leader judges a lost node's silence by the fence settings its Node
// carries (kube.AnnotationFence). An agent restarted while its node is cut
// off, with a longer --failover-timeout or --no-fence, cannot publish its
// new settings: until it can, it fences by the stricter of its own and the
// ones its Node still says, which its record keeps.
func TestFenceWatchRestartedCutOffFencesByWhatItsNodeSays(t *testing.T) {
	const ownTimeout = 60 * time.Second // a fence bound of 45 s
	// The record: the Node says "on 16s" (a fence bound of 5.4 s), the
	// last contact 10 s before the restart, in this boot.
	boot := func() func() (string, time.Duration, error) {
		start := time.Now()
		return func() (string, time.Duration, error) { return "boot-1", 100*time.Second + time.Since(start), nil }
	}
	run := func(t *testing.T, nodeSays string, disabled bool) (*FenceWatch, chan []string, *config.LifeStatus) {
		path := t.TempDir() + "/" + FenceRecordFile
		rec := map[string]any{"node": "node-a", "auto_pods": []string{"uid-auto"}, "pods_known": true,
			"written": time.Now().Format(time.RFC3339), "contact": map[string]any{"boot_id": "boot-1", "boot_ns": int64(90 * time.Second)}}
		if nodeSays != "" {
			rec["node_says"] = nodeSays
		}
		data, _ := json.Marshal(rec)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		life := config.NewLifeStatus(!disabled, ownTimeout)
		w, stopped := recordOnlyWatch(path, life, boot(), false)
		w.Bound, w.Disabled = DeriveFenceTimings(ownTimeout).FenceAfter, disabled
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go w.Run(ctx)
		return w, stopped, life
	}
	fencesWithin := func(t *testing.T, stopped chan []string, within time.Duration, why string) {
		t.Helper()
		select {
		case <-stopped:
		case <-time.After(within):
			t.Fatal(why)
		}
	}

	t.Run("a longer timeout than the Node says: fences by the Node's", func(t *testing.T) {
		_, stopped, life := run(t, "on 16s", false)
		fencesWithin(t, stopped, 5*time.Second, "no fence within 5 s though the Node says it fences 5.4 s after its last contact (10 s ago): the leader may force-delete while the pods run")
		// Its signed word says what it fenced by: the Node's timeout.
		for deadline := time.Now().Add(5 * time.Second); ; {
			st := life.State(time.Now())
			if st.Fencing && st.FailoverTimeout() == 16*time.Second {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the proof of life says fencing %v with %s, want on with 16s", st.Fencing, st.FailoverTimeout())
			}
			time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
		}
	})
	t.Run("--no-fence while the Node says it fences: fences", func(t *testing.T) {
		_, stopped, _ := run(t, "on 16s", true)
		fencesWithin(t, stopped, 5*time.Second, "an agent restarted --no-fence did not fence though its Node still says it does: the leader counts its silence")
	})
	t.Run("the Node says off: its own settings", func(t *testing.T) {
		_, stopped, _ := run(t, "off 16s", false)
		select {
		case uids := <-stopped:
			t.Fatalf("fenced %v 10 s after the last contact with a bound of 45 s", uids)
		case <-time.After(3 * fenceCheckEvery):
		}
	})
	t.Run("once the Node says its own: its own settings", func(t *testing.T) {
		w, stopped, _ := run(t, "on 16s", true)
		fencesWithin(t, stopped, 5*time.Second, "no fence by the Node's settings")
		w.NodeSays("off 1m0s")
		data, _ := os.ReadFile(w.RecordPath)
		var rec fenceRecord
		if err := json.Unmarshal(data, &rec); err != nil || rec.NodeSays != "off 1m0s" {
			t.Fatalf("record %s (%v), want node_says \"off 1m0s\"", data, err)
		}
		if bound, disabled, _ := w.effective(); !disabled || bound != w.Bound {
			t.Errorf("fences with bound %s, disabled %v; want its own: disabled", bound, disabled)
		}
	})
}

// Before its Node is made to say settings that fence sooner, the record
// says them: a crash or a full disk between the two never leaves the
// record looser than the Node. One that fences later is recorded once
// the Node says it. A record that cannot be written holds back a
// stricter publication.
func TestFenceRecordSaysAStricterPublicationFirst(t *testing.T) {
	dir := t.TempDir()
	w, _ := recordOnlyWatch(dir+"/"+FenceRecordFile, config.NewLifeStatus(true, DefaultFailoverTimeout), nil, false)
	w.Log = slog.New(slog.DiscardHandler)
	onDisk := func() string {
		data, _ := os.ReadFile(w.RecordPath)
		var rec fenceRecord
		_ = json.Unmarshal(data, &rec)
		return rec.NodeSays
	}
	w.NodeSays("off 28s")
	if !w.WillPublish("on 28s") || onDisk() != "on 28s" {
		t.Fatalf("before publishing \"on 28s\" over \"off 28s\" the record says %q", onDisk())
	}
	if !w.WillPublish("on 1m0s") || onDisk() != "on 28s" {
		t.Fatalf("before publishing a later fence the record says %q, want the stricter \"on 28s\" kept until the Node says it", onDisk())
	}
	w.NodeSays("on 1m0s")
	if onDisk() != "on 1m0s" {
		t.Fatalf("once the Node says \"on 1m0s\" the record says %q", onDisk())
	}
	// The record's directory made unwritable: a stricter publication is
	// held back, a looser one is not.
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Chmod(dir, 0o700) }()
	if os.Geteuid() == 0 {
		// root writes anyway: a path that cannot be a file instead.
		w.RecordPath = dir + "/" + FenceRecordFile + "/x"
	}
	if w.WillPublish("on 16s") {
		t.Error("a stricter publication went ahead though its record could not be written")
	}
	if !w.WillPublish("off 1m0s") {
		t.Error("a looser publication was held back: the record already says a stricter one")
	}
}
