package applogs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
