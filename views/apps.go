package views

import (
	"fmt"
	"slices"
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
		actions: []action{{ctx.Keys.Migrate, "migrate the app to another node (an on-site override of its designated node)", "app", (*App).openMigrate, nil},
			{ctx.Keys.ReturnHome, "return the app to its designated node, after a failover left it elsewhere (the migrate there)", "app", (*App).openReturnHome, nil},
			{ctx.Keys.ReturnHomeAll, "return every app away from home, longest away first, one dialog each (sitecon return-home --all)", "",
				(*App).openReturnHomeAll, func(a *App) bool { return len(kube.AwayApps(a.frame.Status.Apps)) > 0 }},
			{ctx.Keys.VNC, "open the VM's console (VNC) on a local port for a viewer, until closed", "app", (*App).openVNC, nil}},
		logsOf: "selected app (a VM's console log)",
	}
	screen := &tableScreen{ctx: ctx, t: ui.NewTable(ctx, cols), about: about}
	// l reads the app's pod, or its VM's virt-launcher pod: the row's ID is
	// the app's namespace/object.
	screen.about.logs = func() (logRequest, bool) {
		ns, object, ok := strings.Cut(screen.selectedID(), "/")
		if !ok || object == "" {
			return logRequest{}, false
		}
		return logRequest{namespace: ns, name: object, app: true, label: "app " + object}, true
	}
	screen.build = func(f *Frame, now time.Time) []ui.Row {
		var rows []ui.Row
		// What this node's agent finds wrong with an app (a host port in
		// use by another app, an unusable override) is its note; an app
		// it could not lay out at all has no pod or VMI, and gets a row of
		// its own, so the reason is on this screen.
		problems := map[string]AgentAppProblem{}
		if f.Agent != nil {
			for _, p := range f.Agent.AppProblems {
				problems[p.UUID] = p
			}
		}
		shown := map[string]bool{}
		for _, a := range f.Status.Apps {
			status := styled(stateText(f, a.Phase), okStyle(ctx, f))
			if !a.Ready {
				status = styled(stateText(f, orNA(a.Phase)), &ctx.Styles.Bad)
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
			var notes []string
			if a.NodeLost {
				// The status says Unknown; the note says why (the overview
				// says both: "Unknown (node-b lost)").
				notes = append(notes, a.Node+" lost")
			}
			if len(a.Terminating) > 0 {
				var parts []string
				for _, o := range a.Terminating {
					parts = append(parts, "terminating on "+orNA(o.Node))
				}
				notes = append(notes, "old "+map[bool]string{true: "VMI", false: "pod"}[a.Kind == kube.AppKindVM]+" "+strings.Join(parts, ", "))
			}
			// After the failover's own notes: a pod still going is the
			// more urgent news.
			if a.Away() {
				notes = append(notes, awayNote(a, now))
			}
			if len(notes) > 0 {
				note = styled(strings.Join(notes, "; "), &ctx.Styles.Warn)
			}
			if len(a.HostPorts) > 0 && note.Text == "" {
				note = plain("host port " + strings.Join(a.HostPorts, ", "))
			}
			if p, ok := problems[a.UUID]; ok && a.UUID != "" {
				shown[a.UUID] = true
				text := p.Problem
				if note.Text != "" {
					text += "; " + note.Text
				}
				note = styled(text, &ctx.Styles.Bad)
			}
			rows = append(rows, ui.Row{ID: appRowID(a), Cells: []ui.Cell{
				plain(a.Name), plain(a.Kind), plain(orNA(a.Mode)), plain(orNA(a.DesignatedNode)), node, status, move, vnc, note,
			}})
		}
		for _, p := range f.Agent.appProblemsIn(shown) {
			rows = append(rows, ui.Row{ID: configRowPrefix + p.UUID, Cells: []ui.Cell{
				plain(p.App), plain(p.Kind), plain(orNA(p.Mode)), plain(orNA(p.Designated)), plain("-"),
				// The status says it is not laid out; the note says why.
				styled("not laid out", &ctx.Styles.Bad), {Text: "-"}, plain("-"), styled(strings.TrimPrefix(p.Problem, "not laid out: "), &ctx.Styles.Bad),
			}})
		}
		return rows
	}
	withDetail(screen, "app", "the app's detail",
		appLabel, appDetail(ctx))
	return screen
}

// appRowID is the ID of an app's row: its namespace/object.
func appRowID(a kube.AppStatus) string { return a.Namespace + "/" + a.Object }

// configRowPrefix starts the ID of an apps-screen row for a configured
// app with nothing in the cluster.
const configRowPrefix = "config/"

// appProblemsIn are the agent's app problems whose app has no row yet
// (not in shown), by name.
func (a *AgentSummary) appProblemsIn(shown map[string]bool) []AgentAppProblem {
	if a == nil {
		return nil
	}
	var out []AgentAppProblem
	for _, p := range a.AppProblems {
		if !shown[p.UUID] {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(x, y AgentAppProblem) int { return strings.Compare(x.App, y.App) })
	return out
}
