package applogs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sitecon/sitecon/kube/streams"
)

// Record is one line of an app's log as written out: one JSON object per
// line. Pod, PodUID and Restarts say which container instance wrote it,
// so that an agent restarted after a crash can tell what it wrote.
type Record struct {
	AppUUID   string    `json:"app_uuid"`
	AppName   string    `json:"app_name"`
	Container string    `json:"container"`
	Time      time.Time `json:"time"`
	Line      string    `json:"line"`
	Pod       string    `json:"pod"`
	PodUID    string    `json:"pod_uid"`
	Restarts  int32     `json:"restarts"`
}

// The directory's files: CurrentFile is written to; once it would pass
// the size cap it is renamed to applogs-<UTC time>.jsonl (names that sort
// oldest first) and a new one begun, and the oldest rotated files are
// removed so that at most MaxFiles files (the current one included) are
// kept.
const (
	CurrentFile   = "applogs.jsonl"
	rotatedPrefix = "applogs-"
	rotatedSuffix = ".jsonl"
	// DefaultMaxFileBytes and DefaultMaxFiles bound the directory at
	// 5 x 8 MiB.
	DefaultMaxFileBytes = 8 << 20
	DefaultMaxFiles     = 5
)

// rotatingFile appends batches of records to the directory's current file
// and rotates it.
type rotatingFile struct {
	dir      string
	maxBytes int64
	maxFiles int
	f        *os.File
	size     int64
	now      func() time.Time
	// syncs counts the batches synced to disk.
	syncs int
}

// The apps' logs are theirs and the device's log service's: readable by
// root and the directory's group, no one else.
const (
	logDirMode  = 0o750
	logFileMode = 0o640
)

func openRotating(dir string, maxBytes int64, maxFiles int) (*rotatingFile, error) {
	if err := os.MkdirAll(dir, logDirMode); err != nil {
		return nil, err
	}
	// A directory an older agent made 0755.
	if err := os.Chmod(dir, logDirMode); err != nil {
		return nil, err
	}
	w := &rotatingFile{dir: dir, maxBytes: maxBytes, maxFiles: maxFiles, now: time.Now}
	if err := w.open(); err != nil {
		return nil, err
	}
	return w, nil
}

