package drainrequest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube/flow"
)

// A request made while the agent settles the one before it (its node back
// after the boot) is its own: settling the old one neither removes the new
// one's record nor reports it as not requested. Before, the settle step
// cleared whatever request was current when it ended.
func TestSettlingAnOldRequestKeepsANewOne(t *testing.T) {
	dir := t.TempDir()
	r := New(Options{Node: "node-a", StateDir: dir, Audit: func() (flow.Recorder, error) {
		log, err := audit.Open(filepath.Join(dir, "audit.jsonl"))
		return flow.Recorder{Log: log}, err
	}})
	if _, err := r.Request(Request{Requester: "baseosmgr", Reason: "update"}); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	old := r.rec
	r.mu.Unlock()
	// The first request failed; the node went down and came back, and the
	// agent is about to settle it when the device asks again.
	_ = r.update(func(s *Status, _ *record) { s.State = FailedDrain })
	if _, err := r.Request(Request{Requester: "nodeagent", Reason: "reboot"}); err != nil {
		t.Fatal(err)
	}
	r.settle(old, "node-a is back and Ready")

	if st := r.Status(); st.State != Requested || st.Requester != "nodeagent" {
		t.Errorf("after settling the old request, the new one reads %s by %q, want %s by nodeagent", st.State, st.Requester, Requested)
	}
	data, err := os.ReadFile(filepath.Join(dir, RecordFile))
	if err != nil {
		t.Fatalf("the new request's record is gone: %v", err)
	}
	if rec := string(data); !strings.Contains(rec, "nodeagent") {
		t.Errorf("the record on disk is not the new request's: %s", rec)
	}
}

// A cancel is on disk before it is answered: an agent restarted before it
// took its cordon back still knows the request was called off (and does
// not resume the drain), and a new request waits until it is settled. A
// cancel with nothing to cancel writes nothing.
func TestACancelSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Node: "node-a", StateDir: dir, Audit: func() (flow.Recorder, error) {
		log, err := audit.Open(filepath.Join(dir, "audit.jsonl"))
		return flow.Recorder{Log: log}, err
	}}
	r := New(opts)
	if _, err := r.Cancel(Cancel{Requester: "baseosmgr"}); err != ErrNothingToCancel {
		t.Fatalf("a cancel with no request: %v, want %v", err, ErrNothingToCancel)
	}
	if _, err := os.Stat(filepath.Join(dir, RecordFile)); !os.IsNotExist(err) {
		t.Fatalf("a cancel with no request wrote a record: %v", err)
	}
	if _, err := r.Request(Request{Requester: "baseosmgr", Reason: "update"}); err != nil {
		t.Fatal(err)
	}
	_ = r.update(func(s *Status, rc *record) { s.State, rc.CordonedByAgent = Cordoned, true })
	if st, err := r.Cancel(Cancel{Requester: "baseosmgr"}); err != nil || st.CancelledBy != "baseosmgr" {
		t.Fatalf("cancel: %+v, %v", st, err)
	}

	restarted := New(opts)
	if by := restarted.cancelledBy(); by != "baseosmgr" {
		t.Fatalf("after a restart the cancel is forgotten (cancelled by %q)", by)
	}
	if st := restarted.Status(); st.CancelledBy != "baseosmgr" || !st.CordonedByAgent {
		t.Fatalf("after a restart the status reads %+v", st)
	}
	if _, err := restarted.Request(Request{Requester: "nodeagent"}); err != ErrBusy {
		t.Fatalf("a request while the cancelled one is settled: %v, want %v", err, ErrBusy)
	}
}

// A request is called off by whoever asked for it: another caller (a
// second service, a technician's default requester) is refused and changes
// nothing, unless it forces; a drain complete for a reboot must not be
// uncordoned under the requester's feet by someone else.
func TestACancelIsTheRequestersUnlessForced(t *testing.T) {
	dir := t.TempDir()
	r := New(Options{Node: "node-a", StateDir: dir, Audit: func() (flow.Recorder, error) {
		log, err := audit.Open(filepath.Join(dir, "audit.jsonl"))
		return flow.Recorder{Log: log}, err
	}})
	if _, err := r.Request(Request{Requester: "baseosmgr", Reason: "update"}); err != nil {
		t.Fatal(err)
	}
	_ = r.update(func(s *Status, rc *record) { s.State, rc.CordonedByAgent = Complete, true })
	st, err := r.Cancel(Cancel{Requester: "root (sitecon agent drain-request)"})
	if !errors.Is(err, ErrNotTheRequester) || st.CancelledBy != "" || r.cancelledBy() != "" {
		t.Fatalf("another caller's cancel: %+v, %v; want %v and nothing changed", st, err, ErrNotTheRequester)
	}
	if st, err := r.Cancel(Cancel{Requester: "a technician", Force: true}); err != nil || st.CancelledBy != "a technician" {
		t.Fatalf("a forced cancel: %+v, %v", st, err)
	}
}
