package views

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/exp/teatest"
	"github.com/muesli/termenv"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube/streams"
	"github.com/sitecon/sitecon/ui"
)

// pipeSource stands in for the API server's log endpoint: each Open is a
// real byte stream (io.Pipe) whose writing end the test holds, as the API
// server holds the response body's; closing the context closes the
// reading end, as an HTTP body's is.
type pipeSource struct {
	target LogTarget
	err    error // Resolve fails with it

	mu    sync.Mutex
	opens []openCall
	// bodies hands the test the writing end of each stream opened.
	bodies chan *io.PipeWriter
}

type openCall struct {
	container string
	opts      LogOptions
}

func newPipeSource(target LogTarget) *pipeSource {
	return &pipeSource{target: target, bodies: make(chan *io.PipeWriter, 16)}
}

func (p *pipeSource) source() *LogSource {
	return &LogSource{
		Resolve: func(ctx context.Context, namespace, name string, app bool) (LogTarget, error) {
			return p.target, p.err
		},
		Open: func(ctx context.Context, namespace, pod, container string, opts LogOptions) (io.ReadCloser, error) {
			p.mu.Lock()
			p.opens = append(p.opens, openCall{container, opts})
			p.mu.Unlock()
			r, w := io.Pipe()
			go func() {
				<-ctx.Done()
				r.CloseWithError(ctx.Err())
			}()
			p.bodies <- w
			return r, nil
		},
	}
}

func (p *pipeSource) calls() []openCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]openCall(nil), p.opens...)
}

// body runs the loop until the next stream of p is opened, and returns its
// writing end.
func (l *loop) body(p *pipeSource) *io.PipeWriter {
	l.t.Helper()
	var w *io.PipeWriter
	l.until("a log stream to be opened", func() bool {
		select {
		case w = <-p.bodies:
			return true
		default:
			return false
		}
	})
	return w
}

// loop runs the App as bubbletea's loop does: each command in its own
// goroutine, its message back into Update; the test drives it with keys
// and waits on what the screen shows.
type loop struct {
	t    *testing.T
	a    *App
	msgs chan tea.Msg
}

func newLoop(t *testing.T, a *App) *loop {
	return &loop{t: t, a: a, msgs: make(chan tea.Msg, 64)}
}

func (l *loop) run(cmd tea.Cmd) {
	if cmd != nil {
		go func() { l.msgs <- cmd() }()
	}
}

func (l *loop) send(msg tea.Msg) {
	switch msg := msg.(type) {
	case nil:
	case tea.BatchMsg:
		for _, c := range msg {
			l.run(c)
		}
	default:
		_, cmd := l.a.Update(msg)
		l.run(cmd)
	}
}

func (l *loop) keys(keys ...string) {
	for _, k := range keys {
		var msg tea.KeyMsg
		switch k {
		case "esc":
			msg = tea.KeyMsg{Type: tea.KeyEsc}
		case "enter":
			msg = tea.KeyMsg{Type: tea.KeyEnter}
		case "up":
			msg = tea.KeyMsg{Type: tea.KeyUp}
		case "down":
			msg = tea.KeyMsg{Type: tea.KeyDown}
		case "pgup":
			msg = tea.KeyMsg{Type: tea.KeyPgUp}
		case "end":
			msg = tea.KeyMsg{Type: tea.KeyEnd}
		default:
			msg = tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
		}
		l.send(msg)
	}
}

// until runs the loop until cond holds, failing after a deadline.
func (l *loop) until(what string, cond func() bool) {
	l.t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case msg := <-l.msgs:
			l.send(msg)
		case <-time.After(5 * time.Millisecond):
			// What the condition waits on may come from elsewhere than a
			// message (a stream opened by the reading goroutine).
		case <-deadline:
			l.t.Fatalf("timed out waiting for %s; the screen:\n%s", what, l.a.View())
		}
	}
}

// screenHas waits until the screen shows every one of want.
func (l *loop) screenHas(want ...string) {
	l.t.Helper()
	l.until(fmt.Sprintf("%q on the screen", want), func() bool {
		v := ansi.Strip(l.a.View())
		for _, w := range want {
			if !strings.Contains(v, w) {
				return false
			}
		}
		return true
	})
}

var logT0 = time.Date(2026, 11, 26, 1, 2, 3, 0, time.UTC)

