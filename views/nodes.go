package views

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/ui"
)

// nodeStatusCell colours a node's readiness; from a stale cache it is
// the last one seen ("Ready?"), never green.
func nodeStatusCell(ctx *ui.Context, f *Frame, n kube.NodeStatus) ui.Cell {
	switch n.Status {
	case kube.NodeReady:
		return styled(stateText(f, n.Status), okStyle(ctx, f))
	default:
		return styled(stateText(f, n.Status), &ctx.Styles.Bad)
	}
}

func newNodes(ctx *ui.Context) screen {
	cols := []ui.Column{{Title: "NAME", Width: 10}, {Title: "ROLES", Width: 16}, {Title: "STATUS", Width: 9}, {Title: "SINCE", Width: 6},
		{Title: "SCHED", Width: 8}, {Title: "VERSION", Width: 13, HideBelow: 90}, {Title: "IP", Width: 13}, {Title: "PODS", Width: 5},
		{Title: "CPU REQ/ALLOC", Width: 13, HideBelow: 120}, {Title: "MEM REQ/ALLOC", Width: 14, HideBelow: 120}}
	k := ctx.Keys
	about := screenHelp{
		about: "The cluster's nodes: readiness and since when, roles (the seed marked), schedulability, version, address, load.",
		actions: []action{
			{k.Cordon, "cordon the node: no new pods, running ones stay", "node", func(a *App, node string) tea.Cmd { a.openCordon(node, true); return nil }, nil},
			{k.Uncordon, "uncordon the node: it takes new pods again", "node", func(a *App, node string) tea.Cmd { a.openCordon(node, false); return nil }, nil},
			{k.Drain, "drain the node: cordon, then evict its pods (checks volumes and etcd quorum first)", "node", func(a *App, node string) tea.Cmd {
				return a.openDrain("drain "+node, a.actions.recorder().Open(flow.ActionDrain, node), node, nil)
			}, nil},
			{k.Remove, "remove the node: drain, then delete it from the cluster", "node", func(a *App, node string) tea.Cmd {
				return a.openDrain("remove "+node, a.actions.recorder().Open(flow.ActionRemove, node), node, nil)
			}, nil},
			{k.Maintenance, "maintenance: drain, power off, back, volumes healthy, uncordon", "node",
				func(a *App, node string) tea.Cmd { return a.openMaintenance(node) }, nil},
			{k.Seed, "make the node the seed others join through", "node", func(a *App, node string) tea.Cmd { a.openSeed(node); return nil }, nil},
			// The command line, filled in: what a new node needs is typed.
			{k.AddNode, "add a node: its join bundle (or :add ROLE NAME UUID)", "", func(a *App, _ string) tea.Cmd {
				a.mode = modeCommand
				a.input.SetValue("add server ")
				a.input.CursorEnd()
				return a.input.Focus()
			}, nil},
		},
		commands: [][2]string{{":replace", "OLD NEW UUID: replace a dead node by a new device"}},
	}
	s := &tableScreen{ctx: ctx, t: ui.NewTable(ctx, cols), about: about, build: func(f *Frame, now time.Time) []ui.Row {
		var rows []ui.Row
		for _, n := range f.Status.Nodes {
			roles := shortRoles(n.Roles)
			if n.Seed {
				roles += ",seed"
			}
			sched := styled("yes", &ctx.Styles.Muted)
			if !n.Schedulable {
				sched = styled("cordoned", &ctx.Styles.Warn)
			}
			version := plain(n.KubeletVersion)
			if n.VersionSkew != "" {
				version = styled(n.KubeletVersion+"!", &ctx.Styles.Bad)
			}
			rows = append(rows, ui.Row{ID: n.Name, Cells: []ui.Cell{
				plain(n.Name), plain(roles), nodeStatusCell(ctx, f, n),
				{Text: Age(n.Since, now, true), Key: durationKey(n.Since, now)},
				sched, version, plain(n.InternalIP), {Text: fmt.Sprint(n.Pods), Key: numberKey(int64(n.Pods))},
				{Text: fmt.Sprintf("%s/%s", cores(n.CPURequested), cores(n.CPUAllocatable)), Key: numberKey(n.CPURequested)},
				{Text: fmt.Sprintf("%s/%s", Bytes(n.MemoryRequested), Bytes(n.MemoryAllocatable)), Key: numberKey(n.MemoryRequested)},
			}})
		}
		return rows
	}}
	withDetail(s, "node", "the node's detail", nil, nodeDetail(ctx))
	return s
}

// openCordon asks to cordon (or uncordon) node.
func (a *App) openCordon(node string, cordon bool) {
	act := flow.Cordon(a.actions.recorder(), a.actions.Snap, node, cordon)
	d := a.openDialog(flow.CordonName(cordon)+" "+node, act.Record)
	if i := slices.IndexFunc(a.frame.Status.Nodes, func(n kube.NodeStatus) bool { return n.Name == node }); i >= 0 && a.frame.Status.Nodes[i].Schedulable != cordon {
		// Nothing to ask: said, and recorded as sitecon cordon records it.
		d.state = dialogDone
		d.result = fmt.Sprintf("%s is already %sed: nothing to do", node, flow.CordonName(cordon))
		d.notRecorded(act.End(audit.OutcomeDone, nil))
		return
	}
	if cordon {
		d.lines = textLines("New pods will not be scheduled on " + node + "; running pods stay.")
	} else {
		d.lines = textLines(node + " takes new pods again.")
	}
	d.state, d.action = dialogConfirm, act
}

// openSeed asks to make node the seed the others join through.
func (a *App) openSeed(node string) {
	if i := slices.IndexFunc(a.frame.Status.Nodes, func(n kube.NodeStatus) bool { return n.Name == node }); i >= 0 && a.frame.Status.Nodes[i].Seed {
		// Nothing to ask: said, and recorded as sitecon seed records it.
		rec := a.actions.recorder().Open("seed", node)
		d := a.openDialog("make "+node+" the seed", rec)
		d.state = dialogDone
		d.result = flow.SeedAlready(node, a.frame.Status.Cluster.SeedAddress)
		d.notRecorded(rec.End(audit.OutcomeDone, nil))
		return
	}
	seed, err := flow.PlanSeed(a.actions.recorder(), a.actions.Snap, node)
	if err != nil {
		a.openDialog("make "+node+" the seed", nil).refused(err, true)
		return
	}
	d := a.openDialog("make "+node+" the seed", seed.Record)
	d.lines = textLines(fmt.Sprintf("The cluster's join address (join_server_ip) goes from %s to %s's address: every node's k3s config will join through %s from its next start.", cmp.Or(seed.From, "none"), node, node),
		"A running k3s is not restarted, and nothing moves: the seed is only the address joiners and restarting nodes ask first.")
	d.state, d.action = dialogConfirm, &seed.Action
}

// cores formats millicores as kubectl does: "500m", "2".
func cores(milli int64) string {
	if milli%1000 == 0 {
		return fmt.Sprint(milli / 1000)
	}
	return fmt.Sprintf("%dm", milli)
}

// shortRoles abbreviates k3s's three server roles to "server".
func shortRoles(roles []string) string {
	if slices.Contains(roles, "control-plane") && slices.Contains(roles, "etcd") {
		rest := slices.DeleteFunc(slices.Clone(roles), func(r string) bool { return r == "control-plane" || r == "etcd" || r == "master" })
		return strings.Join(append([]string{"server"}, rest...), ",")
	}
	return strings.Join(roles, ",")
}
