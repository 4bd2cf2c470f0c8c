package applogs

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/kube/streams"
)

// BenchmarkNoisyAppLogRSS: an app that prints an endless line, then
// binary, at 10 MB/s (half the time each; 60 s in all unless
// SITECON_NOISY_SECONDS says otherwise) must leave the collector's own
// memory (RssAnon) within 10 MiB of its idle figure: the collector reads
// each line bounded (streams.MaxLogLineBytes). The peer is the reader it
// replaced, bufio.Reader.ReadString, which holds a whole line: it is run
// over the first seconds of the same stream only, and stopped at 256 MiB.
// Run with -benchtime=1x: each iteration is the whole stream.
func BenchmarkNoisyAppLogRSS(b *testing.B) {
	seconds := 60
	if s, err := strconv.Atoi(os.Getenv("SITECON_NOISY_SECONDS")); err == nil && s > 0 {
		seconds = s
	}
	const rate = 10 << 20 // bytes a second
	for range b.N {
		c, err := New(Options{Dir: b.TempDir(), Node: "node-a"}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		tg := target{LogTarget: streams.LogTarget{App: "noisy", AppUUID: "u-n", Pod: "noisy-0", Container: "main"}, PodUID: "uid-n"}
		pos := Position{PodUID: tg.PodUID, Container: tg.Container}
		idle := rssAnonMiB(b)
		peak := newPeak(b)
		stream := pacedNoisyLog(time.Duration(seconds)*time.Second, rate)
		if err := c.copyLines(context.Background(), stream, tg, &pos, time.Hour, nil); err != nil {
			b.Fatal(err)
		}
		grew := peak.stop() - idle
		_ = c.out.close()
		b.ReportMetric(grew, "MiB-rss-growth")
		b.ReportMetric(float64(seconds), "s-of-noise")
		if grew > 10 {
			b.Errorf("the collector's RssAnon grew %.1f MiB over %d s of an endless line and binary at 10 MB/s (idle %.1f MiB), over the 10 MiB allowed", grew, seconds, idle)
		}
		// The peer: an unbounded line reader over the same stream's start.
		idle = rssAnonMiB(b)
		peak = newPeak(b)
		r := bufio.NewReader(io.LimitReader(pacedNoisyLog(time.Duration(seconds)*time.Second, rate), 256<<20))
		_, _ = r.ReadString('\n')
		b.ReportMetric(peak.stop()-idle, "MiB-rss-growth-ReadString")
	}
}

// pacedNoisyLog is a container's log at rate bytes a second for d: a
// timestamp, then one endless line for half of it, then binary (random
// bytes, newlines among them).
func pacedNoisyLog(d time.Duration, rate int) io.Reader {
	start := time.Now()
	stamp := start.UTC().Format(time.RFC3339Nano) + " "
	rng := rand.New(rand.NewChaCha8([32]byte{7}))
	sent := 0
	return io.MultiReader(strings.NewReader(stamp), readerFunc(func(p []byte) (int, error) {
		elapsed := time.Since(start)
		if elapsed >= d {
			return 0, io.EOF
		}
		// Paced: no more than rate allows by now (a benchmark's load, not
		// a wait for a condition).
		if due := int(elapsed.Seconds() * float64(rate)); sent >= due {
			time.Sleep(10 * time.Millisecond)
			return 0, nil
		}
		n := min(len(p), 64<<10)
		if elapsed < d/2 {
			for i := range p[:n] {
				p[i] = 'x'
			}
		} else {
			for i := range p[:n] {
				p[i] = byte(rng.Uint32())
			}
		}
		sent += n
		return n, nil
	}))
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// rssAnonMiB is this process's own memory (RssAnon), in MiB.
func rssAnonMiB(tb testing.TB) float64 {
	mib, err := readRSSAnon()
	if err != nil {
		tb.Fatal(err)
	}
	return mib
}

func readRSSAnon() (float64, error) {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, "RssAnon:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, errors.New("no RssAnon in /proc/self/status")
}

// peak samples RssAnon every 100 ms until stopped, and keeps the highest.
type peak struct {
	done chan struct{}
	max  chan float64
}

func newPeak(tb testing.TB) *peak {
	p := &peak{done: make(chan struct{}), max: make(chan float64)}
	highest := rssAnonMiB(tb)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			now, _ := readRSSAnon() // a failed read (none seen in practice) counts as no peak
			highest = max(highest, now)
			select {
			case <-p.done:
				p.max <- highest
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *peak) stop() float64 {
	close(p.done)
	return <-p.max
}