// writeLines writes lines numbered from..to-1 with the kubelet's
// timestamps, a millisecond apart.
func writeLines(t *testing.T, w io.Writer, from, to int, text func(i int) string) {
	t.Helper()
	var b strings.Builder
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "%s %s\n", logT0.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), text(i))
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		t.Fatal(err)
	}
}

func numbered(i int) string { return fmt.Sprintf("line %04d", i) }

// openAppLogs opens the logs of the container app plc-gateway (apps
// screen, third row) on a console of w x h fed by src, frames batched as
// fast as they come.
func openAppLogs(t *testing.T, ctx *ui.Context, src *pipeSource) *loop {
	t.Helper()
	a := NewApp(ctx)
	a.SetLogSource(t.Context(), src.source())
	a.logsFrame, a.logsRetry = 0, 10*time.Millisecond
	l := newLoop(t, a)
	l.send(FrameMsg(sampleFrame()))
	l.keys("5", "down", "down", "l")
	t.Cleanup(func() { a.closeLogs() })
	return l
}

func plcTarget(containers ...string) LogTarget {
	if len(containers) == 0 {
		containers = []string{"plc"}
	}
	return LogTarget{Namespace: "eve-kube-app", Pod: "plc-gateway-1", Containers: containers, Container: containers[0]}
}

// Following, the newest line is at the bottom; scrolling up pauses it:
// new lines no longer move what is shown, the status counts them below,
// and G (or End, or f) follows again.
func TestLogsFollowPausesOnScrollUp(t *testing.T) {
	src := newPipeSource(plcTarget())
	l := openAppLogs(t, testContext(80, 24), src)
	body := l.body(src)
	writeLines(t, body, 0, 100, numbered)
	l.screenHas("line 0099", "following", "100 lines")
	if c := src.calls()[0]; !c.opts.Follow || !c.opts.Timestamps || c.opts.TailLines != logsTail || c.container != "plc" {
		t.Errorf("first open %+v: want follow, timestamps, the last %d lines of container plc", c, logsTail)
	}
	v := l.a.View()
	if last := strings.Split(v, "\n"); !strings.Contains(last[len(last)-2], "line 0099") {
		t.Errorf("following, the newest line is not at the bottom:\n%s", v)
	}

	l.keys("up")
	paused := l.a.View()
	if strings.Contains(paused, "line 0099") || !strings.Contains(paused, "line 0098") || !strings.Contains(paused, "paused, 1 lines below") {
		t.Fatalf("up should pause one line up:\n%s", paused)
	}
	writeLines(t, body, 100, 110, numbered)
	l.screenHas("110 lines", "paused, 11 lines below")
	if got := l.a.View(); bodyOf(got) != bodyOf(paused) {
		t.Errorf("paused, new lines moved the view:\n%s\nwas:\n%s", got, paused)
	}
	l.keys("pgup")
	if v := l.a.View(); strings.Contains(v, "line 0098") || !strings.Contains(v, "line 0077") {
		t.Errorf("page up should go a screen up:\n%s", v)
	}
	for _, resume := range []string{"G", "end", "f"} {
		l.keys("up")
		l.keys(resume)
		if v := l.a.View(); !strings.Contains(v, "line 0109") || !strings.Contains(v, "following") {
			t.Errorf("%s should follow again:\n%s", resume, v)
		}
	}
	writeLines(t, body, 110, 111, numbered)
	l.screenHas("line 0110")
	l.keys("f")
	if v := l.a.View(); !strings.Contains(v, "paused, 0 lines below") || !strings.Contains(v, "line 0110") {
		t.Errorf("f should pause where it is:\n%s", v)
	}
	l.keys("g")
	if v := l.a.View(); !strings.Contains(v, "line 0000") {
		t.Errorf("g should go to the oldest line:\n%s", v)
	}
	l.keys("esc")
	if l.a.logs != nil || !strings.Contains(l.a.View(), "plc-gateway") {
		t.Errorf("esc should go back to the apps screen:\n%s", l.a.View())
	}
	if !streamClosed(body) {
		t.Error("the stream is still read after esc")
	}
}

