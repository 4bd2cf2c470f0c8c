package ui

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func logLines(texts ...string) []LogLine {
	out := make([]LogLine, len(texts))
	for i, t := range texts {
		out[i].Text = t
	}
	return out
}

func kept(b *LogBuffer) []string {
	var out []string
	for i := range b.Len() {
		out = append(out, b.Line(i).Text)
	}
	return out
}

// The buffer keeps the newest lines within both caps, whichever bites
// first, oldest first.
func TestLogBufferCaps(t *testing.T) {
	for _, tc := range []struct {
		name               string
		maxLines, maxBytes int
		texts              []string
		want               []string
	}{
		{"under the caps", 5, 1 << 20, []string{"a", "b", "c"}, []string{"a", "b", "c"}},
		{"line cap", 3, 1 << 20, []string{"a", "b", "c", "d", "e"}, []string{"c", "d", "e"}},
		// Each line costs its text and lineOverhead: 2 lines of 36 bytes
		// are 200 bytes, so a cap of 250 keeps 2.
		{"byte cap", 100, 250, []string{strings.Repeat("a", 36), strings.Repeat("b", 36), strings.Repeat("c", 36)},
			[]string{strings.Repeat("b", 36), strings.Repeat("c", 36)}},
		{"a line bigger than the byte cap is still kept alone", 100, 10, []string{"first", "second-long"}, []string{"second-long"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewLogBuffer(tc.maxLines, tc.maxBytes)
			b.Append(logLines(tc.texts...)...)
			if got := kept(b); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("kept %q, want %q", got, tc.want)
			}
		})
	}
}

// A long run through a small ring: the lines kept are always the newest,
// and the filtered view kept incrementally is exactly what filtering the
// kept lines from scratch gives, through evictions, filter changes and a
// reset.
func TestLogBufferFilterIsIncremental(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	b := NewLogBuffer(100, 100*lineOverhead+2000)
	var all []string
	check := func(step int) {
		t.Helper()
		// What the caps allow, newest last: recomputed from every line.
		var want []string
		bytes := 0
		for i := len(all) - 1; i >= 0 && len(want) < 100; i-- {
			if c := len(all[i]) + lineOverhead; bytes+c <= 100*lineOverhead+2000 || len(want) == 0 {
				bytes += c
				want = append([]string{all[i]}, want...)
				continue
			}
			break
		}
		if b.Total() != len(want) {
			t.Fatalf("step %d: %d lines kept, want %d", step, b.Total(), len(want))
		}
		pattern, inverse := b.Filter()
		var filtered []string
		for _, l := range want {
			if pattern == "" || strings.Contains(strings.ToLower(l), strings.ToLower(pattern)) != inverse {
				filtered = append(filtered, l)
			}
		}
		if got := kept(b); fmt.Sprint(got) != fmt.Sprint(filtered) {
			t.Fatalf("step %d, filter %q inverse %v:\n got %q\nwant %q", step, pattern, inverse, got, filtered)
		}
		for i := range b.Len() {
			if b.Index(b.Line(i).Seq) != i {
				t.Fatalf("step %d: Index(Seq of line %d) = %d", step, i, b.Index(b.Line(i).Seq))
			}
		}
	}
	words := []string{"ERROR disk", "info ok", "warn Error-ish", "debug", "error again"}
	for step := range 5000 {
		switch r := rng.IntN(100); {
		case r < 2:
			b.SetFilter([]string{"", "error", "ERR", "ok"}[rng.IntN(4)], rng.IntN(2) == 0)
		case r < 3:
			b.Reset()
			all = nil
		default:
			text := words[rng.IntN(len(words))] + strings.Repeat("x", rng.IntN(60))
			all = append(all, text)
			b.Append(LogLine{Text: text})
		}
		check(step)
	}
}

// The matches of a filter are marked in any case; an inverse filter's
// lines do not contain it, so nothing is marked.
func TestLogBufferHighlights(t *testing.T) {
	b := NewLogBuffer(10, 1<<20)
	b.SetFilter("err", false)
	if got := b.Highlights("ERR one, err two"); fmt.Sprint(got) != "[[0 3] [9 12]]" {
		t.Errorf("highlights %v", got)
	}
	b.SetFilter("a.b", false)
	if got := b.Highlights("axb a.b"); fmt.Sprint(got) != "[[4 7]]" {
		t.Errorf("the filter is text, not a regular expression: %v", got)
	}
	b.SetFilter("err", true)
	if got := b.Highlights("no match here"); got != nil {
		t.Errorf("inverse filter marks %v", got)
	}
}
