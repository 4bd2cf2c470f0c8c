package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The tail reads what was appended since it last looked, keeps the newest
// records, holds a half-written line until its end arrives, and starts
// again when the log is replaced or cut short.
func TestTailFollowsTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	tail := NewTail(path, 3)
	if recs, err := tail.Latest(); err != nil || len(recs) != 0 {
		t.Fatalf("no log yet: %v %v", recs, err)
	}
	log, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"node-a", "node-b"} {
		if err := log.Write(Record{Action: "cordon", Target: target, Outcome: OutcomeDone}); err != nil {
			t.Fatal(err)
		}
	}
	recs, _ := tail.Latest()
	if len(recs) != 2 || recs[1].Target != "node-b" {
		t.Fatalf("after two records: %+v", recs)
	}
	offset := tail.offset
	// Nothing new: nothing read.
	if recs, _ := tail.Latest(); len(recs) != 2 || tail.offset != offset {
		t.Fatalf("an unchanged log was read again: offset %d → %d", offset, tail.offset)
	}
	// Half a line, then the rest.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"action":"drain","target":"no`); err != nil {
		t.Fatal(err)
	}
	if recs, _ := tail.Latest(); len(recs) != 2 {
		t.Fatalf("a half-written line was taken: %+v", recs)
	}
	if _, err := f.WriteString("de-c\"}\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, target := range []string{"node-d", "node-e"} {
		if err := log.Write(Record{Action: "cordon", Target: target, Outcome: OutcomeDone}); err != nil {
			t.Fatal(err)
		}
	}
	recs, _ = tail.Latest()
	if len(recs) != 3 || recs[0].Target != "node-c" || recs[2].Target != "node-e" {
		t.Fatalf("the newest three: %+v", recs)
	}
	// Replaced by a new log (rotation): read from its start.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := log.Write(Record{Action: "seed", Target: "node-x", Outcome: OutcomeDone}); err != nil {
		t.Fatal(err)
	}
	recs, _ = tail.Latest()
	if len(recs) != 1 || recs[0].Target != "node-x" {
		t.Fatalf("after rotation: %+v", recs)
	}
}

// A line without its end is held for the next read, but only up to
// MaxLineBytes: a log with a huge line and no newline (not one sitecon
// wrote) must not grow the console's memory, and what follows the huge
// line on the same line is not taken for a record; the next line is.
func TestTailBoundsAPartialLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	tail := NewTail(path, 5)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := strings.Repeat("x", 1<<20)
	for i := range 4 {
		if _, err := f.WriteString(chunk); err != nil {
			t.Fatal(err)
		}
		if _, err := tail.Latest(); err != nil {
			t.Fatal(err)
		}
		if held := len(tail.partial); held > MaxLineBytes {
			t.Fatalf("after %d MiB without a newline the tail holds %d bytes of it, more than MaxLineBytes (%d)", i+1, held, MaxLineBytes)
		}
	}
	// The huge line ends in what looks like a record: it is still the
	// huge line.
	if _, err := f.WriteString(`{"action":"cordon","target":"forged","outcome":"done"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	log, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Write(Record{Action: "cordon", Target: "node-a", Outcome: OutcomeDone}); err != nil {
		t.Fatal(err)
	}
	var recs []Record
	for range 3 { // a megabyte per read
		if recs, err = tail.Latest(); err != nil {
			t.Fatal(err)
		}
	}
	if len(recs) != 1 || recs[0].Target != "node-a" {
		t.Fatalf("after the huge line, only the next line's record: %+v", recs)
	}
}