// streamClosed reports whether the reading end of w is closed within a
// few seconds (closing follows the context's end, as an HTTP body's does).
func streamClosed(w io.Writer) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if _, err := io.WriteString(w, "after the end\n"); err != nil {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// bodyOf is a frame without its first two lines (header, with the clock)
// and the status line.
func bodyOf(v string) string {
	lines := strings.Split(v, "\n")
	return strings.Join(lines[3:], "\n")
}

// / keeps the lines that contain the text, in any case, marked; new lines
// are filtered as they come; /! keeps the others; esc in the filter line
// clears it.
func TestLogsFilterAndInverseFilter(t *testing.T) {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.ANSI)
	ctx := ui.NewContext(r, func() time.Time { return now }, nil)
	ctx.Width, ctx.Height = 80, 24
	src := newPipeSource(plcTarget())
	l := openAppLogs(t, ctx, src)
	body := l.body(src)
	text := func(i int) string {
		if i%3 == 0 {
			return fmt.Sprintf("ERROR disk %d full", i)
		}
		return fmt.Sprintf("info %d ok", i)
	}
	writeLines(t, body, 0, 30, text)
	l.screenHas("info 29 ok")
	l.keys("/", "e", "r", "r", "o", "r", "enter")
	v := ansi.Strip(l.a.View())
	if strings.Contains(v, "info") || !strings.Contains(v, "ERROR disk 27 full") || !strings.Contains(v, "10 of 30 lines") || !strings.Contains(v, "filter /error") {
		t.Fatalf("/error should keep the ERROR lines only:\n%s", v)
	}
	if marked := ctx.Styles.Match.Render("ERROR"); !strings.Contains(l.a.View(), marked+" disk 27") {
		t.Errorf("the match is not marked (%q):\n%q", marked, l.a.View())
	}
	writeLines(t, body, 30, 34, text)
	l.screenHas("ERROR disk 33 full", "12 of 34 lines")
	if v := ansi.Strip(l.a.View()); strings.Contains(v, "info 31") {
		t.Errorf("a new line the filter drops is shown:\n%s", v)
	}

	l.keys("/")
	for range len("error") {
		l.send(tea.KeyMsg{Type: tea.KeyBackspace})
	}
	l.keys("!", "e", "r", "r", "o", "r", "enter")
	v = ansi.Strip(l.a.View())
	if strings.Contains(v, "ERROR") || !strings.Contains(v, "info 32 ok") || !strings.Contains(v, "22 of 34 lines") || !strings.Contains(v, "filter /!error") {
		t.Fatalf("/!error should keep the other lines:\n%s", v)
	}
	if strings.Contains(l.a.View(), ctx.Styles.Match.Render("e")) {
		t.Errorf("an inverse filter marks nothing")
	}
	l.keys("/", "esc")
	if v := ansi.Strip(l.a.View()); !strings.Contains(v, "ERROR disk 33") || !strings.Contains(v, "info 32 ok") || strings.Contains(v, "filter /") {
		t.Errorf("esc in the filter line should clear it:\n%s", v)
	}
	// An applied filter: esc clears it first, as on the tables, and only
	// the next esc leaves the logs.
	l.keys("/", "e", "r", "r", "o", "r", "enter")
	l.screenHas("filter /error")
	l.keys("esc")
	if v := ansi.Strip(l.a.View()); l.a.logs == nil || strings.Contains(v, "filter /") || !strings.Contains(v, "info 32 ok") {
		t.Fatalf("esc with a filter applied should clear it and stay in the logs:\n%s", v)
	}
	l.keys("esc")
	if l.a.logs != nil {
		t.Errorf("a second esc should leave the logs:\n%s", ansi.Strip(l.a.View()))
	}
}

// Long lines are cut at the width, or wrapped with w; t puts the kubelet's
// timestamp in front of each line.
func TestLogsWrapAndTimestamps(t *testing.T) {
	src := newPipeSource(plcTarget())
	l := openAppLogs(t, testContext(80, 24), src)
	body := l.body(src)
	long := strings.Repeat("a", 80) + "TAIL-OF-THE-LINE"
	writeLines(t, body, 0, 1, func(int) string { return long })
	writeLines(t, body, 1, 2, numbered)
	// Wide characters take two cells: cut and wrapped by cells, not bytes.
	writeLines(t, body, 2, 3, func(int) string { return strings.Repeat("日", 50) + "END" })
	l.screenHas("line 0001", "日日")
	if v := l.a.View(); strings.Contains(v, "TAIL") || strings.Contains(v, "END") {
		t.Errorf("not wrapping, the line should be cut at 80 columns:\n%s", v)
	}
	l.keys("w")
	v := l.a.View()
	if row := lineOf(v, "TAIL-OF-THE-LINE"); row == "" || lineOf(v, "日日日日日日日日日日END") == "" || !strings.Contains(v, "wrap") {
		t.Errorf("w should wrap the long line onto the next row:\n%s", v)
	}
	l.keys("w", "t")
	v = l.a.View()
	if row := lineOf(v, "line 0001"); !strings.HasPrefix(row, "2026-11-26T01:02:03.001Z line 0001") || !strings.Contains(v, "timestamps") {
		t.Errorf("t should show the timestamps:\n%s", v)
	}
	l.keys("t")
	if row := lineOf(l.a.View(), "line 0001"); !strings.HasPrefix(row, "line 0001") {
		t.Errorf("t again should hide them: %q", row)
	}
	for _, keys := range [][]string{nil, {"w"}, {"t"}} {
		l.keys(keys...)
		for _, line := range strings.Split(l.a.View(), "\n") {
			if w := ansi.StringWidth(line); w > 80 {
				t.Errorf("a line %d wide at 80 columns: %q", w, line)
			}
		}
	}
}

