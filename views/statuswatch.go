package views

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

// WatchTerminal is what `sitecon status --watch` draws on: where it
// writes, the terminal's size (each frame fits it, as watch(1)'s do: a
// line longer than the width is cut, not wrapped, and lines below the
// height are left out and counted, so the summary at the top never
// scrolls away), and the keys typed (q quits). Size nil or not ok: the
// output is not a terminal, and frames are written whole. Keys nil: only
// Ctrl-C (the context) ends it.
type WatchTerminal struct {
	Out  io.Writer
	Size func() (width, height int, ok bool)
	Keys io.Reader
}

// WatchStatus is `sitecon status --watch`: the status redrawn on every
// change of the snapshot, at most twice a second, and once a second so
// ages stay current. It keeps going when the API server goes away,
// showing the last data and how stale it is, and ends on q or when ctx
// ends.
func WatchStatus(ctx context.Context, term WatchTerminal, snap *kube.Snapshot, readAgent AgentSource, format Format) error {
	ctx, quit := context.WithCancel(ctx)
	defer quit()
	if term.Keys != nil {
		// The read may outlive the watch (a terminal read does not end
		// with it); the process ends right after.
		go func() {
			buf := make([]byte, 64)
			for {
				n, err := term.Keys.Read(buf)
				if bytes.ContainsAny(buf[:n], "qQ") {
					quit()
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	const minInterval = 500 * time.Millisecond
	var last time.Time
	shownSynced := false
	for {
		// The cluster just read is what "waiting for the API server"
		// waited for: drawn at once.
		if !waitGap(ctx, minInterval-time.Since(last), changes, func() bool { return snap.Synced() != shownSynced }) {
			return nil
		}
		last = time.Now()
		var body bytes.Buffer
		shownSynced = snap.Synced()
		if !shownSynced {
			h := snap.Health()
			// An API error quotes what the server (or a proxy) said.
			fmt.Fprintf(&body, "waiting for the API server: %s\n", ui.Clean(cmp.Or(h.LastError, "connecting")))
		} else if err := WriteStatus(&body, NewStatusReport(snap.Status(), readAgent(ctx), last), last, format); err != nil {
			return err
		}
		w, h, sized := 0, 0, false
		if term.Size != nil {
			w, h, sized = term.Size()
		}
		if _, err := term.Out.Write(watchFrame(body.String(), last, w, h, sized)); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-tick.C:
		}
	}
}

// watchFrame is one full redraw: home and clear, the header, and body;
// sized, it fits width × height, the lines left out counted on the last
// line.
func watchFrame(body string, now time.Time, width, height int, sized bool) []byte {
	var buf bytes.Buffer
	buf.WriteString("\x1b[H\x1b[2J") // home and clear: a full redraw, like watch(1)
	header := fmt.Sprintf("sitecon status %s · q or Ctrl-C to quit", now.Format("15:04:05"))
	lines := append([]string{header, ""}, strings.Split(strings.TrimRight(body, "\n"), "\n")...)
	if sized && width > 0 && height > 0 {
		if len(lines) > height {
			cut := len(lines) - (height - 1)
			lines = append(lines[:height-1], fmt.Sprintf("… %d more lines (a taller terminal, or sitecon status, shows them)", cut))
		}
		for i, l := range lines {
			if ansi.StringWidth(l) > width {
				lines[i] = ansi.Truncate(l, width, "")
			}
		}
	}
	for i, l := range lines {
		buf.WriteString(l)
		if i < len(lines)-1 || !sized {
			// No newline after a sized frame's last line: it would scroll
			// a full terminal by one.
			buf.WriteByte('\n')
		}
	}
	return buf.Bytes()
}
