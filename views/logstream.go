package views

import (
	"bytes"
	"context"
	"io"
	"sync"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/kube/streams"
	"github.com/sitecon/sitecon/ui"
)

// The logs view's reading side: a goroutine that opens the container's log,
// reads it line by line, cleans each line, and hands the lines to the model
// in batches (one message per frame at most, however fast they come). When
// the stream ends (EOF, an error) it says so and opens it again with
// backoff, from the last line it delivered, dropping what it already had.

const (
	// logsTail is how much of the log the view starts with.
	logsTail = 500
	// logsMaxLines and logsMaxBytes bound the lines kept (ui.LogBuffer):
	// what a long follow costs is these, not the hours it ran.
	logsMaxLines = 10000
	logsMaxBytes = 4 << 20
	// logsMaxLineBytes cuts a single line: one megabyte of JSON on one line
	// is kept as its start.
	logsMaxLineBytes = 8 << 10
	// logsFrame spaces the batches: at most this many a second reach the
	// model, so a flood of lines costs frames at the terminal's pace.
	logsFrame = 50 * time.Millisecond
	// Reconnection backoff: doubles from the first to the last.
	logsRetryFirst = time.Second
	logsRetryMax   = 30 * time.Second
)

// streamState is what the view says about its stream.
type streamState struct {
	connected bool
	// err is why the stream ended (io.EOF when it simply ended); retryIn is
	// when it is opened again, attempt how many tries it has been.
	err     error
	retryIn time.Duration
	attempt int
	// drops counts the stream's ends and failed opens so far, lastDrop is
	// the latest one's reason: a drop healed within a frame is still said.
	drops    int
	lastDrop error
}

// logStream reads one container's log for the view.
type logStream struct {
	open      LogOpener
	namespace string
	pod       string
	container string
	frame     time.Duration
	// retryFirst is the first backoff (tests shorten it).
	retryFirst time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	notify chan struct{}

	mu      sync.Mutex
	pending []ui.LogLine
	state   streamState
	// dropped counts lines that came faster than the view took them and
	// were dropped before it did (it would have dropped them anyway: more
	// than its cap came in one frame).
	dropped int

	drops    int
	lastDrop error

	// Resume point, touched only by the reading goroutine: the timestamp of
	// the last line delivered and how many lines carried exactly that one.
	last   time.Time
	atLast int
}

// logsMsg carries a batch of lines, and the stream's state, to the model.
type logsMsg struct {
	stream  *logStream
	lines   []ui.LogLine
	state   streamState
	dropped int
}

func newLogStream(parent context.Context, open LogOpener, namespace, pod, container string) *logStream {
	ctx, cancel := context.WithCancel(parent)
	return &logStream{open: open, namespace: namespace, pod: pod, container: container, frame: logsFrame, retryFirst: logsRetryFirst,
		ctx: ctx, cancel: cancel, notify: make(chan struct{}, 1)}
}

// start reads until stop.
func (s *logStream) start() { go s.run() }

func (s *logStream) stop() { s.cancel() }

func (s *logStream) run() {
	backoff := s.retryFirst
	for attempt := 1; s.ctx.Err() == nil; attempt++ {
		opts := LogOptions{Follow: true, Timestamps: true}
		if s.last.IsZero() {
			opts.TailLines = logsTail
		} else {
			// Timestamps are asked for always (shown or not) so that a
			// reconnection starts where the last one stopped.
			opts.SinceTime = s.last
		}
		body, err := s.open(s.ctx, s.namespace, s.pod, s.container, opts)
		if err == nil {
			s.setState(streamState{connected: true, drops: s.drops, lastDrop: s.lastDrop})
			var delivered int
			delivered, err = s.read(body)
			body.Close()
			if err == nil {
				err = io.EOF
			}
			if delivered > 0 {
				// It worked for a while: the next try comes soon again.
				backoff, attempt = s.retryFirst, 1
			}
		}
		if s.ctx.Err() != nil {
			return
		}
		s.drops, s.lastDrop = s.drops+1, err
		s.setState(streamState{err: err, retryIn: backoff, attempt: attempt, drops: s.drops, lastDrop: err})
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, logsRetryMax)
	}
}

// read delivers body's lines until it ends, dropping those a previous
// stream delivered already; it returns how many it delivered.
func (s *logStream) read(body io.Reader) (int, error) {
	r := streams.NewLogLineReader(body, logsMaxLineBytes)
	resuming := !s.last.IsZero()
	skipAtLast := s.atLast
	delivered := 0
	for {
		l, err := r.Next()
		if len(l.Text) == 0 && l.Dropped == 0 && !l.Complete {
			return delivered, err
		}
		raw := l.Text
		ts, text := splitTimestamp(bytes.TrimRight(raw, "\r\n"))
		if resuming && !ts.IsZero() {
			switch {
			case ts.Before(s.last):
				continue
			case ts.Equal(s.last) && skipAtLast > 0:
				skipAtLast--
				continue
			}
			resuming = false
		}
		shown := string(text)
		if l.Dropped > 0 {
			// Cut at the bound, saying how much went.
			shown += streams.LogLineCut(l.Dropped)
		}
		line := ui.LogLine{Time: ts, Text: ui.Clean(shown)}
		if !ts.IsZero() {
			if ts.Equal(s.last) {
				s.atLast++
			} else {
				s.last, s.atLast = ts, 1
			}
		}
		s.deliver(line)
		delivered++
		if err != nil {
			return delivered, err
		}
	}
}

// splitTimestamp takes the kubelet's RFC 3339 timestamp off the front of a
// line read with timestamps on.
func splitTimestamp(line []byte) (time.Time, []byte) {
	sp := bytes.IndexByte(line, ' ')
	if sp < 20 || sp > 40 {
		return time.Time{}, line
	}
	ts, err := time.Parse(time.RFC3339Nano, string(line[:sp]))
	if err != nil {
		return time.Time{}, line
	}
	return ts, line[sp+1:]
}

func (s *logStream) deliver(l ui.LogLine) {
	s.mu.Lock()
	if len(s.pending) >= logsMaxLines {
		// The view is behind by more than it keeps: the oldest would be
		// dropped there anyway.
		s.pending = append(s.pending[:0], s.pending[len(s.pending)/2:]...)
		s.dropped += logsMaxLines - len(s.pending)
	}
	s.pending = append(s.pending, l)
	s.mu.Unlock()
	s.poke()
}

func (s *logStream) setState(st streamState) {
	s.mu.Lock()
	s.state = st
	s.mu.Unlock()
	s.poke()
}

func (s *logStream) poke() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// wait is the command that brings the next batch to the model: it returns
// when there are lines or news, no sooner than a frame after the last one.
func (s *logStream) wait() tea.Cmd {
	return func() tea.Msg {
		select {
		case <-s.ctx.Done():
			return nil
		case <-s.notify:
		}
		if s.frame > 0 {
			// Let a frame's worth of lines gather: one message for them all.
			select {
			case <-s.ctx.Done():
				return nil
			case <-time.After(s.frame):
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		msg := logsMsg{stream: s, lines: s.pending, state: s.state, dropped: s.dropped}
		s.pending, s.dropped = nil, 0
		return msg
	}
}
