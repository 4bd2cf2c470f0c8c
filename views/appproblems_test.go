package views

import (
	"strings"
	"testing"

	"github.com/sitecon/sitecon/kube"
)

// What the agent finds wrong with an app is on the apps screen: the note
// of its row, or, for an app it could not lay out (nothing of it in the
// cluster), a row of its own saying why. At 80 columns too: the device's
// console.
func TestAppsScreenShowsAgentProblems(t *testing.T) {
	f := sampleFrame()
	f.Status.Apps = append(f.Status.Apps, kube.AppStatus{Name: "pt-gateway", UUID: "e601", Kind: kube.AppKindContainer, Mode: kube.AppModePinned,
		DesignatedNode: "node-b", Node: "node-b", Phase: "Running", Ready: true, Object: "pt-gateway-1"})
	f.Status.Apps = append(f.Status.Apps, kube.AppStatus{Name: "plc-io", UUID: "e602", Kind: kube.AppKindContainer, Mode: kube.AppModePinned,
		DesignatedNode: "node-c", Node: "node-c", Phase: "Running", Ready: true, Object: "plc-io-1", HostPorts: []string{"eth1"}})
	f.Agent.AppProblems = []AgentAppProblem{
		{App: "pt-another", UUID: "e603", Kind: "container", Mode: kube.AppModePinned, Designated: "node-b",
			Problem: "not laid out: host port eth1 (passed through to pt-gateway) on node-b is in use: one port, one app"},
		{App: "pt-gateway", UUID: "e601", Kind: "container", Mode: kube.AppModePinned, Designated: "node-b", Problem: "on-site move refused"},
	}
	for _, width := range []int{160, 80} {
		a := NewApp(testContext(width, 30))
		a.Update(FrameMsg(f))
		press(a, "5")
		v := a.View()
		line := lineOf(v, "pt-another")
		if !strings.Contains(line, "not laid out") || !strings.Contains(line, "host port") {
			t.Errorf("width %d: the refused app's row should say why:\n%s", width, v)
		}
		if n := strings.Count(v, "pt-gateway"); width == 160 && n != 2 { // its row, and pt-another's note
			t.Errorf("width %d: pt-gateway should be on one row (and in pt-another's note), found %d times:\n%s", width, n, v)
		}
		if !strings.Contains(lineOf(v, "plc-io"), "host port eth1") {
			t.Errorf("width %d: plc-io's row should name the port passed through to it:\n%s", width, v)
		}
		if width == 160 && !strings.Contains(lineOf(v, "on-site move refused"), "pt-gateway") {
			t.Errorf("width %d: pt-gateway's row should carry its problem as its note:\n%s", width, v)
		}
	}
	// At 80 columns the note is cut: the cursor row's detail has it whole.
	a := NewApp(testContext(80, 30))
	a.Update(FrameMsg(f))
	press(a, "5", "down", "down", "down", "down", "down")
	if v := a.View(); !strings.Contains(strings.Join(strings.Fields(v), " "), "one port, one app") {
		t.Errorf("at 80 columns, on pt-another's row, the whole reason should show:\n%s", v)
	}
	// No agent: the screen is the cluster's, as before.
	f.Agent = nil
	a = NewApp(testContext(160, 30))
	a.Update(FrameMsg(f))
	press(a, "5")
	if v := a.View(); strings.Contains(v, "pt-another") {
		t.Errorf("without an agent there is no configured app to show:\n%s", v)
	}
}
