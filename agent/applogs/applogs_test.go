package applogs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/kube/streams"
)

func TestPositionAdmitsEachLineOnce(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 500, time.UTC)
	t1 := t0.Add(time.Millisecond)
	// What the API sends when resumed from the second: lines before the
	// position, the same instant several times, then new ones.
	stream := []time.Time{t0.Add(-time.Second), t0, t0, t0, t1, t1}
	for _, tc := range []struct {
		name string
		pos  Position
		want []bool
	}{
		{name: "from the start", pos: Position{}, want: []bool{true, true, true, true, true, true}},
		{name: "two of three at t0 written", pos: Position{Time: t0, AtTime: 2}, want: []bool{false, false, false, true, true, true}},
		{name: "all of t0 written", pos: Position{Time: t0, AtTime: 3}, want: []bool{false, false, false, false, true, true}},
		{name: "one at t1 written", pos: Position{Time: t1, AtTime: 1}, want: []bool{false, false, false, false, false, true}},
	} {
		p, seen := tc.pos, 0
		for i, ts := range stream {
			if got := p.Admit(ts, &seen); got != tc.want[i] {
				t.Errorf("%s: line %d (%s): admitted %v, want %v", tc.name, i, ts.Format(time.RFC3339Nano), got, tc.want[i])
			}
		}
		if !p.Time.Equal(t1) || p.AtTime != 2 {
			t.Errorf("%s: ends at %s x%d, want t1 x2", tc.name, p.Time, p.AtTime)
		}
	}
	if s := (Position{Time: t0}).SinceTime(); !s.Equal(t0.Truncate(time.Second)) {
		t.Errorf("since %s, want the position's second", s)
	}
	if (Position{}).SinceTime() != nil {
		t.Error("a fresh position asks from the start")
	}
}

func TestLaterPosition(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name           string
		saved, written Position
		want           Position
	}{
		{"file ahead", Position{Time: t0, AtTime: 1}, Position{Time: t0.Add(time.Second), AtTime: 2}, Position{Time: t0.Add(time.Second), AtTime: 2}},
		{"more at the same instant", Position{Time: t0, AtTime: 1}, Position{Time: t0, AtTime: 3}, Position{Time: t0, AtTime: 3}},
		{"saved ahead", Position{Time: t0.Add(time.Second), AtTime: 1}, Position{Time: t0, AtTime: 5}, Position{Time: t0.Add(time.Second), AtTime: 1}},
		{"a newer instance in the file", Position{RestartCount: 0, Time: t0.Add(time.Hour), AtTime: 1}, Position{RestartCount: 1, Time: t0, AtTime: 1}, Position{RestartCount: 1, Time: t0, AtTime: 1}},
		{"an older instance in the file", Position{RestartCount: 2, Time: t0, AtTime: 1}, Position{RestartCount: 1, Time: t0.Add(time.Hour), AtTime: 1}, Position{RestartCount: 2, Time: t0, AtTime: 1}},
	} {
		got := later(tc.saved, tc.written)
		if got.RestartCount != tc.want.RestartCount || !got.Time.Equal(tc.want.Time) || got.AtTime != tc.want.AtTime {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func record(t *testing.T, r Record) []byte {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return append(data, '\n')
}

// The directory stays within its bound: files rotated at the cap, the
// oldest removed, nothing else touched.
func TestRotationBoundsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	w, err := openRotating(dir, 1000, 3)
	if err != nil {
		t.Fatal(err)
	}
	tick := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.now = func() time.Time { tick = tick.Add(time.Second); return tick }
	line := record(t, Record{Line: strings.Repeat("x", 200), PodUID: "u", Container: "c"})
	for range 40 {
		if err := w.write(line); err != nil {
			t.Fatal(err)
		}
	}
	files, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("files %v, want 3 (the cap)", files)
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 1000 {
			t.Errorf("%s: %d bytes, over the 1000-byte cap", f, st.Size())
		}
	}
	if !strings.HasSuffix(files[len(files)-1], CurrentFile) || files[0] >= files[1] {
		t.Errorf("files %v: want rotated ones oldest first, then the current one", files)
	}
	_ = w.close()
}

