package views

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

// replicaMark keeps the replicas column readable at 80 columns:
// node-a✓ healthy, node-b✗ failed, node-c↻ rebuilding, node-d■ stopped.
func replicaMark(s string) string {
	switch s {
	case kube.ReplicaHealthy:
		return "✓"
	case kube.ReplicaRebuilding:
		return "↻"
	case kube.ReplicaFailed:
		return "✗"
	}
	return "■"
}

// replicaFormat writes a volume's replicas on one line: each replica's
// node and state, a rebuild's progress, and how many are missing when
// there are too few. The screen and `sitecon status` differ only in these.
type replicaFormat struct {
	state    func(string) string // after the node: "✓", ":healthy"
	progress string              // after a rebuilding state: "%d%%"
	missing  string              // too few: " (%d/%d)", have and want
	// problemsFirst lists failed, then rebuilding, then stopped replicas
	// before the healthy ones: a column cut at 80 cells must not hide the
	// replica in trouble.
	problemsFirst bool
}

var (
	// node-a✓ node-b↻42% (2/3)
	replicasOnScreen = replicaFormat{state: replicaMark, progress: "%d%%", missing: " (%d/%d)", problemsFirst: true}
	// node-a:healthy node-b:rebuilding(42%) (2 of 3)
	replicasInStatus = replicaFormat{state: func(s string) string { return ":" + s }, progress: "(%d%%)", missing: " (%d of %d)"}
)

// replicaTrouble orders replicas for problemsFirst: the lower, the sooner.
func replicaTrouble(state string) int {
	switch state {
	case kube.ReplicaFailed:
		return 0
	case kube.ReplicaRebuilding:
		return 1
	case kube.ReplicaHealthy:
		return 3
	}
	return 2
}

func (f replicaFormat) list(v kube.VolumeStatus) string {
	var b strings.Builder
	replicas := v.Replicas
	if f.problemsFirst {
		replicas = slices.Clone(replicas)
		slices.SortStableFunc(replicas, func(x, y kube.ReplicaStatus) int {
			return cmp.Compare(replicaTrouble(x.State), replicaTrouble(y.State))
		})
	}
	for i, r := range replicas {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(r.Node)
		b.WriteString(f.state(r.State))
		if r.State == kube.ReplicaRebuilding && r.Progress >= 0 {
			fmt.Fprintf(&b, f.progress, r.Progress)
		}
	}
	if len(v.Replicas) < v.WantReplicas {
		fmt.Fprintf(&b, f.missing, len(v.Replicas), v.WantReplicas)
	}
	return b.String()
}

// robustnessCell colours a volume's robustness and how long it has held:
// degraded for a minute is a warning, for an hour or more an alarm.
// From a stale cache it is the last robustness seen ("healthy?"), never
// green.
func robustnessCells(ctx *ui.Context, f *Frame, v kube.VolumeStatus, now time.Time) (ui.Cell, ui.Cell) {
	st := &ctx.Styles
	since := ui.Cell{Text: Age(v.Since, now, v.SinceExact), Key: durationKey(v.Since, now)}
	text := stateText(f, v.Robustness)
	switch v.Robustness {
	case kube.RobustnessHealthy:
		return styled(text, okStyle(ctx, f)), since
	case kube.RobustnessDegraded:
		sev := &st.Warn
		if now.Sub(v.Since) >= time.Hour {
			sev = &st.Bad
		}
		since.Style = sev
		return styled(text, sev), since
	case kube.RobustnessFaulted:
		since.Style = &st.Bad
		return styled(text, &st.Bad), since
	}
	return styled(text, &st.Muted), since
}

func newVolumes(ctx *ui.Context) screen {
	// At 80 columns (the device's console) a row keeps the volume's name,
	// its robustness and every replica whole (three on named nodes); used
	// space, size, state, since and the attached node give way in that
	// order, and the cursor row shows them under the table.
	cols := []ui.Column{{Title: "NAME", Width: 16}, {Title: "STATE", Width: 9, Drop: 3}, {Title: "ROBUSTNESS", Width: 10},
		{Title: "SINCE", Width: 5, Drop: 4}, {Title: "SIZE", Width: 5, Drop: 2}, {Title: "USED", Width: 6, Drop: 1},
		{Title: "NODE", Width: 7, Drop: 5}, {Title: "REPLICAS ✓✗↻", Width: 45, Flex: true}}
	about := screenHelp{about: "Longhorn volumes: state, robustness and how long it has held, size, where attached, and each replica (✓ healthy ✗ failed ↻ rebuilding ■ stopped)."}
	s := &tableScreen{ctx: ctx, t: ui.NewTable(ctx, cols), about: about, build: func(f *Frame, now time.Time) []ui.Row {
		var rows []ui.Row
		for _, v := range f.Status.Volumes {
			rob, since := robustnessCells(ctx, f, v, now)
			replicas := replicasOnScreen.list(v)
			rows = append(rows, ui.Row{ID: v.Name, Cells: []ui.Cell{
				plain(v.Label()), plain(v.State), rob, since,
				{Text: Bytes(v.Size), Key: numberKey(v.Size)}, {Text: Bytes(v.ActualSize), Key: numberKey(v.ActualSize)},
				plain(orNA(v.Node)), plain(replicas),
			}})
		}
		return rows
	}}
	withDetail(s, "volume", "the volume's detail", nil, volumeDetail(ctx))
	return s
}
