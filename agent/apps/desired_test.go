package apps

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/kube"
)

// What a node lays out: the workloads of the active apps it is the
// effective DNId of (on a designated node that is in the cluster), the
// claims of its volumes and one storage class per replica count they use;
// an app that cannot be laid out is an error for that app, not a layout.
func TestDesiredLayouts(t *testing.T) {
	app := func(uuid, name string, activate bool, refs ...string) AppConfig {
		a := testApp()
		a.UUID, a.DisplayName, a.Activate, a.VolumeRefs = uuid, name, activate, refs
		return a
	}
	const (
		here       = "a0000000-0000-4000-8000-000000000001"
		inactive   = "a0000000-0000-4000-8000-000000000002"
		elsewhere  = "a0000000-0000-4000-8000-000000000003"
		notInClust = "a0000000-0000-4000-8000-000000000004"
		noVolume   = "a0000000-0000-4000-8000-000000000005"
		vol3a      = "b0000000-0000-4000-8000-000000000001"
		vol3b      = "b0000000-0000-4000-8000-000000000002"
		vol2B      = "b0000000-0000-4000-8000-000000000003"
		vol1       = "b0000000-0000-4000-8000-000000000004"
	)
	set := AppSet{
		Apps: map[string]AppConfig{
			here:       app(here, "here", true, vol3a),
			inactive:   app(inactive, "inactive", false),
			elsewhere:  app(elsewhere, "elsewhere", true),
			notInClust: app(notInClust, "not-in-cluster", true),
			noVolume:   app(noVolume, "no-volume", true, "c0000000-0000-4000-8000-00000000dead"),
		},
		Volumes: map[string]VolumeConfig{
			vol3a: {UUID: vol3a, Name: "data-a", DesignatedNodeID: nodeA, Size: "1Gi", ReplicaCount: 3},
			vol3b: {UUID: vol3b, Name: "data-b", DesignatedNodeID: nodeA, Size: "1Gi", ReplicaCount: 3},
			vol2B: {UUID: vol2B, Name: "data-on-b", DesignatedNodeID: nodeB, Size: "1Gi", ReplicaCount: 2},
			vol1:  {UUID: vol1, Name: "scratch", DesignatedNodeID: nodeA, Size: "1Gi", ReplicaCount: 1},
		},
	}
	decisions := map[string]AppDecision{
		here: {Place: true}, inactive: {Place: true}, elsewhere: {Place: false},
		notInClust: {Place: true}, noVolume: {Place: true},
	}
	states := []PublishedApp{
		{UUID: here, DNIdNode: "node-a"}, {UUID: inactive, DNIdNode: "node-a"}, {UUID: elsewhere, DNIdNode: "node-b"},
		{UUID: notInClust, DNIdNode: ""}, {UUID: noVolume, DNIdNode: "node-a"},
	}
	desired, appErr, _ := desiredLayouts(set, decisions, states, nodeA, ownClaims(nodeA), PlacementOptions{}, passthroughView{})

	ns := kube.AppNamespace
	want := []string{
		layoutKey(GVRDeployment, ns, WorkloadName(set.Apps[here])),
		layoutKey(GVRPVC, ns, ClaimName(set.Volumes[vol3a])),
		layoutKey(GVRPVC, ns, ClaimName(set.Volumes[vol3b])),
		layoutKey(GVRPVC, ns, ClaimName(set.Volumes[vol1])),
		layoutKey(GVRStorageClass, "", StorageClassName(3)),
		layoutKey(GVRStorageClass, "", StorageClassName(1)),
	}
	if got := slices.Sorted(maps.Keys(desired)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Fatalf("desired:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(slices.Sorted(slices.Values(want)), "\n  "))
	}
	if l := desired[want[0]]; l.Object.GetAnnotations()[AnnotationDNId] != nodeA {
		t.Fatalf("the workload is not marked as this node's layout: %v", l.Object.GetAnnotations())
	}
	if len(appErr) != 1 || !strings.Contains(appErr[noVolume], "no config") {
		t.Fatalf("app errors: %v, want one for the app whose volume has no config", appErr)
	}
}

// ownClaims: the claims of the volumes node is the designated node of, as
// a server's agent writes them when it does not lead.
func ownClaims(node string) func(dnid string) bool {
	return func(dnid string) bool { return strings.EqualFold(dnid, node) }
}
