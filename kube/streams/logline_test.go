package streams

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// Lines are cut to the bound and say how much went; a short line, a CRLF
// line and a last line without newline come whole.
func TestLogLineReaderCutsLongLines(t *testing.T) {
	in := "short\r\n" + strings.Repeat("x", 100) + "\n" + strings.Repeat("y", 10) + "\nend"
	lr := NewLogLineReader(strings.NewReader(in), 10)
	want := []struct {
		text     string
		dropped  int64
		complete bool
	}{{"short", 0, true}, {"xxxxxxxxxx", 90, true}, {"yyyyyyyyyy", 0, true}, {"end", 0, false}}
	for i, w := range want {
		l, err := lr.Next()
		if string(l.Text) != w.text || l.Dropped != w.dropped || l.Complete != w.complete {
			t.Errorf("line %d: %q dropped %d complete %v, want %q %d %v", i, l.Text, l.Dropped, l.Complete, w.text, w.dropped, w.complete)
		}
		if (err != nil) != !w.complete {
			t.Errorf("line %d: err %v", i, err)
		}
	}
	if _, err := lr.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the end: %v", err)
	}
	if got := (Line{Text: []byte("ab"), Dropped: 7}).String(); got != "ab"+LogLineCut(7) {
		t.Errorf("a cut line reads %q", got)
	}
}

// endless is an app printing one line that never ends, n bytes of it.
type endless struct{ n int64 }

func (e *endless) Read(p []byte) (int, error) {
	if e.n <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), e.n)
	for i := range p[:k] {
		p[i] = 0xfe // binary, no newline
	}
	e.n -= k
	return int(k), nil
}

// An endless line is read in the bound's memory: 64 MiB of binary with no
// newline allocate no more than a few times the bound, however long.
func TestLogLineReaderEndlessLineStaysBounded(t *testing.T) {
	var lr *LogLineReader
	allocs := testing.AllocsPerRun(2, func() {
		lr = NewLogLineReader(&endless{n: 64 << 20}, 0)
		l, err := lr.Next()
		if !errors.Is(err, io.EOF) || l.Complete || len(l.Text) != MaxLogLineBytes || l.Dropped != 64<<20-MaxLogLineBytes {
			t.Errorf("the endless line: %d bytes kept, %d dropped, complete %v, %v", len(l.Text), l.Dropped, l.Complete, err)
		}
	})
	if allocs > 30 {
		t.Errorf("%v allocations reading a 64 MiB line: the reader grows with the line", allocs)
	}
	if cap(lr.buf) > 2*MaxLogLineBytes || bytes.Count(lr.buf, []byte{0xfe}) != MaxLogLineBytes {
		t.Errorf("the line buffer holds %d bytes (cap %d)", len(lr.buf), cap(lr.buf))
	}
}
