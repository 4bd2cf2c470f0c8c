package views

import (
	"fmt"
	"strings"
	"time"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

func newApps(ctx *ui.Context) screen {
	// At 80 columns (the device's console) a row keeps the app's name,
	// where it runs, its state and the start of its note (a failover's old
	// pod still going); the columns read less give way, VNC first, and the
	// cursor row shows them under the table. NOTE takes the room left.
	cols := []ui.Column{{Title: "NAME", Width: 12}, {Title: "KIND", Width: 9, Drop: 3}, {Title: "MODE", Width: 6, Drop: 2},
		{Title: "DESIGNATED", Width: 10, Drop: 5}, {Title: "NODE", Width: 7}, {Title: "STATUS", Width: 10},
		{Title: "LAST MOVE", Width: 20, Drop: 4}, {Title: "VNC", Width: 5, Drop: 1}, {Title: "NOTE", Width: 20, Flex: true}}
	about := screenHelp{
		about: "The apps: where each should run (designated) and where it runs, its state, last move and VNC port (served on the VM's node while it runs; off: not running).",
		actions: []action{{ctx.Keys.Migrate, "migrate the app to another node (an on-site override of its designated node)", "app", (*App).openMigrate},
			{ctx.Keys.VNC, "open the VM's console (VNC) on a local port for a viewer, until closed", "app", (*App).openVNC}},
	}
	return &tableScreen{ctx: ctx, t: ui.NewTable(ctx, cols), about: about, build: func(f *Frame, now time.Time) []ui.Row {
		var rows []ui.Row
		for _, a := range f.Status.Apps {
			status := styled(a.Phase, &ctx.Styles.OK)
			if !a.Ready {
				status = styled(orNA(a.Phase), &ctx.Styles.Bad)
			}
			node := plain(orNA(a.Node))
			if a.DesignatedNode != "" && a.Node != "" && a.Node != a.DesignatedNode {
				node = styled(a.Node, &ctx.Styles.Warn) // running away from its designated node
			}
			move := ui.Cell{Text: "-"}
			if m := a.LastMove; m != nil {
				move = ui.Cell{Text: fmt.Sprintf("%s %s→%s", Age(m.At, now, true), m.From, m.To), Key: durationKey(m.At, now)}
			}
			// The port is served (agent/vncbridge, on the VM's node) while
			// the VM runs, not before: a VM with VNC that does not run
			// says so rather than offer a port nothing answers.
			vnc := plain("-")
			switch {
			case a.VNCPort > 0 && a.Ready:
				vnc = plain(fmt.Sprint(a.VNCPort))
			case a.VNCPort > 0:
				vnc = plain("off")
			}
			// The old pods or VMIs still going away are said on the app's
			// one row, not as rows of their own.
			note := plain("")
			if len(a.Terminating) > 0 {
				var parts []string
				for _, o := range a.Terminating {
					parts = append(parts, "terminating on "+orNA(o.Node))
				}
				note = styled("old "+map[bool]string{true: "VMI", false: "pod"}[a.Kind == kube.AppKindVM]+" "+strings.Join(parts, ", "), &ctx.Styles.Warn)
			}
			rows = append(rows, ui.Row{ID: a.Namespace + "/" + a.Object, Cells: []ui.Cell{
				plain(a.Name), plain(a.Kind), plain(orNA(a.Mode)), plain(orNA(a.DesignatedNode)), node, status, move, vnc, note,
			}})
		}
		return rows
	}}
}
