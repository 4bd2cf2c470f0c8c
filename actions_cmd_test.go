package main

import (
	"testing"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/kube/flow"
)

// The drain commands' flags default to the flows' options, which the
// console uses too: one timeout, whoever drains.
func TestDrainFlagsDefaultToTheFlows(t *testing.T) {
	g := &globalFlags{}
	node := newNodeCmd(g)
	remove, _, _ := node.Find([]string{"remove"})
	replace, _, _ := node.Find([]string{"replace"})
	def := flow.DefaultDrainOptions()
	for name, cmd := range map[string]*cobra.Command{"drain": newDrainCmd(g), "node remove": remove, "node replace": replace} {
		for flag, want := range map[string]string{"timeout": def.Timeout.String(), "grace-period": def.GracePeriod.String()} {
			if got := cmd.Flags().Lookup(flag).DefValue; got != want {
				t.Errorf("%s --%s defaults to %s, want the flows' %s", name, flag, got, want)
			}
		}
	}
}
