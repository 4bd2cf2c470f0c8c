package views

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/sitecon/sitecon/ui"
)

// The logs view: `l` on an app or a pod shows its container's log over the
// screen it was opened from, following it. Scrolling up pauses the
// autoscroll (G, End or f resume it), / filters (/!text keeps the lines
// without text), t shows the timestamps, w wraps long lines, c picks
// another container, esc goes back.

// logRequest is what a screen asks the logs view to show.
type logRequest struct {
	namespace, name string
	// app: name is an app's object (a pod, or a VMI whose virt-launcher
	// pod is read); otherwise a pod.
	app   bool
	label string // "app hmi", "pod kube-system/coredns-x"
}

// logsResolvedMsg is the pod and containers a request came to.
type logsResolvedMsg struct {
	view   *logsView
	target LogTarget
	err    error
}

// logsAbout is the help's line for the view.
const logsAbout = "A container's log, followed. Scrolling up pauses it; G, End or f follow again. " +
	"/text keeps the lines with text (any case), /!text those without it."

// stampLayout draws a line's timestamp (the API's RFC 3339, to the
// millisecond, UTC): 24 cells.
const stampLayout = "2006-01-02T15:04:05.000Z"

type logsView struct {
	ctx     *ui.Context
	req     logRequest
	target  LogTarget
	problem string // why there is no log to show (the pod was not found)
	stream  *logStream
	buf     *ui.LogBuffer
	state   streamState
	dropped int
	// follow keeps the newest line at the bottom; paused, top is the Seq
	// of the first line shown.
	follow bool
	top    uint64
	wrap   bool
	stamps bool
	// picking: the container picker is open, its cursor on pick.
	picking bool
	pick    int
}

func newLogsView(ctx *ui.Context, req logRequest) *logsView {
	return &logsView{ctx: ctx, req: req, buf: ui.NewLogBuffer(logsMaxLines, logsMaxBytes), follow: true}
}

// SetLogSource lets the console show logs (l on an app or a pod), read
// through src with streams that end with ctx.
func (a *App) SetLogSource(ctx context.Context, src *LogSource) {
	a.logSource, a.logsCtx = src, ctx
}

// openLogs opens the logs view on req: the pod is resolved off the UI
// goroutine, then its log is streamed.
func (a *App) openLogs(req logRequest) tea.Cmd {
	if a.logSource == nil {
		a.message = "logs need a live cluster connection"
		return nil
	}
	a.closeLogs()
	v := newLogsView(a.ctx, req)
	a.logs = v
	src, ctx := a.logSource, a.logsCtx
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		t, err := src.Resolve(ctx, req.namespace, req.name, req.app)
		return logsResolvedMsg{view: v, target: t, err: err}
	}
}

func (a *App) closeLogs() {
	if a.logs != nil && a.logs.stream != nil {
		a.logs.stream.stop()
	}
	a.logs = nil
	if a.mode == modeFilter {
		a.mode = modeNormal
		a.input.Blur()
	}
}

// onLogsResolved starts the stream of the pod found.
func (a *App) onLogsResolved(msg logsResolvedMsg) tea.Cmd {
	if a.logs != msg.view {
		return nil // closed meanwhile
	}
	v := a.logs
	if msg.err != nil {
		v.problem = msg.err.Error()
		return nil
	}
	t := msg.target
	t.Namespace, t.Pod, t.Container = ui.Clean(t.Namespace), ui.Clean(t.Pod), ui.Clean(t.Container)
	for i, c := range t.Containers {
		t.Containers[i] = ui.Clean(c)
	}
	if len(t.Containers) == 0 {
		v.problem = "pod " + t.Namespace + "/" + t.Pod + " has no containers"
		return nil
	}
	v.target = t
	return a.streamLogs(t.Container)
}

// streamLogs (re)starts the view's stream on container, from the tail.
func (a *App) streamLogs(container string) tea.Cmd {
	v := a.logs
	if v.stream != nil {
		v.stream.stop()
	}
	v.target.Container = container
	v.buf.Reset()
	v.state, v.dropped, v.follow = streamState{}, 0, true
	s := newLogStream(a.logsCtx, a.logSource.Open, v.target.Namespace, v.target.Pod, container)
	s.frame, s.retryFirst = a.logsFrame, a.logsRetry
	v.stream = s
	s.start()
	return s.wait()
}

