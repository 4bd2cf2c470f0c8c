package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// ChainHash is what the line after line carries in Prev: the SHA-256 of
// line as written, without its newline; of a line over MaxLineBytes (not
// sitecon's: a record is never that long), of its last MaxLineBytes, so
// that a junk line neither stops the log nor escapes the chain.
func ChainHash(line []byte) string {
	line = bytes.TrimSuffix(line, []byte("\n"))
	if len(line) > MaxLineBytes {
		line = line[len(line)-MaxLineBytes:]
	}
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:])
}

// lastLine is the file's last line (nil for an empty file), read
// backwards from the end in growing steps, up to what ChainHash reads of
// it; cut when it has no newline (the last write was cut off: the next
// record chains to that fragment, so what was cut shows too).
func lastLine(f *os.File) (line []byte, cut bool, err error) {
	st, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	size := st.Size()
	if size == 0 {
		return nil, false, nil
	}
	for step := int64(4 << 10); ; step *= 4 {
		n := min(step, size)
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, size-n); err != nil && !errors.Is(err, io.EOF) {
			return nil, false, err
		}
		cut = buf[len(buf)-1] != '\n'
		body := bytes.TrimSuffix(buf, []byte("\n"))
		if i := bytes.LastIndexByte(body, '\n'); i >= 0 {
			return body[i+1:], cut, nil
		}
		if n == size || n > MaxLineBytes {
			// The whole file is one line, or the line is longer than
			// ChainHash reads of it.
			return body, cut, nil
		}
	}
}

// ChainReport is what VerifyChain found.
type ChainReport struct {
	// Lines is how many lines the log holds; Unchained how many at its
	// start carry no chain (written before sitecon chained its log).
	Lines, Unchained int
	// Breaks are the lines whose Prev is not the line before them, by
	// line number (1-based), each with what is wrong: the line before was
	// changed or removed, or a line was put in.
	Breaks []string
}

// VerifyChain reads the log at path and checks every line's Prev against
// the line before it. A missing log is an empty one. It shows a change
// made by hand to a line, a removal of lines within the log, and a line
// put in after the chain began. It does not show lines cut off the end,
// lines without a chain put in before its first chained line (they look
// older than the chain), nor a log rewritten whole from the change on:
// only records kept off the machine would.
func VerifyChain(path string) (ChainReport, error) {
	var rep ChainReport
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	defer f.Close()
	lines := bufio.NewReaderSize(f, 64<<10)
	var prev []byte
	// The leading lines without a chain: all but the last of them were
	// written before sitecon chained its log (the last is where the chain
	// starts, as a new log's first line is).
	leading, leadingRun := true, 0
	for {
		line, err := readLineTail(lines)
		if errors.Is(err, io.EOF) && len(line) == 0 {
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return rep, err
		}
		rep.Lines++
		var r struct {
			Prev string `json:"prev"`
		}
		switch {
		case json.Unmarshal(line, &r) != nil:
			leading = false
			rep.Breaks = append(rep.Breaks, fmt.Sprintf("line %d is not a record", rep.Lines))
		case leading && r.Prev == "":
			leadingRun++
		default:
			leading = false
			want := ""
			if prev != nil {
				want = ChainHash(prev)
			}
			switch {
			case r.Prev == "":
				rep.Breaks = append(rep.Breaks, fmt.Sprintf("line %d carries no chain: put in by hand, or written by a sitecon older than the chain (restart its agent)", rep.Lines))
			case r.Prev != want:
				rep.Breaks = append(rep.Breaks, fmt.Sprintf("line %d does not follow line %d as written: a line was changed, removed or put in there", rep.Lines, rep.Lines-1))
			}
		}
		prev = append(prev[:0], line...)
	}
	rep.Unchained = max(leadingRun-1, 0)
	return rep, nil
}

// readLineTail reads one line (without its newline), keeping at most its
// last MaxLineBytes: what ChainHash reads of it.
func readLineTail(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxLineBytes+1 {
			line = line[len(line)-MaxLineBytes-1:]
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}
