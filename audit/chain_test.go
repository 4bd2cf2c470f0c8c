package audit

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Docs/SECURITY.md gap 8: every record carries the hash of the line before
// it, so a line changed or removed by hand breaks the chain where it was;
// two writers at once (two processes: the console and a command) still
// make one chain.
func TestAuditLogIsChained(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	var wg sync.WaitGroup
	for w := range 2 {
		log, err := Open(path) // each its own file descriptors, as two processes
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for i := range 20 {
				if err := log.Write(Record{Action: "cordon", Target: fmt.Sprintf("node-%d-%d", w, i), Outcome: OutcomeDone}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	rep, err := VerifyChain(path)
	if err != nil || rep.Lines != 40 || rep.Unchained != 0 || len(rep.Breaks) != 0 {
		t.Fatalf("a log sitecon wrote: %+v, %v; want 40 lines, one chain", rep, err)
	}

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	changed := bytes.Join(lines, nil)
	changed = bytes.Replace(changed, []byte(`"target":"node-0-7"`), []byte(`"target":"node-X-7"`), 1)
	removed := bytes.Join(append(append([][]byte{}, lines[:10]...), lines[11:]...), nil)
	for name, c := range map[string]struct {
		data []byte
		want string
	}{
		"a line changed":  {changed, "does not follow line"},
		"line 11 removed": {removed, "line 11 does not follow line 10"},
	} {
		tampered := filepath.Join(t.TempDir(), "audit.jsonl")
		if err := os.WriteFile(tampered, c.data, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := VerifyChain(tampered)
		if err != nil || len(rep.Breaks) != 1 || !strings.Contains(rep.Breaks[0], c.want) {
			t.Errorf("%s: %+v, %v; want one break, %q", name, rep, err, c.want)
		}
	}
}

// A log written before the chain keeps its lines: they are counted as
// unchained, and the chain starts at the last of them. A junk line (over
// the bound, not a record) neither stops the log nor escapes the chain.
func TestAuditChainOverAnOldLogAndJunk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	old := `{"action":"cordon","target":"node-a","outcome":"done"}` + "\n"
	if err := os.WriteFile(path, []byte(old+old+old), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := log.Write(Record{Action: "drain", Target: "node-b", Outcome: OutcomeDone}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := VerifyChain(path)
	if err != nil || rep.Lines != 5 || rep.Unchained != 2 || len(rep.Breaks) != 0 {
		t.Fatalf("an old log, then chained records: %+v, %v; want 5 lines, 2 unchained, no break", rep, err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(strings.Repeat("x", MaxLineBytes+100) + "\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := log.Write(Record{Action: "uncordon", Target: "node-b", Outcome: OutcomeDone}); err != nil {
		t.Fatalf("a record after a junk line: %v", err)
	}
	rep, err = VerifyChain(path)
	if err != nil || rep.Lines != 7 || len(rep.Breaks) != 1 || !strings.Contains(rep.Breaks[0], "line 6 is not a record") {
		t.Fatalf("after a junk line: %+v, %v; want the junk line alone reported", rep, err)
	}
}

// A log whose last write was cut off (a full disk, a crash) ends without a
// newline: the next record starts a line of its own, chained to the
// fragment, and is read back; the fragment is what the chain reports.
func TestARecordAfterACutLineStandsAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Write(Record{Action: "cordon", Target: "node-a", Outcome: OutcomeDone}); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"action":"drain","tar`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := log.Write(Record{Action: "uncordon", Target: "node-a", Outcome: OutcomeDone}); err != nil {
		t.Fatal(err)
	}
	recs, err := Read(path)
	if err != nil || len(recs) != 2 || recs[1].Action != "uncordon" {
		t.Fatalf("records after a cut line: %+v, %v; want the cordon and the uncordon", recs, err)
	}
	rep, err := VerifyChain(path)
	if err != nil || rep.Lines != 3 || len(rep.Breaks) != 1 || !strings.Contains(rep.Breaks[0], "line 2 is not a record") {
		t.Fatalf("the chain over a cut line: %+v, %v; want the fragment alone reported", rep, err)
	}
}
