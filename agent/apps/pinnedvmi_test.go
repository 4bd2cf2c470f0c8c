package apps

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A pinned VM's VMI that failed or finished is restarted once its
// designated node is Ready again, and not before; nothing else is.
func TestFailedPinnedVMIs(t *testing.T) {
	pinned := testApp()
	pinned.Kind, pinned.Affinity = KindVM, AffinityRequired
	vmi := layoutOf(t, pinned, nodeA, "node-a")
	deployment := layoutOf(t, testApp(), nodeA, "node-a")
	liveIn := func(l Layout, phase string, deleting bool) *unstructured.Unstructured {
		obj := liveAs(l, "node-a", time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
		if phase != "" {
			_ = unstructured.SetNestedField(obj.Object, phase, "status", "phase")
		}
		if deleting {
			obj.SetDeletionTimestamp(&metav1.Time{Time: time.Date(2025, 3, 1, 12, 1, 0, 0, time.UTC)})
		}
		return obj
	}
	for name, tc := range map[string]struct {
		want      Layout
		live      *unstructured.Unstructured
		nodeReady bool
		restart   bool
	}{
		"failed, its node back":            {want: vmi, live: liveIn(vmi, "Failed", false), nodeReady: true, restart: true},
		"succeeded, its node back":         {want: vmi, live: liveIn(vmi, "Succeeded", false), nodeReady: true, restart: true},
		"failed, its node still not Ready": {want: vmi, live: liveIn(vmi, "Failed", false)},
		"running":                          {want: vmi, live: liveIn(vmi, "Running", false), nodeReady: true},
		"failed, being deleted already":    {want: vmi, live: liveIn(vmi, "Failed", true), nodeReady: true},
		"not laid out yet":                 {want: vmi, nodeReady: true},
		"not a VMI":                        {want: deployment, live: liveIn(deployment, "Failed", false), nodeReady: true},
	} {
		t.Run(name, func(t *testing.T) {
			desired := map[string]Layout{tc.want.key(): tc.want}
			live := func(l Layout) *unstructured.Unstructured {
				if l.key() != tc.want.key() || tc.live == nil {
					return nil
				}
				return tc.live
			}
			hosts := map[string]string{appID: "node-a"}
			ready := func(node string) bool { return node == "node-a" && tc.nodeReady }
			got := failedPinnedVMIs(desired, live, hosts, ready)
			if (len(got) == 1) != tc.restart || len(got) > 1 {
				t.Fatalf("restarts %+v, want restart %v", got, tc.restart)
			}
			if tc.restart && (got[0].live != tc.live || got[0].key != tc.want.key()) {
				t.Fatalf("restart %+v, want the live VMI under %s", got[0], tc.want.key())
			}
		})
	}
}