// A line half-written when the agent died is cut, and the positions the
// current file reached are read back from it.
func TestReopenCutsAHalfLineAndReadsWhatWasWritten(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var data []byte
	for i, ts := range []time.Time{t0, t0.Add(time.Second), t0.Add(time.Second)} {
		data = append(data, record(t, Record{PodUID: "u1", Pod: "p", Container: "c", Time: ts, Line: "l" + string(rune('0'+i))})...)
	}
	data = append(data, record(t, Record{PodUID: "u1", Container: "d", Restarts: 1, Time: t0, Line: "d"})...)
	data = append(data, `{"pod_uid":"u1","container":"c","ti`...)
	if err := os.WriteFile(filepath.Join(dir, CurrentFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := openRotating(dir, 1<<20, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.close() }()
	got, err := w.written()
	if err != nil {
		t.Fatal(err)
	}
	if c := got["u1_c"]; !c.Time.Equal(t0.Add(time.Second)) || c.AtTime != 2 || c.RestartCount != 0 {
		t.Errorf("container c: %+v, want its last instant twice", c)
	}
	if d := got["u1_d"]; d.RestartCount != 1 || d.AtTime != 1 {
		t.Errorf("container d: %+v", d)
	}
	if err := w.write(record(t, Record{PodUID: "u1", Container: "c", Time: t0.Add(2 * time.Second), Line: "next"})); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, CurrentFile))
	lines := strings.Split(strings.TrimSuffix(string(after), "\n"), "\n")
	if len(lines) != 5 || !strings.Contains(lines[4], `"line":"next"`) {
		t.Errorf("after reopening and one write:\n%s\nwant the half line gone and the new one whole", after)
	}
}

func TestSplitTimestamp(t *testing.T) {
	ts, text, ok := splitTimestamp("2026-01-01T12:00:00.123456789Z hello  world\r")
	if !ok || text != "hello  world" || ts.Nanosecond() != 123456789 {
		t.Errorf("%s %q %v", ts, text, ok)
	}
	if _, text, ok := splitTimestamp("2026-01-01T12:00:00Z"); !ok || text != "" {
		t.Errorf("an empty line: %q %v", text, ok)
	}
	if _, _, ok := splitTimestamp("no timestamp"); ok {
		t.Error("a line without a timestamp admitted")
	}
}

// A follow resumed from a position must hold the position's last line
// before any later one: a kubelet's log of one instance holds every line
// it wrote, so a log that passes the position without it is a newer
// instance the pod's status does not show yet. Its lines are not written
// as the old instance's (they would be written again, as the new one's,
// once the restart shows).
func TestFollowOfAnotherInstanceIsNotWritten(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	stamp := func(d time.Duration, text string) string {
		return t0.Add(d).Format(time.RFC3339Nano) + " " + text + "\n"
	}
	for _, tc := range []struct {
		name    string
		verify  bool
		stream  string
		wantErr error
		want    []string
	}{
		{name: "the same instance goes on", verify: true,
			stream: stamp(-time.Millisecond, "before") + stamp(0, "last written") + stamp(time.Millisecond, "next"), want: []string{"next"}},
		{name: "a newer instance", verify: true,
			stream: stamp(-time.Millisecond, "new first") + stamp(time.Millisecond, "new second"), wantErr: errNotResumed},
		{name: "a newer instance, past the grace", verify: false,
			stream: stamp(-time.Millisecond, "new first") + stamp(time.Millisecond, "new second"), want: []string{"new second"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c, err := New(Options{Dir: dir, Node: "node-a"}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.out.close() }()
			tg := target{LogTarget: streams.LogTarget{App: "a", Pod: "p", Container: "main"}, PodUID: "uid-1"}
			pos := Position{PodUID: "uid-1", Container: "main", Time: t0, AtTime: 1}
			var pod *corev1.Pod
			guard := &instanceGuard{pods: make(chan *corev1.Pod), pod: &pod, verify: tc.verify}
			err = c.copyLines(context.Background(), strings.NewReader(tc.stream), tg, &pos, time.Hour, guard)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("copy: %v, want %v", err, tc.wantErr)
			}
			data, _ := os.ReadFile(filepath.Join(dir, CurrentFile))
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
				var r Record
				if l != "" && json.Unmarshal([]byte(l), &r) == nil {
					got = append(got, r.Line)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("written %q, want %q", got, tc.want)
			}
		})
	}
}

// A follow ends once the pod reports that its container restarted: the
// rest of the instance is its previous log.
func TestFollowEndsWhenThePodReportsARestart(t *testing.T) {
	c, err := New(Options{Dir: t.TempDir(), Node: "node-a"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.out.close() }()
	stream, feed := io.Pipe()
	defer feed.Close()
	tg := target{LogTarget: streams.LogTarget{App: "a", Pod: "p", Container: "main"}, PodUID: "uid-1"}
	pos := Position{PodUID: "uid-1", Container: "main", RestartCount: 2}
	pods := make(chan *corev1.Pod, 1)
	var latest *corev1.Pod
	done := make(chan error, 1)
	go func() {
		done <- c.copyLines(context.Background(), stream, tg, &pos, time.Hour, &instanceGuard{pods: pods, pod: &latest, verify: true})
	}()
	withRestarts := func(n int32) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "main", RestartCount: n}}}}
	}
	pods <- withRestarts(2)
	pods <- withRestarts(3)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the follow went on after the pod reported a restart")
	}
	if restartCount(latest, "main") != 3 {
		t.Errorf("the newest pod seen has %d restarts, want 3 (handed back to the follower)", restartCount(latest, "main"))
	}
}

