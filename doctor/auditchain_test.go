package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/audit"
)

// SC-AUDIT-CHAIN: ok on a log sitecon wrote, an error naming the break on
// one changed by hand, ok with nothing recorded yet, and "not checked"
// (never ok) without a log to read.
func TestCheckAuditChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if got := checkAuditChain(context.Background(), &Env{AuditLog: path}); len(got) != 1 || got[0].Severity != OK || !strings.Contains(got[0].Summary, "no action recorded") {
		t.Errorf("no log yet: %+v", got)
	}
	log, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"node-a", "node-b", "node-c"} {
		if err := log.Write(audit.Record{Action: "cordon", Target: node, Outcome: audit.OutcomeDone}); err != nil {
			t.Fatal(err)
		}
	}
	if got := checkAuditChain(context.Background(), &Env{AuditLog: path}); len(got) != 1 || got[0].Severity != OK || !strings.Contains(got[0].Summary, "3 records, one chain") {
		t.Errorf("a whole log: %+v", got)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), `"target":"node-b"`, `"target":"node-x"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	got := checkAuditChain(context.Background(), &Env{AuditLog: path})
	if len(got) != 1 || got[0].Severity != Error || len(got[0].Evidence) != 1 || !strings.Contains(got[0].Evidence[0], "line 3 does not follow line 2") {
		t.Errorf("a record changed by hand: %+v", got)
	}
	if got := checkAuditChain(context.Background(), &Env{}); len(got) != 1 || !got[0].NotChecked || got[0].Severity == OK {
		t.Errorf("no log given: %+v", got)
	}
}