// A VM app's log opens on its virt-launcher pod's guest console; c lists
// the pod's containers and shows the one picked, from its own tail, the
// old stream closed. A pod of one container offers no picker.
func TestLogsContainerPicker(t *testing.T) {
	launcher := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "eve-kube-app", Name: "virt-launcher-hmi-x2kq9", Labels: map[string]string{"kubevirt.io": "virt-launcher"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "compute"}, {Name: "guest-console-log"}}}}
	resolved, err := streams.LogTargetOf(launcher, "")
	if err != nil {
		t.Fatal(err)
	}
	target := LogTarget{Namespace: resolved.Namespace, Pod: resolved.Pod, Containers: resolved.Containers, Container: resolved.Container}
	src := newPipeSource(target)
	l := openAppLogs(t, testContext(80, 24), src)
	first := l.body(src)
	writeLines(t, first, 0, 3, func(i int) string { return fmt.Sprintf("console %d", i) })
	l.screenHas("console 2", "virt-launcher-hmi-x2kq9/guest-console-log")
	if c := src.calls()[0].container; c != "guest-console-log" {
		t.Errorf("a VM's log should open on guest-console-log, opened %q", c)
	}
	l.keys("c")
	v := l.a.View()
	if !strings.Contains(v, "Container of pod virt-launcher-hmi-x2kq9") || !strings.Contains(v, "compute") || !strings.Contains(v, "> guest-console-log") {
		t.Fatalf("c should list the containers, the cursor on the one shown:\n%s", v)
	}
	l.keys("up", "enter")
	second := l.body(src)
	if c := src.calls()[1]; c.container != "compute" || c.opts.TailLines != logsTail {
		t.Errorf("the picked container should be opened from its tail: %+v", c)
	}
	writeLines(t, second, 0, 2, func(i int) string { return fmt.Sprintf("virt-launcher %d", i) })
	l.screenHas("virt-launcher 1", "virt-launcher-hmi-x2kq9/compute")
	if v := l.a.View(); strings.Contains(v, "console 2") {
		t.Errorf("the other container's lines are still shown:\n%s", v)
	}
	if !streamClosed(first) {
		t.Error("the first container's stream is still read")
	}
	l.keys("c", "esc")
	if l.a.logs == nil || l.a.logs.picking {
		t.Error("esc in the picker should close the picker only")
	}

	one := newPipeSource(plcTarget())
	l = openAppLogs(t, testContext(80, 24), one)
	writeLines(t, l.body(one), 0, 1, numbered)
	l.screenHas("line 0000")
	l.keys("c")
	if l.a.logs.picking {
		t.Error("a pod of one container should offer no picker")
	}
}

