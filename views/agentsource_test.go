package views

import (
	"testing"
	"time"

	"github.com/sitecon/sitecon/audit"
)

// An action is one line on the events screen: its intent and its outcome
// (linked by the record's ID) show as the outcome; an intent alone is an
// action under way (or cut off) and shows as it is.
func TestAuditEventsOneLinePerAction(t *testing.T) {
	at := now.Add(-time.Minute)
	recs := []audit.Record{
		{Time: at, ID: "a1", User: "tech", Action: "cordon", Target: "node-b", Outcome: audit.OutcomeIntent},
		{Time: at.Add(2 * time.Second), ID: "a1", User: "tech", Action: "cordon", Target: "node-b", Outcome: audit.OutcomeDone},
		{Time: at.Add(5 * time.Second), ID: "a2", User: "tech", Action: "drain", Target: "node-c", Outcome: audit.OutcomeIntent},
	}
	got := auditEvents(recs)
	if len(got) != 2 {
		t.Fatalf("want one line per action (2), got %d: %+v", len(got), got)
	}
	if got[0].Kind != "cordon" || got[0].Message != "done by tech" || !got[0].Time.Equal(at.Add(2*time.Second)) {
		t.Errorf("the cordon's line should be its outcome: %+v", got[0])
	}
	if got[0].UnderWay {
		t.Errorf("a cordon done is not under way: %+v", got[0])
	}
	if got[1].Kind != "drain" || got[1].Message != "intent by tech" || !got[1].UnderWay {
		t.Errorf("the drain under way should show its intent: %+v", got[1])
	}
}
