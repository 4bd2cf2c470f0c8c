package views

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

// WatchStatus is `sitecon status --watch`: the status redrawn on every
// change of the snapshot, at most twice a second, and once a second so
// ages stay current. It keeps going when the API server goes away,
// showing the last data and how stale it is.
func WatchStatus(ctx context.Context, out io.Writer, snap *kube.Snapshot, readAgent AgentSource, format Format) error {
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	const minInterval = 500 * time.Millisecond
	var last time.Time
	for {
		if wait := minInterval - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		last = time.Now()
		var buf bytes.Buffer
		buf.WriteString("\x1b[H\x1b[2J") // home and clear: a full redraw, like watch(1)
		fmt.Fprintf(&buf, "sitecon status, %s   (Ctrl-C to quit)\n\n", last.Format("15:04:05"))
		if !snap.Synced() {
			h := snap.Health()
			// An API error quotes what the server (or a proxy) said.
			fmt.Fprintf(&buf, "waiting for the API server: %s\n", ui.Clean(cmp.Or(h.LastError, "connecting")))
		} else if err := WriteStatus(&buf, StatusReport{ClusterStatus: snap.Status(), Agent: readAgent(ctx)}, last, format); err != nil {
			return err
		}
		if _, err := out.Write(buf.Bytes()); err != nil {
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
