package audit_test

import (
	"path/filepath"
	"testing"

	"github.com/sitecon/sitecon/audit"
)

// An intent is on disk before the change; its outcome, written after,
// carries the same id.
func TestIntentThenOutcome(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := l.Begin(audit.Record{Action: "drain", Target: "node-b", Preflight: []string{"evict 2 pod(s)"}})
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := audit.Read(path)
	if len(recs) != 1 || recs[0].Outcome != audit.OutcomeIntent || recs[0].ID == "" {
		t.Fatalf("no intent on disk before the change: %+v", recs)
	}
	e.Rec.Detail = "evicted 2 of 2 pod(s)"
	if err := e.End(audit.OutcomeDone, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.End(audit.OutcomeFailed, nil); err == nil {
		t.Error("an action ended twice")
	}
	recs, _ = audit.Read(path)
	if len(recs) != 2 || recs[1].ID != recs[0].ID || recs[1].Outcome != audit.OutcomeDone || recs[1].Detail != "evicted 2 of 2 pod(s)" {
		t.Fatalf("intent and outcome not linked: %+v", recs)
	}
}
