package apps

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
)

// fenceRecord is what the watch needs to fence without the cluster cache.
type fenceRecord struct {
	Node     string      `json:"node"`
	Peers    []fencePeer `json:"peers"`
	AutoPods []string    `json:"auto_pods"`
	// PinnedPods are the pinned apps' pods (and any of no app), which the
	// fence spares.
	PinnedPods []string `json:"pinned_pods,omitempty"`
	// PodsKnown: AutoPods are what the cache or the apps part said, not
	// a record written before either knew (the peers may come first).
	// Absent in a record of an older agent, which wrote only known pods:
	// then its Written says so.
	PodsKnown *bool        `json:"pods_known,omitempty"`
	Written   *metav1.Time `json:"written,omitempty"`
	// Contact is this node's last contact with the quorum, as the watch
	// last wrote it (at most fenceSourcesEvery old while in contact).
	Contact *fenceContact `json:"contact,omitempty"`
	// NodeSays is the fence settings this node's Node carried when last
	// seen (kube.AnnotationFence; "": none), which the leader judges the
	// node's silence by. An agent restarted with other settings while cut
	// off cannot publish them: until its Node says them, it fences by the
	// stricter of the two (FenceWatch.effective).
	NodeSays string `json:"node_says,omitempty"`
}

// fenceContact is a moment on the boot's clock: CLOCK_BOOTTIME, which an
// agent's restart keeps and a step of the wall clock does not move, valid
// in the boot BootID names only.
type fenceContact struct {
	BootID string        `json:"boot_id"`
	Boot   time.Duration `json:"boot_ns"`
}

type fencePeer struct {
	Name    string `json:"name"`
	Address string `json:"address"`
}

// FenceRecordFile is the fence watch's record in the agent's state directory.
const FenceRecordFile = "fence.json"

// podsKnown says whether the record's AutoPods were known when written.
func (r fenceRecord) podsKnown() bool {
	if r.PodsKnown != nil {
		return *r.PodsKnown
	}
	return r.Written != nil
}

// loadRecord reads the record a previous run left; an unreadable one is
// said and treated as none (the cache writes a new one once it answers).
func (w *FenceWatch) loadRecord() {
	if w.RecordPath == "" {
		w.Log.Warn("no state directory: an agent restarted while this node is cut off cannot fence before the API server answers")
		return
	}
	data, err := os.ReadFile(w.RecordPath)
	if os.IsNotExist(err) {
		return
	}
	var rec fenceRecord
	if err == nil {
		err = json.Unmarshal(data, &rec)
	}
	if err == nil && rec.Node != w.Node {
		err = fmt.Errorf("it is node %q's, not %s's", rec.Node, w.Node)
	}
	if err != nil {
		w.Log.Error("fence record unreadable: until the cluster answers, this node knows no peers and no pods to fence", "path", w.RecordPath, "err", err)
		return
	}
	w.mu.Lock()
	w.record, w.contact = rec, rec.Contact
	w.mu.Unlock()
}

// bootClock reads this boot's ID and CLOCK_BOOTTIME (the time since boot,
// suspend included; a step of the wall clock does not move it).
func bootClock() (string, time.Duration, error) {
	id, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", 0, err
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return "", 0, err
	}
	return strings.TrimSpace(string(id)), time.Duration(ts.Nano()), nil
}

func (w *FenceWatch) bootClock() func() (string, time.Duration, error) {
	if w.BootClock != nil {
		return w.BootClock
	}
	return bootClock
}

// lastContactAgo is how long ago the record's last contact was, when it
// was in this boot (after a reboot nothing of the node's ran on).
func (w *FenceWatch) lastContactAgo() (time.Duration, bool) {
	w.mu.Lock()
	c := w.contact
	w.mu.Unlock()
	if c == nil {
		return 0, false
	}
	id, since, err := w.bootClock()()
	if err != nil || id != c.BootID || since < c.Boot {
		return 0, false
	}
	return since - c.Boot, true
}

// noteContact keeps a contact ago before now in the record, at most every
// fenceSourcesEvery: a restart counts from a contact that much earlier at
// worst, which fences sooner, never later.
func (w *FenceWatch) noteContact(ago time.Duration) {
	id, since, err := w.bootClock()()
	if err != nil {
		return
	}
	at := since - ago
	w.mu.Lock()
	if c := w.contact; c != nil && c.BootID == id && at-c.Boot < fenceSourcesEvery {
		w.mu.Unlock()
		return
	}
	w.contact = &fenceContact{BootID: id, Boot: at}
	rec := w.record
	rec.Contact = w.contact
	w.mu.Unlock()
	if rec.Written == nil {
		// Nothing recorded yet: the contact alone, the pods not known.
		unknown := false
		rec.Node, rec.PodsKnown = w.Node, &unknown
	}
	w.saveRecord(rec)
}