// onLogs takes a batch from the stream shown, and waits for the next.
func (a *App) onLogs(msg logsMsg) tea.Cmd {
	v := a.logs
	if v == nil || v.stream != msg.stream {
		return nil // a stream since stopped
	}
	v.buf.Append(msg.lines...)
	v.state = msg.state
	v.dropped += msg.dropped
	return msg.stream.wait()
}

// setLogsFilter reads what was typed after /: a leading ! inverts it.
func (v *logsView) setFilter(typed string) {
	pattern, inverse := strings.CutPrefix(typed, "!")
	v.buf.SetFilter(pattern, inverse)
}

func (v *logsView) filterText() string {
	p, inv := v.buf.Filter()
	if inv {
		return "!" + p
	}
	return p
}

func (v *logsView) title() string { return "logs (esc: back)" }

// what names the container shown, or what is being looked for.
func (v *logsView) what() string {
	if v.target.Pod == "" {
		return v.req.label
	}
	return v.target.Pod + "/" + v.target.Container
}

// rows is how many screen rows line l takes at width w.
func (v *logsView) rows(l *ui.LogLine, w int) int {
	if !v.wrap {
		return 1
	}
	n := ansi.StringWidth(l.Text)
	if v.stamps {
		n += len(stampLayout) + 1
	}
	return max((n+w-1)/w, 1)
}

// start is the index (among the filtered lines) of the first line drawn
// in h rows of width w, and whether the view is at the end (the last line
// at the bottom): when following, and when the lines from top on no
// longer fill the screen.
func (v *logsView) start(w, h int) (int, bool) {
	n := v.buf.Len()
	// The first line of the last screenful.
	last, used := n, 0
	for last > 0 && used < h {
		last--
		used += v.rows(v.buf.Line(last), w)
	}
	if v.follow {
		return last, true
	}
	i := v.buf.Index(v.top)
	if i >= last {
		return last, true
	}
	return i, false
}

// scroll moves the view by delta lines (negative: up), pausing it.
func (v *logsView) scroll(delta, w, h int) {
	if v.buf.Len() == 0 {
		return
	}
	i, atEnd := v.start(w, h)
	if delta > 0 && atEnd {
		return // at the end already; following stays as it is
	}
	i = min(max(i+delta, 0), v.buf.Len()-1)
	v.follow, v.top = false, v.buf.Line(i).Seq
}

func (v *logsView) home() {
	v.follow = false
	if v.buf.Len() > 0 {
		v.top = v.buf.Line(0).Seq
	}
}

// view draws the status line and the lines, h rows of width w.
func (v *logsView) view(w, h int) string {
	st := &v.ctx.Styles
	if v.picking {
		return v.pickerView(w, h)
	}
	out := make([]string, 0, h)
	if notice := v.notice(); notice != "" {
		// The stream is down: said on a line of its own, whole.
		out = append(out, st.Bad.Render(ansi.Truncate(notice, w, "…")))
	}
	body := max(h-len(out)-1, 1)
	out = append(out, ui.Fit(v.status(w, body), w))
	if v.problem != "" {
		return strings.Join(append(out, st.Bad.Render(ui.Clean(v.problem))), "\n")
	}
	i, atEnd := v.start(w, body)
	var rows []string
	for ; i < v.buf.Len(); i++ {
		rows = v.drawLine(rows, v.buf.Line(i), w)
		if !atEnd && len(rows) >= body {
			break
		}
	}
	if atEnd && len(rows) > body {
		rows = rows[len(rows)-body:] // the first line's end, the rest whole
	}
	if len(rows) > body {
		rows = rows[:body]
	}
	if v.buf.Len() == 0 {
		switch {
		case v.target.Pod == "":
			rows = append(rows, st.Muted.Render("finding the pod of "+v.req.label+"…"))
		case v.buf.Total() > 0:
			rows = append(rows, st.Muted.Render("no line matches the filter"))
		default:
			rows = append(rows, st.Muted.Render("no lines yet"))
		}
	}
	return strings.Join(append(out, rows...), "\n")
}

// belowCount is how many filtered lines come after what is drawn (paused).
func (v *logsView) below(w, h int) int {
	i, atEnd := v.start(w, h)
	if atEnd {
		return 0
	}
	used := 0
	for ; i < v.buf.Len() && used < h; i++ {
		used += v.rows(v.buf.Line(i), w)
	}
	return v.buf.Len() - i
}

// notice says why the stream is down and when it is tried again; "" while
// it is up.
func (v *logsView) notice() string {
	s := v.state
	if s.err == nil || v.problem != "" {
		return ""
	}
	return fmt.Sprintf("DISCONNECTED: %s; reconnecting in %s (try %d)", dropReason(s.err), s.retryIn, s.attempt)
}

