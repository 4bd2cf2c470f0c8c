package applogs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/kube/streams"
)

// A chatty app's lines arrive one at a time. Each used to be written,
// synced and its position saved (synced, renamed) on its own: about 0.3 s
// of CPU per app and minute, and a flash write per line on the device. A
// stream's lines are now written once per flush interval, and every line
// still arrives, in order, with the position saved after the last.
func TestLinesArrivingOneByOneAreSyncedOncePerInterval(t *testing.T) {
	dir := t.TempDir()
	c, err := New(Options{Dir: dir, Node: "node-a"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.out.close() }()
	stream, feed := io.Pipe()
	tg := target{LogTarget: streams.LogTarget{App: "chatty", AppUUID: "u-1", Pod: "chatty-0", Container: "main"}, PodUID: "uid-1"}
	pos := Position{PodUID: tg.PodUID, Container: tg.Container}
	done := make(chan error, 1)
	go func() { done <- c.copyLines(context.Background(), stream, tg, &pos, time.Hour, nil) }()
	start := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	const lines = 50
	for i := range lines {
		if _, err := fmt.Fprintf(feed, "%s line %d\n", start.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), i); err != nil {
			t.Fatal(err)
		}
	}
	feed.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the copy did not end with its stream")
	}
	if c.out.syncs > 1 {
		t.Errorf("%d lines written one at a time were synced %d times, want once (the flush interval is an hour; the stream's end flushes)", lines, c.out.syncs)
	}
	data, err := os.ReadFile(filepath.Join(dir, CurrentFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(data), "\n"); got != lines || !strings.Contains(string(data), `"line":"line 49"`) {
		t.Errorf("%d records written, want %d; last: %q", got, lines, data[max(len(data)-120, 0):])
	}
	saved, ok, err := c.pos.load(tg.PodUID, tg.Container)
	if err != nil || !ok || !saved.Time.Equal(start.Add((lines-1)*time.Millisecond)) {
		t.Errorf("the saved position %+v (%v, %v), want the last line's time", saved, ok, err)
	}
}

// An app cannot grow the agent with its log: a line of 32 MiB is written
// cut to the bound, saying how much went, and the next line still comes;
// 64 MiB of binary with no newline at all is read in bounded memory and
// written not at all (the line never ended). Before, the collector read
// each line whole, twice over (the read and its JSON).
func TestAnEndlessLineDoesNotGrowTheCollector(t *testing.T) {
	dir := t.TempDir()
	c, err := New(Options{Dir: dir, Node: "node-a"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.out.close() }()
	tg := target{LogTarget: streams.LogTarget{App: "noisy", AppUUID: "u-2", Pod: "noisy-0", Container: "main"}, PodUID: "uid-2"}
	pos := Position{PodUID: tg.PodUID, Container: tg.Container}
	start := time.Date(2026, 12, 7, 3, 0, 0, 0, time.UTC)
	stamp := func(i int) string { return start.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano) + " " }
	const long = 32 << 20
	stream := io.MultiReader(strings.NewReader(stamp(0)), io.LimitReader(repeatByte('x'), long), strings.NewReader("\n"+stamp(1)+"after\n"+stamp(2)),
		io.LimitReader(repeatByte(0xfe), 64<<20))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := c.copyLines(context.Background(), stream, tg, &pos, time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("reading 96 MiB of two endless lines allocated %d MiB: the collector grows with a line", grew>>20)
	}
	data, err := os.ReadFile(filepath.Join(dir, CurrentFile))
	if err != nil {
		t.Fatal(err)
	}
	var got []Record
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r Record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("a record that is no JSON: %v", err)
		}
		got = append(got, r)
	}
	if len(got) != 2 || got[1].Line != "after" {
		t.Fatalf("%d records written, want the long line's and the next one's", len(got))
	}
	cut := len(stamp(0)) + streams.MaxLogLineBytes
	if want := strings.Repeat("x", streams.MaxLogLineBytes-len(stamp(0))) + streams.LogLineCut(long+int64(len(stamp(0)))-int64(streams.MaxLogLineBytes)); got[0].Line != want {
		t.Errorf("the long line was written %d bytes long (ends %q), want cut at %d with what was dropped", len(got[0].Line), got[0].Line[max(0, len(got[0].Line)-60):], cut)
	}
}

// repeatByte is an endless reader of one byte.
type repeatByte byte

func (b repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}