// saveRecord keeps rec as the record and writes it whole (temp, fsync,
// rename). Its NodeSays is the watch's own (setNodeSays alone changes
// it): a writer's older copy never rolls it back.
func (w *FenceWatch) saveRecord(rec fenceRecord) {
	rec.Written = &metav1.Time{Time: time.Now()}
	w.mu.Lock()
	rec.NodeSays = w.record.NodeSays
	w.record = rec
	w.mu.Unlock()
	if err := w.flushRecord(); err != nil {
		w.Log.Error("fence record not written: a restart cut off fences from the one before", "path", w.RecordPath, "err", err)
	}
}

// flushRecord writes the record as it is now. One write at a time, each
// of the latest record: the file never ends with an older one than the
// memory's.
func (w *FenceWatch) flushRecord() error {
	if w.RecordPath == "" {
		return nil
	}
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	w.mu.Lock()
	rec := w.record
	w.mu.Unlock()
	data, err := json.MarshalIndent(rec, "", "  ")
	if err == nil {
		err = config.WriteFileAtomic(w.RecordPath, data, 0o644)
	}
	return err
}

// effective is what the watch fences by now: its own bound and Disabled,
// unless the record says the Node carries settings that fence sooner
// (nodeSays is then those settings, else ""). The leader judges the
// node's silence by what its Node says; an agent restarted with a longer
// timeout or --no-fence keeps to those until its Node says its own.
func (w *FenceWatch) effective() (bound time.Duration, disabled bool, nodeSays string) {
	w.mu.Lock()
	says := w.record.NodeSays
	w.mu.Unlock()
	bound, disabled = w.Bound, w.Disabled
	s, err := kube.ParseFenceSettings(says)
	if says == "" || err != nil || !s.Fencing {
		return bound, disabled, ""
	}
	if nodeBound := DeriveFenceTimings(s.FailoverTimeout).FenceAfter; disabled || nodeBound < bound {
		return nodeBound, false, says
	}
	return bound, disabled, ""
}

// followNodeSays says, in the log and in the signed proof of life, that
// the watch fences by its Node's settings (nodeSays) instead of its own,
// or ("") by its own again.
func (w *FenceWatch) followNodeSays(nodeSays string, bound time.Duration, disabled bool) {
	if nodeSays == "" {
		w.Log.Info("fencing by this agent's own settings: its Node says them", "bound", bound, "fencing", !disabled)
		w.Status.FenceBy(nil)
		return
	}
	w.Log.Warn("fencing by the settings this node's Node still says, not this agent's own, until they are published: the leader judges this node's silence by them",
		"node says", nodeSays, "bound", bound, "own bound", w.Bound, "own fencing", !w.Disabled)
	if s, err := kube.ParseFenceSettings(nodeSays); err == nil {
		w.Status.FenceBy(&config.FenceBy{Fencing: s.Fencing, FailoverTimeout: s.FailoverTimeout})
	}
}

// NodeSays records the fence settings this node's Node carries now
// (kube.AnnotationFence; "" for none), as PublishFenceSettings reads
// them: the record keeps them for a restart while cut off.
func (w *FenceWatch) NodeSays(v string) {
	if err := w.setNodeSays(v); err != nil {
		w.Log.Error("fence record not written: a restart cut off fences by what the record said the Node says", "path", w.RecordPath, "err", err)
	}
}

// WillPublish is called before this node's Node is made to say v: the
// record says the stricter of v and what it said, written before the
// Node says it, so that no crash or full disk leaves a record looser than
// the Node (which the leader judges by). false: it could not be written,
// and v is stricter: the Node must not say it yet.
func (w *FenceWatch) WillPublish(v string) bool {
	w.mu.Lock()
	was := w.record.NodeSays
	w.mu.Unlock()
	s := stricterSettings(was, v)
	if s == was {
		return true
	}
	if err := w.setNodeSays(s); err != nil {
		w.Log.Error("fence settings not published: the record of them could not be written first", "settings", v, "path", w.RecordPath, "err", err)
		return false
	}
	return true
}

// setNodeSays sets the record's NodeSays and writes the record.
func (w *FenceWatch) setNodeSays(v string) error {
	w.mu.Lock()
	if w.record.NodeSays == v && w.record.Written != nil {
		w.mu.Unlock()
		return nil
	}
	w.record.NodeSays = v
	if w.record.Node == "" {
		// Nothing recorded yet: the Node's settings alone, the pods not known.
		unknown := false
		w.record.Node, w.record.PodsKnown = w.Node, &unknown
	}
	w.record.Written = &metav1.Time{Time: time.Now()}
	w.mu.Unlock()
	return w.flushRecord()
}

// stricterSettings is whichever of two fence settings (kube.AnnotationFence
// values; "" or unreadable: none) fences sooner: one that fences beats one
// that does not, then the shorter bound.
func stricterSettings(a, b string) string {
	bound := func(v string) (time.Duration, bool) {
		s, err := kube.ParseFenceSettings(v)
		if v == "" || err != nil || !s.Fencing {
			return 0, false
		}
		return DeriveFenceTimings(s.FailoverTimeout).FenceAfter, true
	}
	ab, aFences := bound(a)
	bb, bFences := bound(b)
	if aFences && (!bFences || ab <= bb) {
		return a
	}
	return b
}