func dropReason(err error) string {
	if errors.Is(err, io.EOF) {
		return "the stream ended (EOF)"
	}
	return ui.Clean(err.Error())
}

// status says what is shown, whether it follows, and how many lines.
func (v *logsView) status(w, h int) string {
	st := &v.ctx.Styles
	parts := []string{st.Section.Render(v.what())}
	switch s := v.state; {
	case v.target.Pod == "" || v.problem != "":
	case !s.connected && s.err == nil:
		parts = append(parts, st.Muted.Render("connecting…"))
	case v.follow:
		parts = append(parts, st.OK.Render("following"))
	default:
		parts = append(parts, st.Warn.Render(fmt.Sprintf("paused, %d lines below (G follows)", v.below(w, h))))
	}
	if p, _ := v.buf.Filter(); p != "" {
		parts = append(parts, fmt.Sprintf("%d of %d lines", v.buf.Len(), v.buf.Total()))
	} else {
		parts = append(parts, fmt.Sprintf("%d lines", v.buf.Total()))
	}
	var modes []string
	if v.wrap {
		modes = append(modes, "wrap")
	}
	if v.stamps {
		modes = append(modes, "timestamps")
	}
	if len(modes) > 0 {
		parts = append(parts, strings.Join(modes, " "))
	}
	if s := v.state; s.connected && s.drops > 0 {
		parts = append(parts, st.Warn.Render(fmt.Sprintf("reconnected ×%d (%s)", s.drops, dropReason(s.lastDrop))))
	}
	if v.dropped > 0 {
		parts = append(parts, st.Warn.Render(fmt.Sprintf("%d lines skipped (too fast to show)", v.dropped)))
	}
	return strings.Join(parts, st.Muted.Render(" · "))
}

// drawLine appends line l's rows (one unless wrapping), its filter's
// matches marked.
func (v *logsView) drawLine(rows []string, l *ui.LogLine, w int) []string {
	st := &v.ctx.Styles
	text := l.Text
	marks := v.buf.Highlights(text)
	prefix, prefixWidth := "", 0
	if v.stamps {
		stamp := strings.Repeat(" ", len(stampLayout))
		if !l.Time.IsZero() {
			stamp = l.Time.UTC().Format(stampLayout)
		}
		prefix, prefixWidth = st.Muted.Render(stamp)+" ", len(stampLayout)+1
	}
	var b strings.Builder
	b.WriteString(prefix)
	col, from, i := prefixWidth, 0, 0
	flush := func(to int) {
		// text[from:to] with the parts the filter matched marked.
		for from < to {
			for len(marks) > 0 && marks[0][1] <= from {
				marks = marks[1:]
			}
			if len(marks) == 0 || marks[0][0] >= to {
				b.WriteString(text[from:to])
				from = to
				break
			}
			if m := marks[0]; m[0] > from {
				b.WriteString(text[from:m[0]])
				from = m[0]
			}
			end := min(marks[0][1], to)
			b.WriteString(st.Match.Render(text[from:end]))
			from = end
		}
	}
	for i < len(text) {
		size, cw := 1, 1
		if text[i] >= 0x80 {
			_, size = utf8.DecodeRuneInString(text[i:])
			cw = ansi.StringWidth(text[i : i+size])
		}
		if col+cw > w {
			flush(i)
			rows = append(rows, b.String())
			if !v.wrap {
				return rows
			}
			b.Reset()
			col = 0
		}
		col += cw
		i += size
	}
	flush(len(text))
	return append(rows, b.String())
}

func (v *logsView) pickerView(w, h int) string {
	st := &v.ctx.Styles
	lines := []string{st.Section.Render("Container of pod " + v.target.Pod + " (enter: show, esc: cancel)")}
	for i, c := range v.target.Containers {
		line := "  " + c
		if c == v.target.Container {
			line += st.Muted.Render(" (shown)")
		}
		if i == v.pick {
			line = st.Selected.Render("> " + c)
		}
		lines = append(lines, line)
	}
	return ui.Clip(strings.Join(lines, "\n"), w, h)
}

