package cmd

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/kube/safety"
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

// Issue 19 §7: what the actions print quotes the cluster (pod and app
// names, eviction messages, the preflight's pods): cleaned of terminal
// sequences before it reaches the terminal (docs/DESIGN.md, "Nothing raw reaches the terminal").
func TestActionOutputReachesTheTerminalClean(t *testing.T) {
	var out strings.Builder
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	cmd.SetContext(context.Background())
	log, err := audit.Open(filepath.Join(t.TempDir(), "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	a := &action{cmd: cmd, flags: &actionFlags{}, recorder: flow.Recorder{Log: log}}
	printPreflight(a.out(), safety.Preflight{Node: "node-b", Evict: []string{"eve-kube-app/hmi\x1b[2J\x1b[Hx"}})
	drain := &flow.Action{Record: a.recorder.Open(flow.ActionDrain, "node-b"),
		Change: func(_ context.Context, progress func(string)) error {
			progress("waiting   error when evicting pods/\"hmi\x1b]0;pwned\x07\" (will retry after 2s): \x1b]52;c;cm0gLXJmIH4=\x07budget")
			return nil
		}}
	if err := a.run(drain); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if strings.ContainsAny(got, "\x1b\x07") {
		t.Fatalf("terminal sequences reached the terminal: %q", got)
	}
	for _, want := range []string{"  eve-kube-app/hmix\n", "waiting   error when evicting pods/\"hmi\" (will retry after 2s): budget\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("printed %q, lacks %q", got, want)
		}
	}
}
