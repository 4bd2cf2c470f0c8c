package ui

import (
	"regexp"
	"sort"
	"time"
)

// LogLine is one line of a container's log, already cleaned (Clean) and
// cut to a bounded length by whoever read it.
type LogLine struct {
	// Seq numbers the lines of one buffer in the order they came: a
	// position that stays put while older lines are dropped.
	Seq  uint64
	Time time.Time // the kubelet's timestamp; zero when the line had none
	Text string
}

// lineOverhead is what a stored line costs besides its text (the struct
// and the string header), counted against the byte cap.
const lineOverhead = 64

// LogBuffer is the lines of a log the console keeps: a ring with a cap on
// both the number of lines and their bytes, so following a chatty
// container for hours uses the memory of its last lines, not of the whole
// day (k9s users report 30 GB, derailed/k9s #1188). It also keeps the
// filtered view incrementally: a line is tested once, when it comes in,
// and a frame reads the matches without testing anything.
type LogBuffer struct {
	maxLines, maxBytes int
	ring               []LogLine
	head               int // index of the oldest line in ring
	n                  int
	bytes              int
	next               uint64 // Seq of the next line

	filter  string
	inverse bool
	re      *regexp.Regexp // nil: no filter
	// matches are the Seqs of the lines the filter keeps, oldest first,
	// from matchHead on (the front is dropped with the lines it names).
	matches   []uint64
	matchHead int
}

// NewLogBuffer keeps at most maxLines lines and maxBytes bytes of them.
func NewLogBuffer(maxLines, maxBytes int) *LogBuffer {
	return &LogBuffer{maxLines: max(maxLines, 1), maxBytes: max(maxBytes, 1)}
}

// Append adds lines (their Seq is set here), dropping the oldest past the
// caps.
func (b *LogBuffer) Append(lines ...LogLine) {
	for _, l := range lines {
		l.Seq = b.next
		b.next++
		for b.n > 0 && (b.n >= b.maxLines || b.bytes+len(l.Text)+lineOverhead > b.maxBytes) {
			b.dropOldest()
		}
		if b.n == len(b.ring) {
			b.grow()
		}
		b.ring[(b.head+b.n)%len(b.ring)] = l
		b.n++
		b.bytes += len(l.Text) + lineOverhead
		if b.re != nil && b.keeps(l.Text) {
			b.matches = append(b.matches, l.Seq)
		}
	}
}

// grow doubles the ring, up to the line cap: a short log costs a short
// slice.
func (b *LogBuffer) grow() {
	ring := make([]LogLine, min(max(2*len(b.ring), 64), b.maxLines))
	for i := range b.n {
		ring[i] = b.ring[(b.head+i)%len(b.ring)]
	}
	b.ring, b.head = ring, 0
}

func (b *LogBuffer) dropOldest() {
	old := &b.ring[b.head]
	b.bytes -= len(old.Text) + lineOverhead
	if b.re != nil && b.matchHead < len(b.matches) && b.matches[b.matchHead] == old.Seq {
		b.matchHead++
		if b.matchHead > 1024 && b.matchHead*2 > len(b.matches) {
			// Compact, so the match list is bounded by the ring too.
			b.matches = append(b.matches[:0], b.matches[b.matchHead:]...)
			b.matchHead = 0
		}
	}
	*old = LogLine{} // let its text go
	b.head = (b.head + 1) % len(b.ring)
	b.n--
}

// Reset drops every line (a new container, a new stream); the filter stays.
func (b *LogBuffer) Reset() {
	filter, inverse := b.filter, b.inverse
	*b = LogBuffer{maxLines: b.maxLines, maxBytes: b.maxBytes, next: b.next}
	b.SetFilter(filter, inverse)
}

// Total is the number of lines kept, filtered or not.
func (b *LogBuffer) Total() int { return b.n }

// Bytes is what the kept lines cost, as counted against the cap.
func (b *LogBuffer) Bytes() int { return b.bytes }

func (b *LogBuffer) keeps(text string) bool { return b.re.MatchString(text) != b.inverse }

// SetFilter keeps only the lines that contain pattern (case-insensitive
// text, not a regular expression: what a technician types is what is
// searched), or with inverse those that do not. "" shows every line. The
// lines kept are tested once, here; new lines are tested as they come.
func (b *LogBuffer) SetFilter(pattern string, inverse bool) {
	if pattern == "" {
		inverse = false
	}
	if pattern == b.filter && inverse == b.inverse && (pattern == "") == (b.re == nil) {
		return
	}
	b.filter, b.inverse = pattern, inverse
	b.matches, b.matchHead, b.re = nil, 0, nil
	if pattern == "" {
		return
	}
	b.re = regexp.MustCompile("(?i)" + regexp.QuoteMeta(pattern))
	for i := range b.n {
		if l := &b.ring[(b.head+i)%len(b.ring)]; b.keeps(l.Text) {
			b.matches = append(b.matches, l.Seq)
		}
	}
}

// Filter is the filter in effect and whether it is inverse.
func (b *LogBuffer) Filter() (string, bool) { return b.filter, b.inverse }

// Len is the number of lines the filter keeps.
func (b *LogBuffer) Len() int {
	if b.re == nil {
		return b.n
	}
	return len(b.matches) - b.matchHead
}

// Line is the i-th line the filter keeps, oldest first.
func (b *LogBuffer) Line(i int) *LogLine {
	if b.re == nil {
		return &b.ring[(b.head+i)%len(b.ring)]
	}
	first := b.ring[b.head].Seq
	return &b.ring[(b.head+int(b.matches[b.matchHead+i]-first))%len(b.ring)]
}

// Index is the position among the lines the filter keeps of the first one
// whose Seq is at least seq (Len when there is none).
func (b *LogBuffer) Index(seq uint64) int {
	return sort.Search(b.Len(), func(i int) bool { return b.Line(i).Seq >= seq })
}

// Highlights are the byte ranges of text the filter matched, to draw them
// marked; none for an inverse filter (the lines kept do not contain it).
func (b *LogBuffer) Highlights(text string) [][]int {
	if b.re == nil || b.inverse {
		return nil
	}
	return b.re.FindAllStringIndex(text, -1)
}
