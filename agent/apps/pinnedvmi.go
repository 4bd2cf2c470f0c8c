package apps

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sitecon/sitecon/kube"
)

// pinnedRestart is a pinned VM's failed VMI to remove, so that the next
// pass lays it out afresh.
type pinnedRestart struct {
	key   string
	want  Layout
	live  *unstructured.Unstructured
	phase string
}

// failedPinnedVMIs chooses the pinned VMs to restart. KubeVirt does not
// restart a VMI that failed (its node was lost) or finished: once the
// app's designated node is Ready again, the VMI is removed and laid out
// afresh there. live is the object a layout would be written over (nil:
// none), hosts the apps' DNId node names by UUID.
func failedPinnedVMIs(desired map[string]Layout, live func(Layout) *unstructured.Unstructured, hosts map[string]string, nodeReady func(string) bool) []pinnedRestart {
	var out []pinnedRestart
	for _, key := range slices.Sorted(maps.Keys(desired)) {
		l := desired[key]
		if l.GVR != GVRVMI {
			continue
		}
		obj := live(l)
		if obj == nil || obj.GetDeletionTimestamp() != nil {
			continue
		}
		phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
		if (phase != "Failed" && phase != "Succeeded") || !nodeReady(hosts[l.Object.GetLabels()[kube.LabelAppUUID]]) {
			continue
		}
		out = append(out, pinnedRestart{key: key, want: l, live: obj, phase: phase})
	}
	return out
}

// restartPinnedVMIs removes the VMIs failedPinnedVMIs chose. It remembers
// nothing: a VMI whose removal failed is chosen again next pass.
func (fx placeEffects) restartPinnedVMIs(ctx context.Context, restarts []pinnedRestart, now time.Time) {
	for _, r := range restarts {
		if err := fx.deleteExact(ctx, r.want.GVR, r.want.Namespace(), r.want.Name(), r.live.GetUID()); err != nil {
			fx.log.Error("restart pinned VM", "object", r.key, "err", err)
			continue
		}
		appName := r.want.Object.GetLabels()[kube.LabelAppName]
		fx.timeline.Add(TimelineEvent{Time: now, Kind: EventPlacement, App: appName, Node: fx.node,
			Message: fmt.Sprintf("pinned VM %s %s; its node is back, laying it out again", appName, strings.ToLower(r.phase))})
	}
}
