package views

import (
	"fmt"
	"io/fs"
	"strings"
	"testing"
)

// newUnformedApp is the console of a device in no cluster yet, the one
// :form is for: no kubeconfig, no cluster data.
func newUnformedApp(w, h int) *App {
	a := NewApp(testContext(w, h))
	a.Update(FrameMsg(Frame{Problem: "no kubeconfig found"}))
	return a
}

// :form on a device that sees its cluster formed and running says so
// instead of opening the formation wizard without a word.
func TestFormOnARunningClusterSaysSo(t *testing.T) {
	a := newTestApp(100, 30)
	a.SetActions(&Actions{Audit: testAudit(t)})
	a.SetFormWizard(func() *FormWizard { return NewFormWizard(a.ctx, []string{"eth1"}, FormInput{}) })
	press(a, ":", "f", "o", "r", "m", "enter")
	if a.wizard != nil || !strings.Contains(footerLine(a), "site1") {
		t.Fatalf(":form on the running cluster site1 should say so, not open the wizard (wizard %v):\n%s", a.wizard != nil, a.View())
	}
}

// :add and :replace on a console started without this node's cluster
// config (the demo's) say to pass --config, not only that a file is
// missing.
func TestJoinInfoWithoutConfigSaysPassConfig(t *testing.T) {
	missing := &fs.PathError{Op: "open", Path: "/persist/sitecon/cluster.json", Err: fs.ErrNotExist}
	a := newTestApp(120, 30)
	a.SetActions(&Actions{Audit: testAudit(t), JoinInfo: func(role, name, uuid, ip string) (string, error) {
		return "", fmt.Errorf("reading the cluster config: %w", missing)
	}})
	press(a, ":", "a", "d", "d", " ", "s", "e", "r", "v", "e", "r", " ", "n", "o", "d", "e", "-", "d", "enter")
	if !strings.Contains(a.message, "--config") {
		t.Errorf(":add without a config: %q", a.message)
	}
	press(a, ":")
	for _, r := range "replace node-c node-d 0d1c2b3a" {
		press(a, string(r))
	}
	press(a, "enter")
	if a.dialog == nil || !strings.Contains(a.View(), "--config") {
		t.Errorf(":replace without a config:\n%s", a.View())
	}
}

// The demo's next step ("in another terminal: sitebox fail node-b") is
// said in the console, where the technician looks: in the footer until the
// first key, and in the help for as long as the console runs.
func TestHintShownInTheConsole(t *testing.T) {
	const hint = "in another terminal: bin/sitebox fail node-b --dir .sitebox"
	a := newTestApp(100, 30)
	a.SetHint(hint)
	if f := footerLine(a); !strings.Contains(f, hint) {
		t.Errorf("the footer should say the hint at start: %q", f)
	}
	press(a, "2", "?")
	if v := a.View(); !strings.Contains(v, hint) {
		t.Errorf("the help should say the hint:\n%s", v)
	}
}

// The overview explains a node with no role: an agent that does not
// bootstrap k3s (the demo's, sitebox's cluster) has none to show.
func TestOverviewExplainsNoRole(t *testing.T) {
	f := sampleFrame()
	f.Agent.Role, f.Agent.Phase = "", "no-bootstrap"
	a := NewApp(testContext(120, 30))
	a.Update(FrameMsg(f))
	line := lineOf(a.View(), "This node")
	if strings.Contains(line, "n/a") || !strings.Contains(line, "no role: this agent does not run k3s") {
		t.Errorf("the role should be explained, not n/a: %q", line)
	}
}