// logsKeys are the logs view's keys: what App.bindings gives while it is
// open, for the dispatch, the help and the footer alike.
func (a *App) logsKeys() []binding {
	k := a.ctx.Keys
	v := func() *logsView { return a.logs }
	do := func(f func(v *logsView)) func(tea.KeyMsg) tea.Cmd {
		return func(tea.KeyMsg) tea.Cmd { f(a.logs); return nil }
	}
	picking := func() bool { return v() != nil && v().picking }
	reading := func() bool { return v() != nil && !v().picking }
	size := func() (int, int) { return a.ctx.Width, max(a.bodyHeight()-1, 1) }
	move := func(delta func(h int) int) func(tea.KeyMsg) tea.Cmd {
		return do(func(v *logsView) {
			w, h := size()
			if v.picking {
				v.pick = min(max(v.pick+max(min(delta(h), 1), -1), 0), len(v.target.Containers)-1)
				return
			}
			v.scroll(delta(h), w, h)
		})
	}
	return []binding{
		{key: k.ForceQuit, long: "quit from anywhere", section: sectionEverywhere, run: func(tea.KeyMsg) tea.Cmd { return tea.Quit }},
		{key: k.Quit, long: "quit", section: sectionEverywhere, footer: footerQuit, run: func(tea.KeyMsg) tea.Cmd { return tea.Quit }},
		{key: k.Help, long: "this help", section: sectionEverywhere, footer: footerHelp, run: do(func(*logsView) { a.full = true })},
		{key: k.Enter, long: "show the container", section: sectionScreen, footer: footerScreen, applies: picking,
			run: func(tea.KeyMsg) tea.Cmd {
				a.logs.picking = false
				return a.streamLogs(a.logs.target.Containers[a.logs.pick])
			}},
		{key: key.NewBinding(key.WithKeys(k.Back.Keys()...), key.WithHelp(k.Back.Help().Key, "cancel")), long: "close the container list",
			section: sectionScreen, applies: picking, run: do(func(v *logsView) { v.picking = false })},
		// esc clears an applied filter before it leaves, as on the tables.
		{key: key.NewBinding(key.WithKeys(k.Back.Keys()...), key.WithHelp(k.Back.Help().Key, "clear filter")), long: "clear the filter",
			section: sectionScreen, footer: footerScreen, applies: func() bool { return reading() && v().filterText() != "" },
			run: do(func(v *logsView) { v.setFilter("") })},
		{key: k.Back, long: "back to the screen the logs were opened from", section: sectionScreen, footer: footerScreen,
			run: do(func(*logsView) { a.closeLogs() })},
		{key: k.Filter, long: "filter: /text keeps the lines with text, /!text those without", section: sectionScreen, footer: footerFilter, applies: reading,
			run: func(tea.KeyMsg) tea.Cmd {
				a.mode = modeFilter
				a.input.SetValue(a.logs.filterText())
				return a.input.Focus()
			}},
		{key: k.Follow, long: "follow the newest lines (again), or pause", section: sectionScreen, footer: footerScreen, applies: reading,
			run: do(func(v *logsView) {
				if v.follow {
					w, h := size()
					v.scroll(0, w, h)
				} else {
					v.follow = true
				}
			})},
		{key: k.Timestamps, long: "show or hide the timestamps", section: sectionScreen, footer: footerScreen, applies: reading,
			run: do(func(v *logsView) { v.stamps = !v.stamps })},
		{key: k.Wrap, long: "wrap long lines, or cut them", section: sectionScreen, footer: footerScreen, applies: reading,
			run: do(func(v *logsView) { v.wrap = !v.wrap })},
		{key: k.Container, long: "show another container of the pod", section: sectionScreen, footer: footerScreen,
			applies: func() bool { return reading() && len(v().target.Containers) > 1 },
			run: do(func(v *logsView) {
				v.picking, v.pick = true, 0
				for i, c := range v.target.Containers {
					if c == v.target.Container {
						v.pick = i
					}
				}
			})},
		{key: k.Up, long: "up (pauses)", section: sectionMove, run: move(func(int) int { return -1 })},
		{key: k.Down, long: "down", section: sectionMove, run: move(func(int) int { return 1 })},
		{key: k.PageUp, long: "page up (pauses)", section: sectionMove, run: move(func(h int) int { return -h })},
		{key: k.PageDown, long: "page down", section: sectionMove, run: move(func(h int) int { return h })},
		{key: k.Top, long: "oldest line kept (pauses)", section: sectionMove, applies: reading, run: do(func(v *logsView) { v.home() })},
		{key: k.Bottom, long: "newest line, following", section: sectionMove, applies: reading, run: do(func(v *logsView) { v.follow = true })},
	}
}