// open opens the current file for appending, first cutting a line left
// half-written by a crash (everything after the last newline).
func (w *rotatingFile) open() error {
	path := filepath.Join(w.dir, CurrentFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, logFileMode)
	if err != nil {
		return err
	}
	if err := f.Chmod(logFileMode); err != nil {
		f.Close()
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	size := st.Size()
	if size > 0 {
		end, err := lastNewlineEnd(f, size)
		if err != nil {
			f.Close()
			return err
		}
		if end != size {
			if err := f.Truncate(end); err != nil {
				f.Close()
				return err
			}
			size = end
		}
	}
	if _, err := f.Seek(size, io.SeekStart); err != nil {
		f.Close()
		return err
	}
	w.f, w.size = f, size
	return nil
}

// lastNewlineEnd is the offset just past the file's last newline (0: none).
func lastNewlineEnd(f *os.File, size int64) (int64, error) {
	buf := make([]byte, 4096)
	for end := size; end > 0; {
		start := max(0, end-int64(len(buf)))
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return 0, nil
}

// write appends the batch and syncs it to disk, rotating first when the
// batch would take the current file past the cap. A write that fails (a
// full disk) takes back what it wrote of the batch: the retry appends the
// whole batch after the last whole record, never after half of one.
func (w *rotatingFile) write(batch []byte) error {
	if w.size > 0 && w.size+int64(len(batch)) > w.maxBytes {
		if err := w.rotate(); err != nil {
			return fmt.Errorf("rotate %s: %w", w.dir, err)
		}
	}
	_, err := w.f.Write(batch)
	if err == nil {
		err = w.f.Sync()
	}
	if err != nil {
		return errors.Join(err, w.takeBack())
	}
	w.size += int64(len(batch))
	w.syncs++
	return nil
}

// takeBack cuts the current file back to its last whole batch.
func (w *rotatingFile) takeBack() error {
	if err := w.f.Truncate(w.size); err != nil {
		return fmt.Errorf("cut the half-written batch: %w", err)
	}
	_, err := w.f.Seek(w.size, io.SeekStart)
	return err
}

func (w *rotatingFile) rotate() error {
	if err := w.f.Close(); err != nil {
		return err
	}
	name := rotatedPrefix + w.now().UTC().Format("20060102T150405.000000000Z") + rotatedSuffix
	if err := os.Rename(filepath.Join(w.dir, CurrentFile), filepath.Join(w.dir, name)); err != nil {
		return err
	}
	if err := syncDir(w.dir); err != nil {
		return err
	}
	if err := w.prune(); err != nil {
		return err
	}
	return w.open()
}

// prune keeps the newest MaxFiles-1 rotated files.
func (w *rotatingFile) prune() error {
	rotated, err := rotatedFiles(w.dir)
	if err != nil {
		return err
	}
	var errs []error
	for len(rotated) > w.maxFiles-1 {
		errs = append(errs, os.Remove(filepath.Join(w.dir, rotated[0])))
		rotated = rotated[1:]
	}
	return errors.Join(errs...)
}

// rotatedFiles are the rotated files' names, oldest first.
func rotatedFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), rotatedPrefix) && strings.HasSuffix(e.Name(), rotatedSuffix) {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// Files are the directory's log files in the order they were written:
// the rotated ones, oldest first, then the current one.
func Files(dir string) ([]string, error) {
	names, err := rotatedFiles(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		out = append(out, filepath.Join(dir, n))
	}
	return append(out, filepath.Join(dir, CurrentFile)), nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (w *rotatingFile) close() error { return w.f.Close() }

// written reads the current file for the positions its records reached,
// per container instance: what was written after the last saved position,
// when the agent died between writing a batch and saving the position.
// (A batch is written whole into the current file, and a rotation comes
// only after the batch before it was saved.)
func (w *rotatingFile) written() (map[string]Position, error) {
	f, err := os.Open(filepath.Join(w.dir, CurrentFile))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]Position{}
	// A record longer than any this agent writes (an older agent wrote
	// lines whole) is cut here, no JSON, and skipped: never a reason to
	// give up the directory.
	lines := streams.NewLogLineReader(f, maxRecordBytes)
	for {
		line, err := lines.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		var r Record
		if line.Dropped > 0 || json.Unmarshal(line.Text, &r) != nil {
			continue
		}
		p := Position{PodUID: r.PodUID, Container: r.Container}
		prev := out[p.key()]
		if prev.RestartCount > r.Restarts {
			continue
		}
		if prev.RestartCount < r.Restarts || !prev.Time.Equal(r.Time) {
			prev = Position{PodUID: r.PodUID, Pod: r.Pod, Container: r.Container, RestartCount: r.Restarts, Time: r.Time}
		}
		prev.AtTime++
		out[p.key()] = prev
	}
	return out, nil
}

// maxRecordBytes bounds a record read back: a line of kube.MaxLogLineBytes
// with every byte escaped, and the record's other fields.
const maxRecordBytes = 8*streams.MaxLogLineBytes + 4096

// later is the position further on of a saved one and one read back from
// the written file, for the same container instance.
func later(saved, written Position) Position {
	switch {
	case written.RestartCount != saved.RestartCount:
		if written.RestartCount > saved.RestartCount {
			written.Namespace = saved.Namespace
			return written
		}
		return saved
	case written.Time.After(saved.Time):
		written.Namespace = saved.Namespace
		return written
	case written.Time.Equal(saved.Time) && written.AtTime > saved.AtTime:
		saved.AtTime = written.AtTime
	}
	return saved
}
