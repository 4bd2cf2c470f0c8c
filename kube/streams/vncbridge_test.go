package streams

import (
	"strings"
	"testing"

	"github.com/sitecon/sitecon/kube"
)

func TestVNCTargetFor(t *testing.T) {
	apps := []kube.AppStatus{
		{Name: "hmi", Kind: kube.AppKindVM, VNCPort: 5901, Ready: true, Phase: "Running", Node: "node-a", Object: "hmi-x"},
		{Name: "plc", Kind: kube.AppKindVM, Ready: true, Phase: "Running", Node: "node-b", Object: "plc"},
		{Name: "web", Kind: kube.AppKindContainer, Ready: true, Phase: "Running", Node: "node-a", Object: "web-1"},
		{Name: "scada", Kind: kube.AppKindVM, VNCPort: 5900, Phase: "Scheduling", Object: "scada"},
	}
	for _, tc := range []struct{ ref, want string }{
		{"hmi", ""},
		{"plc", "plc has no VNC console (enable_vnc is off in its config)"},
		{"web", "web is a container app: VNC is a VM's console"},
		{"scada", "scada is not running (Scheduling, not placed yet): no console to show"},
		{"nope", `no app "nope" (apps: hmi, plc, scada, web)`},
	} {
		got, err := VNCTargetFor(apps, tc.ref)
		switch {
		case tc.want == "" && (err != nil || got.Object != "hmi-x"):
			t.Errorf("%s: %+v, %v; want hmi-x", tc.ref, got, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want %q", tc.ref, err, tc.want)
		}
	}
}
