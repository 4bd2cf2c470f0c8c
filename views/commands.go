package views

import (
	"fmt"
	"strings"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/sitecon/sitecon/keymap"
)

// runCommand handles :nodes, :volumes ... (any unique prefix), :add,
// :replace, :form and :q.
func (a *App) runCommand(cmd string) tea.Cmd {
	cmd = strings.TrimPrefix(strings.ToLower(cmd), ":")
	if cmd == "" {
		return nil
	}
	if cmd == "q" || cmd == "quit" {
		a.message = "press q to quit"
		return nil
	}
	switch fields := strings.Fields(cmd); fields[0] {
	case "add":
		a.addNode(fields[1:])
		return nil
	case "replace":
		return a.replaceNode(fields[1:])
	}
	if cmd == "form" {
		s := a.frame.Status
		switch {
		case a.frame.Synced && s.NodesReady > 0:
			// Forming here would start a second cluster beside the one
			// this device sees running (safety rule 1): say so.
			a.message = fmt.Sprintf(":form is for a device in no cluster yet: this one sees cluster %s running (%d/%d nodes ready); to add a device to it, use :add on a member",
				orNA(s.Cluster.Name), s.NodesReady, s.NodesTotal)
		case a.ctx.ReadOnly:
			a.message = "read-only: :form is not available"
		case a.newWizard == nil || a.actions == nil:
			a.message = ":form is not available here"
		case a.actions.unavailable() != "":
			// Forming writes this node's cluster config: an action like
			// any other, not taken if it cannot be recorded.
			a.message = ":form is not available: " + a.actions.unavailable()
		default:
			a.wizard = a.newWizard()
			a.wizard.Audit, a.wizard.Via = a.actions.Audit, "console"
			a.wizard.Init()
		}
		return nil
	}
	var matches []int
	for i, name := range keymap.ScreenNames {
		if strings.HasPrefix(name, cmd) || (cmd == "vol" && name == "volumes") || (cmd == "no" && name == "nodes") {
			matches = append(matches, i)
		}
	}
	if len(matches) == 1 {
		a.show(matches[0])
		return nil
	}
	a.message = fmt.Sprintf("unknown command :%s (try :%s)", cmd, strings.Join(keymap.ScreenNames, ", :"))
	return nil
}
