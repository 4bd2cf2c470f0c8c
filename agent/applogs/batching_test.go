package applogs

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/kube"
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
	tg := target{LogTarget: kube.LogTarget{App: "chatty", AppUUID: "u-1", Pod: "chatty-0", Container: "main"}, PodUID: "uid-1"}
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