// A stream that ends is said on the screen with its reason, and opened
// again from the last line's timestamp; the lines the new stream repeats
// (the API server reads the time to the second) are dropped, and a new
// line with the same timestamp as the last one seen is kept.
func TestLogsReconnectWithoutDoubles(t *testing.T) {
	src := newPipeSource(plcTarget())
	l := openAppLogs(t, testContext(80, 24), src)
	body := l.body(src)
	same := logT0.Add(time.Second)
	stamp := func(ts time.Time, text string) string { return ts.Format(time.RFC3339Nano) + " " + text + "\n" }
	_, _ = io.WriteString(body, stamp(logT0, "one")+stamp(logT0.Add(time.Millisecond), "two")+stamp(same, "three")+stamp(same, "four"))
	l.screenHas("four", "4 lines")
	body.CloseWithError(errors.New("connection reset by peer"))
	l.screenHas("DISCONNECTED: connection reset by peer; reconnecting in 10ms (try 1)")

	second := l.body(src)
	if c := src.calls()[1]; !c.opts.SinceTime.Equal(same) || c.opts.TailLines != 0 || !c.opts.Follow || !c.opts.Timestamps {
		t.Errorf("the reconnection should ask since the last line's time %s, not the tail: %+v", same, c.opts)
	}
	// What an API server answers for SinceTime read to the second.
	_, _ = io.WriteString(second, stamp(logT0, "one")+stamp(logT0.Add(time.Millisecond), "two")+stamp(same, "three")+stamp(same, "four")+
		stamp(same, "five, same time as four")+stamp(same.Add(time.Millisecond), "six"))
	l.screenHas("six", "following")
	var got []string
	for i := range l.a.logs.buf.Len() {
		got = append(got, l.a.logs.buf.Line(i).Text)
	}
	if want := "[one two three four five, same time as four six]"; fmt.Sprint(got) != want {
		t.Errorf("after the reconnection the lines are %q, want %s", got, want)
	}

	second.Close()
	l.screenHas("DISCONNECTED: the stream ended (EOF)")
	third := l.body(src)
	if c := src.calls()[2]; !c.opts.SinceTime.Equal(same.Add(time.Millisecond)) {
		t.Errorf("the next reconnection should start at six's time: %+v", c.opts)
	}
	_, _ = io.WriteString(third, stamp(same.Add(time.Millisecond), "six")+stamp(same.Add(2*time.Millisecond), "seven"))
	l.screenHas("seven", "7 lines")
}

// The pod not found is said, and nothing is streamed.
func TestLogsResolveProblem(t *testing.T) {
	src := newPipeSource(LogTarget{})
	src.err = errors.New(`pods "plc-gateway-1" not found`)
	l := openAppLogs(t, testContext(80, 24), src)
	l.screenHas(`pods "plc-gateway-1" not found`)
	if len(src.calls()) != 0 {
		t.Error("a stream was opened for a pod not found")
	}
}

// No cluster, no logs: l says so and the screen stays.
func TestLogsWithoutCluster(t *testing.T) {
	a := newTestApp(80, 24)
	press(a, "5", "l")
	if a.logs != nil || !strings.Contains(a.View(), "logs need a live cluster connection") {
		t.Errorf("l without a cluster:\n%s", a.View())
	}
}

// Escape sequences and other controls in a log line never reach the
// terminal (docs/DESIGN.md, "Nothing raw reaches the terminal"), nor does
// a byte that is not UTF-8.
func TestLogsLinesAreCleaned(t *testing.T) {
	src := newPipeSource(plcTarget())
	l := openAppLogs(t, testContext(80, 24), src)
	body := l.body(src)
	writeLines(t, body, 0, 1, func(int) string { return "evil\x1b]0;pwned\x07 title\x1b[2J clear\u009b31m red \xff end" })
	l.screenHas("end")
	v := l.a.View()
	raw := strings.IndexByte(v, 0x1b) >= 0 || strings.IndexByte(v, 0x07) >= 0 || strings.Contains(v, "\u009b")
	if raw || strings.Contains(v, "pwned") || !strings.Contains(v, "evil title clear red \ufffd end") {
		t.Errorf("a raw line reached the screen: %q", lineOf(v, "evil"))
	}
}

// The keys are in the help of the screens that have them: l on the apps
// screen and on a namespace's pods; the logs view's own keys in its help,
// c only for a pod of several containers. At 80x24 it all fits.
func TestLogsKeysInHelp(t *testing.T) {
	a := newTestApp(80, 24)
	press(a, "5", "?")
	if v := a.View(); !regexp.MustCompile(`l +logs of the selected app`).MatchString(v) {
		t.Errorf("the apps screen's help lacks l:\n%s", v)
	}
	press(a, "esc", "3", "?")
	if v := a.View(); strings.Contains(v, "logs of") {
		t.Errorf("the namespaces list offers logs:\n%s", v)
	}
	press(a, "esc", "enter", "?")
	if v := a.View(); !regexp.MustCompile(`l +logs of the selected pod`).MatchString(v) {
		t.Errorf("a namespace's pods' help lacks l:\n%s", v)
	}

	src := newPipeSource(plcTarget("plc", "sidecar"))
	l := openAppLogs(t, testContext(80, 24), src)
	writeLines(t, l.body(src), 0, 1, numbered)
	l.screenHas("line 0000")
	footer := func() string { lines := strings.Split(l.a.View(), "\n"); return lines[len(lines)-1] }
	if f := footer(); !strings.Contains(f, "esc back") || !strings.Contains(f, "f follow") {
		t.Errorf("the logs view's footer: %q", f)
	}
	l.keys("?")
	v := l.a.View()
	for _, want := range []string{"sitecon — logs", "f ", "follow", "t ", "timestamps", "w ", "wrap", "c ", "another container", "/ ", "/!text", "G ", "newest line, following", "esc"} {
		if !strings.Contains(v, want) {
			t.Errorf("the logs view's help lacks %q:\n%s", want, v)
		}
	}
	lines := strings.Split(v, "\n")
	if len(lines) > 24 {
		t.Errorf("the help has %d lines at 80x24", len(lines))
	}
	for _, line := range lines {
		if w := ansi.StringWidth(line); w > 80 {
			t.Errorf("a help line %d wide: %q", w, line)
		}
	}
	if strings.Contains(v, "cordon") || strings.Contains(v, "migrate") {
		t.Errorf("the logs view's help offers the screens' actions:\n%s", v)
	}
}

