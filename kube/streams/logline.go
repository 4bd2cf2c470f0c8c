package streams

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// MaxLogLineBytes bounds one line of an app's log wherever sitecon reads
// one (the agent's log collector, sitecon logs, the console): an app that
// prints an endless line, or binary with no newline, must not grow the
// reader without end. The rest of a longer line is read and dropped, and
// the line says how much went (LogLineCut).
const MaxLogLineBytes = 16 << 10

// LogLineReader reads lines of at most a bound, in memory bounded by it:
// a reader of an app's log.
type LogLineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewLogLineReader reads r's lines, each cut to max bytes (0:
// MaxLogLineBytes).
func NewLogLineReader(r io.Reader, max int) *LogLineReader {
	if max <= 0 {
		max = MaxLogLineBytes
	}
	return &LogLineReader{r: bufio.NewReaderSize(r, 32<<10), max: max}
}

// Line is one line as read: Text without its newline, the first max bytes
// of it; Dropped is how many bytes after those were dropped; Complete
// says it ended with a newline (a last line cut off by the stream's end
// is not complete).
type Line struct {
	Text     []byte
	Dropped  int64
	Complete bool
}

// Next reads the next line. At the stream's end it returns what is left
// of a last line without a newline (Complete false) with the error, or
// io.EOF alone. Text is valid until the next call.
func (lr *LogLineReader) Next() (Line, error) {
	lr.buf = lr.buf[:0]
	var dropped int64
	for {
		chunk, err := lr.r.ReadSlice('\n')
		keep := min(len(chunk), lr.max-len(lr.buf))
		lr.buf = append(lr.buf, chunk[:keep]...)
		dropped += int64(len(chunk) - keep)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		complete := err == nil
		if complete {
			// The newline: kept when it fit, counted as dropped when not.
			if keep == len(chunk) {
				lr.buf = lr.buf[:len(lr.buf)-1]
			} else {
				dropped--
			}
		}
		if len(lr.buf) > 0 && lr.buf[len(lr.buf)-1] == '\r' && complete {
			lr.buf = lr.buf[:len(lr.buf)-1]
		}
		if !complete && len(lr.buf) == 0 && dropped == 0 {
			return Line{}, err
		}
		return Line{Text: lr.buf, Dropped: dropped, Complete: complete}, err
	}
}

// Buffered is how many bytes are read and not yet returned.
func (lr *LogLineReader) Buffered() int { return lr.r.Buffered() }

// LogLineCut is what a cut line ends with: how much of it was dropped.
func LogLineCut(dropped int64) string {
	return fmt.Sprintf(" … [sitecon: %d bytes of this line dropped]", dropped)
}

// String is the line's text, with LogLineCut when it was cut.
func (l Line) String() string {
	if l.Dropped > 0 {
		return string(l.Text) + LogLineCut(l.Dropped)
	}
	return string(l.Text)
}
