package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/ui"
)

func typeInto(w tea.Model, s string) {
	for _, r := range s {
		w.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
	}
}

// The formation wizard checks as you type with the same rules as
// sitecon form, refuses to form while a field is wrong, then writes this
// node's config and shows the other nodes' join lines.
func TestFormWizard(t *testing.T) {
	r := lipgloss.NewRenderer(io.Discard)
	r.SetColorProfile(termenv.Ascii)
	ctx := ui.NewContext(r, nil, nil)
	ctx.Width, ctx.Height = 120, 40
	dir := t.TempDir()
	var result *formed
	w := newFormWizard(ctx, []string{"lo"}, dir, false, &result)
	w.Init()
	next := func() { w.Update(tea.KeyMsg{Type: tea.KeyTab}) }

	typeInto(w, "site 1") // a space is not allowed in a name
	if v := w.View(); !strings.Contains(v, `"site 1" is not a valid name`) {
		t.Fatalf("the name is not checked as typed:\n%s", v)
	}
	w.Update(tea.KeyMsg{Type: tea.KeyBackspace})
	w.Update(tea.KeyMsg{Type: tea.KeyBackspace})
	typeInto(w, "1")
	next()
	typeInto(w, "l")
	w.Update(tea.KeyMsg{Type: tea.KeyRight}) // completes to lo
	next()
	// The prefix overlaps lo's 127.0.0.0/8.
	for range len(agent.DefaultClusterPrefix) {
		w.Update(tea.KeyMsg{Type: tea.KeyBackspace})
	}
	typeInto(w, "127.1.0.0/28")
	if v := w.View(); !strings.Contains(v, "overlaps 127.0.0.0/8 already on lo") {
		t.Fatalf("the overlap is not shown:\n%s", v)
	}
	for range len("127.1.0.0/28") {
		w.Update(tea.KeyMsg{Type: tea.KeyBackspace})
	}
	typeInto(w, "10.250.0.0/28")
	next()
	typeInto(w, "node-a, node-b, node-c")
	next()
	next()
	typeInto(w, "node-x")
	if v := w.View(); !strings.Contains(v, "node-x is not one of the nodes") {
		t.Fatalf("a wrong seed is not shown:\n%s", v)
	}
	w.Update(tea.KeyMsg{Type: tea.KeyEnter})
	if result != nil || !strings.Contains(w.View(), "fix the fields marked") {
		t.Fatal("the wizard formed a cluster with a wrong field")
	}
	for range len("node-x") {
		w.Update(tea.KeyMsg{Type: tea.KeyBackspace})
	}
	typeInto(w, "node-b")
	w.Update(tea.KeyMsg{Type: tea.KeyEnter})
	if result == nil {
		t.Fatalf("not formed:\n%s", w.View())
	}
	cfg, err := agent.LoadConfig(filepath.Join(dir, "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeName != "node-b" || cfg.ClusterName != "site1" || cfg.ClusterInterface != "lo" || cfg.JoinServerIP != "10.250.0.1" {
		t.Fatalf("this node's config: %+v", cfg)
	}
	v := w.View()
	for _, want := range []string{"# node-a", "# node-c", "sitecon form --join sitecon-join.v1."} {
		if !strings.Contains(v, want) {
			t.Errorf("the result lacks %q:\n%s", want, v)
		}
	}
	if strings.Contains(v, "# node-b") {
		t.Error("this node needs no join line")
	}
}
