package views

import (
	"strings"
	"testing"

	"github.com/sitecon/sitecon/kube"
)

// v on an app that has no console to show opens no bridge and says why.
func TestVNCRefusesAnAppWithoutAConsole(t *testing.T) {
	for row, want := range map[string]string{
		"/plc-gateway-1": "plc-gateway is a container app: VNC is a VM's console",
		"/historian":     "historian has no VNC console",
	} {
		a := newTestApp(100, 30)
		a.SetActions(&Actions{Audit: testAudit(t)})
		press(a, "5")
		a.openVNC(row)
		if a.dialog == nil || a.dialog.state != dialogDone || a.dialog.task != nil || !strings.Contains(a.View(), want) {
			t.Errorf("%s: want no bridge and %q:\n%s", row, want, a.View())
		}
	}
}

// The VNC column offers a port only while the VM runs (its node's agent
// serves it then); a VM with VNC that does not run says off.
func TestVNCColumnOffersOnlyAServedPort(t *testing.T) {
	a := newTestApp(160, 30)
	f := sampleFrame()
	f.Status.Apps = append(f.Status.Apps, kube.AppStatus{Name: "scada", Kind: kube.AppKindVM, Phase: "Scheduling", Object: "scada", VNCPort: 5907})
	a.Update(FrameMsg(f))
	press(a, "5")
	v := a.View()
	seen := 0
	for _, line := range strings.Split(v, "\n") {
		if strings.Contains(line, "hmi ") || strings.Contains(line, "scada") {
			seen++
		}
		switch {
		case strings.Contains(line, "hmi ") && !strings.Contains(line, "5901"):
			t.Errorf("a running VM's port is not shown: %q", line)
		case strings.Contains(line, "scada") && (strings.Contains(line, "5907") || !strings.Contains(line, "off")):
			t.Errorf("a VM not running offers its port: %q", line)
		}
	}
	if seen != 2 {
		t.Fatalf("hmi and scada rows not both on screen:\n%s", v)
	}
}
