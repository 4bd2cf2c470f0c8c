package views

import (
	"bufio"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

// followLines opens the logs view on a console of 80x24 and feeds it n
// lines of text(i) through its stream as fast as it takes them, drawing a
// frame after each batch as the program does; it returns the app, how
// many frames were drawn and the time spent in Update and View.
func followLines(tb testing.TB, n int, text func(i int) string) (*App, int, time.Duration) {
	tb.Helper()
	src := newPipeSource(plcTarget())
	a := NewApp(testContext(80, 24))
	a.SetLogSource(tb.Context(), src.source())
	a.logsFrame = 0
	a.Update(FrameMsg(sampleFrame()))
	press(a, "5", "down", "down")
	_, cmd := a.Update(keyRunes("l"))
	resolved := runBatch(cmd)
	_, cmd = a.Update(resolved)
	var body *io.PipeWriter
	select {
	case body = <-src.bodies:
	case <-time.After(5 * time.Second):
		tb.Fatal("no stream opened")
	}
	go func() {
		// 60 s of a chatty container at 1,000 lines a second, written as
		// fast as the view reads them.
		w := bufio.NewWriterSize(body, 64<<10)
		for i := range n {
			fmt.Fprintf(w, "%s %s\n", logT0.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), text(i))
		}
		_ = w.Flush()
	}()
	want := text(n - 1)
	frames, spent := 0, time.Duration(0)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		msg := runBatch(cmd)
		start := time.Now()
		_, cmd = a.Update(msg)
		_ = a.View()
		spent += time.Since(start)
		frames++
		if l := a.logs; l.buf.Len() > 0 && l.buf.Line(l.buf.Len()-1).Text == want {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the view took %d frames and did not reach the last line", frames)
		}
	}
	return a, frames, spent
}

func keyRunes(s string) tea.KeyMsg { return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)} }

// runBatch runs cmd where the test stands for the program: the message of
// the one command in it that has one (the logs view has one at a time).
func runBatch(cmd tea.Cmd) tea.Msg {
	if cmd == nil {
		return nil
	}
	msg := cmd()
	if batch, ok := msg.(tea.BatchMsg); ok {
		for _, c := range batch {
			if m := runBatch(c); m != nil {
				return m
			}
		}
		return nil
	}
	return msg
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// A long follow costs the buffer's cap, not what came: 60,000 lines of a
// kilobyte (60 MB) through the view leave the lines kept within their
// caps and the heap grown by less than 16 MiB (derailed/k9s #1188: 30 GB).
func TestLogsFollowHeapIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("feeds 60 MB")
	}
	before := heapInUse()
	a, frames, _ := followLines(t, 60000, func(i int) string { return fmt.Sprintf("%06d %s", i, strings.Repeat("x", 1000)) })
	after := heapInUse()
	buf := a.logs.buf
	if buf.Total() > logsMaxLines || buf.Bytes() > logsMaxBytes {
		t.Errorf("the buffer holds %d lines, %d bytes: over its caps (%d, %d)", buf.Total(), buf.Bytes(), logsMaxLines, logsMaxBytes)
	}
	grown := int64(after) - int64(before)
	t.Logf("60,000 lines of 1 kB in %d frames: %d lines kept (%d bytes), heap in use grew %.1f MiB", frames, buf.Total(), buf.Bytes(), float64(grown)/(1<<20))
	if grown > 16<<20 {
		t.Errorf("the heap in use grew %.1f MiB following 60 MB of lines: the buffer is not bounded", float64(grown)/(1<<20))
	}
	runtime.KeepAlive(a)
}

// BenchmarkLogsFollow: the view following 60 s of a container writing
// 1,000 lines a second (60,000 lines of ~120 bytes), fed as fast as it
// takes them, a frame drawn after every batch. Reported: the cost per
// line and per frame (Update and View), the frames, and the heap in use
// after.
func BenchmarkLogsFollow(b *testing.B) {
	const n = 60000
	text := func(i int) string {
		return fmt.Sprintf("level=info msg=\"read register\" plc=press-line-a unit=%d addr=0x%04x value=%d seq=%06d", i%16, i%4096, i*7%1000, i)
	}
	for b.Loop() {
		before := heapInUse()
		start := time.Now()
		a, frames, spent := followLines(b, n, text)
		elapsed := time.Since(start)
		after := heapInUse()
		b.ReportMetric(float64(elapsed.Nanoseconds())/n, "ns/line")
		b.ReportMetric(float64(spent.Nanoseconds())/float64(frames), "ns/frame")
		b.ReportMetric(float64(frames), "frames")
		b.ReportMetric(float64(int64(after)-int64(before))/(1<<20), "heap-MiB")
		a.closeLogs()
	}
}