// The whole program (teatest): l on an app streams its log to the
// terminal, a dropped stream is said and reconnected, and the lines after
// it come once.
func TestLogsThroughProgram(t *testing.T) {
	src := newPipeSource(plcTarget())
	app := NewApp(testContext(0, 0))
	app.SetLogSource(t.Context(), src.source())
	// Long enough for a frame (50 ms) to show the disconnection.
	app.logsRetry = 300 * time.Millisecond
	tm := teatest.NewTestModel(t, app, teatest.WithInitialTermSize(80, 24))
	tm.Send(FrameMsg(sampleFrame()))
	for _, k := range []tea.KeyMsg{{Type: tea.KeyRunes, Runes: []rune("5")}, {Type: tea.KeyDown}, {Type: tea.KeyDown}, {Type: tea.KeyRunes, Runes: []rune("l")}} {
		tm.Send(k)
	}
	// wait reads the terminal's output until every one of want was in it
	// (what it read is consumed: the next wait reads what comes after).
	wait := func(want ...string) {
		t.Helper()
		teatest.WaitFor(t, tm.Output(), func(b []byte) bool {
			for _, w := range want {
				if !bytes.Contains(b, []byte(w)) {
					return false
				}
			}
			return true
		},
			teatest.WithDuration(10*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
	}
	var body *io.PipeWriter
	select {
	case body = <-src.bodies:
	case <-time.After(10 * time.Second):
		t.Fatal("no stream opened")
	}
	writeLines(t, body, 0, 10, numbered)
	wait("line 0009")
	body.CloseWithError(errors.New("http2: stream closed"))
	wait("DISCONNECTED: http2: stream closed")
	second := <-src.bodies
	writeLines(t, second, 5, 12, numbered)
	wait("line 0011", "reconnected ×1 (http2")
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
	final := tm.FinalModel(t, teatest.WithFinalTimeout(5*time.Second)).(*App)
	buf := final.logs.buf
	var got []string
	for i := range buf.Len() {
		got = append(got, buf.Line(i).Text)
	}
	if len(got) != 12 || got[11] != "line 0011" || got[5] != "line 0005" {
		t.Errorf("the lines after the reconnection: %q", got)
	}
	final.closeLogs()
}

// A line longer than the console keeps is cut at its bound and says how
// much of it went; the line after it comes whole.
func TestLogsLongLineIsCutAndSaysSo(t *testing.T) {
	src := newPipeSource(plcTarget())
	l := openAppLogs(t, testContext(80, 24), src)
	body := l.body(src)
	stamp := logT0.Format(time.RFC3339Nano) + " "
	_, _ = io.WriteString(body, stamp+strings.Repeat("x", 3*logsMaxLineBytes)+"\n"+logT0.Add(time.Millisecond).Format(time.RFC3339Nano)+" after\n")
	l.screenHas("after", "2 lines")
	first := l.a.logs.buf.Line(0).Text
	dropped := len(stamp) + 3*logsMaxLineBytes - logsMaxLineBytes
	if want := strings.Repeat("x", logsMaxLineBytes-len(stamp)) + streams.LogLineCut(int64(dropped)); first != want {
		t.Errorf("the long line is shown %d bytes long, ending %q; want it cut at the bound, saying %d bytes went", len(first), first[max(0, len(first)-50):], dropped)
	}
}
