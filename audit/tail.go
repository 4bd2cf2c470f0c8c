package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"syscall"
)

// MaxLineBytes is the longest line the log's readers take as a record: a
// record sitecon writes is a few hundred bytes (its preflight lines, an
// error); a longer line is not one of its records.
const MaxLineBytes = 1 << 20

// Tail follows an audit log for a reader that polls it (the console): each
// Latest reads only what was appended since the last, and keeps the
// newest records. A log replaced (rotated, or recreated) or cut short is
// read again from its start.
type Tail struct {
	path   string
	keep   int
	offset int64
	ino    uint64
	recs   []Record
	// partial is a line whose end has not been written yet, at most
	// MaxLineBytes of it.
	partial []byte
	// skipping: the line being read grew past MaxLineBytes and was
	// dropped; what follows, up to its newline, is dropped too.
	skipping bool
}

// NewTail follows the log at path, keeping its newest keep records.
func NewTail(path string, keep int) *Tail { return &Tail{path: path, keep: max(keep, 1)} }

// Latest returns the newest records, oldest first, having read what was
// appended since the last call. A log that does not exist (yet) has none.
func (t *Tail) Latest() ([]Record, error) {
	f, err := os.Open(t.path)
	if errors.Is(err, os.ErrNotExist) {
		t.reset(0)
		return nil, nil
	}
	if err != nil {
		return t.recs, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return t.recs, err
	}
	var ino uint64
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		ino = sys.Ino
	}
	if ino != t.ino || st.Size() < t.offset {
		t.reset(ino)
	}
	if st.Size() == t.offset {
		return t.recs, nil
	}
	if _, err := f.Seek(t.offset, io.SeekStart); err != nil {
		return t.recs, err
	}
	// A megabyte at a time at most: a huge log is caught up over calls.
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return t.recs, err
	}
	t.offset += int64(len(data))
	if t.skipping {
		end := bytes.IndexByte(data, '\n')
		if end < 0 {
			return t.recs, nil
		}
		data, t.skipping = data[end+1:], false
	}
	data = append(t.partial, data...)
	last := bytes.LastIndexByte(data, '\n')
	t.partial = append([]byte(nil), data[last+1:]...)
	if len(t.partial) > MaxLineBytes {
		// Not a record sitecon wrote: held, it would grow with the file.
		t.partial, t.skipping = nil, true
	}
	for _, line := range bytes.Split(data[:last+1], []byte("\n")) {
		var r Record
		if len(line) > 0 && json.Unmarshal(line, &r) == nil {
			t.recs = append(t.recs, r)
		}
	}
	if len(t.recs) > t.keep {
		t.recs = append([]Record(nil), t.recs[len(t.recs)-t.keep:]...)
	}
	return t.recs, nil
}

func (t *Tail) reset(ino uint64) {
	t.offset, t.ino, t.recs, t.partial, t.skipping = 0, ino, nil, nil, false
}