// When a follow's guard is off and when it comes back on: set at the
// first stream that does not go on from the position, kept while none
// does; cleared by a stream that held the position's line, and by one
// that, past the grace and unchecked, wrote lines (the position's last
// line is then in the current log, so the next restart the pod reports
// late is caught again); not cleared by an unchecked stream that wrote
// nothing.
func TestTheRestartGuardComesBackAfterTheGrace(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	later := t0.Add(time.Minute)
	checking, unchecked := &instanceGuard{verify: true}, &instanceGuard{verify: false}
	held := &instanceGuard{verify: true, verified: true}
	for _, c := range []struct {
		name       string
		since      time.Time
		notResumed bool
		guard      *instanceGuard
		moved      bool
		want       time.Time
	}{
		{"first stream of another instance", time.Time{}, true, checking, false, later},
		{"again another instance", t0, true, checking, false, t0},
		{"a stream that held the position's line", t0, false, held, true, time.Time{}},
		{"past the grace, lines written unchecked", t0, false, unchecked, true, time.Time{}},
		{"past the grace, nothing written", t0, false, unchecked, false, t0},
		{"checked, ended before any line", t0, false, checking, false, t0},
	} {
		if got := nextUnverifiedSince(c.since, later, c.notResumed, c.guard, c.moved); !got.Equal(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A full disk: the batch that did not fit is taken back whole, so that its
// retry, once there is room, follows the last whole record, never half of
// one; the files are 0640 in a 0750 directory. A record an older agent
// wrote longer than any now written is skipped when read back, and the
// directory opens.
func TestAFullDiskLeavesNoHalfRecord(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (a small tmpfs for a full disk)")
	}
	disk := t.TempDir()
	if err := unix.Mount("sitecon-test", disk, "tmpfs", 0, "size=512k"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(disk, unix.MNT_DETACH) })
	dir := filepath.Join(disk, "applogs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// An older agent's record of a line kept whole, longer than any read back.
	old := record(t, Record{PodUID: "u0", Container: "c", Time: time.Now(), Line: strings.Repeat("o", maxRecordBytes)})
	if err := os.WriteFile(filepath.Join(dir, CurrentFile), old, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := openRotating(dir, 1<<20, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.close() }()
	if _, err := w.written(); err != nil {
		t.Fatalf("a record longer than any written now made the directory unreadable: %v", err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o750, filepath.Join(dir, CurrentFile): 0o640} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, st.Mode().Perm(), err, want)
		}
	}
	filler := filepath.Join(disk, "filler")
	if err := os.WriteFile(filler, make([]byte, 8<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	batch := func(i int) []byte {
		return record(t, Record{PodUID: "u1", Container: "c", Time: time.Unix(int64(i), 0), Line: fmt.Sprintf("%d %s", i, strings.Repeat("z", 3000))})
	}
	var failed int
	for i := 0; ; i++ {
		if err := w.write(batch(i)); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			failed = i
			break
		}
		if i > 1000 {
			t.Fatal("the disk never filled")
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := w.write(batch(failed)); err != nil {
		t.Fatalf("the retry after room was made: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(dir, CurrentFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for i, l := range lines[1:] {
		var r Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %d is no whole record (%v): %.80q", i+2, err, l)
		}
		if !strings.HasPrefix(r.Line, fmt.Sprint(i, " ")) {
			t.Fatalf("line %d holds batch %q, want batch %d once, in order", i+2, r.Line[:8], i)
		}
	}
	if len(lines)-1 != failed+1 {
		t.Errorf("%d batches in the file, want %d", len(lines)-1, failed+1)
	}
}

// A record of 5 MiB, as an agent that kept lines whole wrote one, does not
// stop the collector from opening its directory: it is skipped.
func TestAHugeOldRecordDoesNotStopTheCollector(t *testing.T) {
	dir := t.TempDir()
	huge := record(t, Record{PodUID: "u0", Container: "c", Time: time.Now(), Line: strings.Repeat("h", 5<<20)})
	after := record(t, Record{PodUID: "u1", Container: "c", Time: time.Unix(7, 0), Line: "after"})
	if err := os.WriteFile(filepath.Join(dir, CurrentFile), append(huge, after...), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Dir: dir, Node: "node-a"}, nil, nil)
	if err != nil {
		t.Fatalf("the directory with a 5 MiB record: %v", err)
	}
	defer func() { _ = c.out.close() }()
	if p := c.written["u1_c"]; !p.Time.Equal(time.Unix(7, 0)) {
		t.Errorf("the record after the huge one was not read back: %+v", p)
	}
}
