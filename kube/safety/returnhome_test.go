package safety_test

import (
	"strings"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/kube/safety"
)

// The return-home preflight over plain values: an app that failed over
// from node-b to node-c, node-b back (or not), its volume's replicas.
func TestReturnHome(t *testing.T) {
	nodes := func(change func(n *safety.Node)) []safety.Node {
		out := []safety.Node{{Name: "node-a", Ready: true}, {Name: "node-b", Ready: true, Labels: map[string]string{"site.io/line": "2"}}, {Name: "node-c", Ready: true}}
		if change != nil {
			for i := range out {
				if out[i].Name == "node-b" {
					change(&out[i])
				}
			}
		}
		return out
	}
	healthy, failed := stamp(-time.Hour), stamp(-time.Minute)
	vol := func(reps ...*lhv1beta2.Replica) []safety.AppVolume {
		return []safety.AppVolume{{Name: "vol-hist", Replicas: reps}}
	}
	onA := mkReplica("r-a", "vol-hist", "node-a", lhv1beta2.InstanceStateRunning, healthy, "")
	onC := mkReplica("r-c", "vol-hist", "node-c", lhv1beta2.InstanceStateRunning, healthy, "")
	onB := mkReplica("r-b", "vol-hist", "node-b", lhv1beta2.InstanceStateRunning, healthy, "")
	failedOnB := mkReplica("r-b", "vol-hist", "node-b", lhv1beta2.InstanceStateError, healthy, failed)
	rebuildingOnB := mkReplica("r-b", "vol-hist", "node-b", lhv1beta2.InstanceStateRunning, "", "")
	away := safety.ReturnHomeFacts{App: "historian", Node: "node-c", Home: "node-b", Nodes: nodes(nil)}
	with := func(change func(f *safety.ReturnHomeFacts)) safety.ReturnHomeFacts {
		f := away
		change(&f)
		return f
	}
	for name, tc := range map[string]struct {
		facts safety.ReturnHomeFacts
		home  bool
		// refused, warned: a part of the one refusal or warning; "" for none.
		refused, warned, note string
	}{
		"away, home Ready, no volumes": {facts: away},
		"already home: nothing to do":  {facts: with(func(f *safety.ReturnHomeFacts) { f.Node = "node-b" }), home: true},
		"home not Ready: refused":      {facts: with(func(f *safety.ReturnHomeFacts) { f.Nodes = nodes(func(n *safety.Node) { n.Ready = false }) }), refused: "node-b, the designated node of historian, is not Ready: historian stays on node-c until it is"},
		"home cordoned: refused":       {facts: with(func(f *safety.ReturnHomeFacts) { f.Nodes = nodes(func(n *safety.Node) { n.Cordoned = true }) }), refused: "is cordoned: uncordon it once its maintenance is over (sitecon uncordon node-b)"},
		"home gone from the cluster":   {facts: with(func(f *safety.ReturnHomeFacts) { f.Home = "node-x" }), refused: "node-x, the designated node of historian, is not a node of the cluster (nodes: node-a, node-b, node-c)"},
		"no designated node":           {facts: with(func(f *safety.ReturnHomeFacts) { f.Home = "" }), refused: "has no designated node"},
		"not placed anywhere":          {facts: with(func(f *safety.ReturnHomeFacts) { f.Node = "" }), refused: "is not placed on any node: the scheduler places it on node-b by itself"},
		"home lacks a required label": {facts: with(func(f *safety.ReturnHomeFacts) {
			f.Requires = []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"yes"}}}
		}), refused: "lacks gpu in yes, which the app requires"},
		"home has the required label": {facts: with(func(f *safety.ReturnHomeFacts) {
			f.Requires = []corev1.NodeSelectorRequirement{{Key: "site.io/line", Operator: corev1.NodeSelectorOpIn, Values: []string{"2"}}}
		})},
		"home holds a healthy replica":    {facts: with(func(f *safety.ReturnHomeFacts) { f.Volumes = vol(onA, onB, onC) }), note: "volume vol-hist: node-b holds a healthy replica"},
		"home's replica rebuilding: warn": {facts: with(func(f *safety.ReturnHomeFacts) { f.Volumes = vol(onA, rebuildingOnB, onC) }), warned: "node-b holds no healthy replica of volume vol-hist: its replica there is still rebuilding; historian would start on node-b reading its data across the network from node-a, node-c"},
		"home's replica failed: warn":     {facts: with(func(f *safety.ReturnHomeFacts) { f.Volumes = vol(onA, failedOnB, onC) }), warned: "node-b holds no healthy replica of volume vol-hist: historian would start on node-b reading its data across the network from node-a, node-c until Longhorn rebuilds a copy there"},
		"home never had a replica: warn":  {facts: with(func(f *safety.ReturnHomeFacts) { f.Volumes = vol(onA, onC) }), warned: "node-b holds no healthy replica of volume vol-hist"},
		"no up-to-date copy anywhere":     {facts: with(func(f *safety.ReturnHomeFacts) { f.Volumes = vol(rebuildingOnB) }), warned: "volume vol-hist has no up-to-date replica on any node"},
		"a claim Longhorn does not serve": {facts: with(func(f *safety.ReturnHomeFacts) { f.Unknown = []string{"scratch"} }), note: "claim scratch: no Longhorn volume seen for it; its replicas are not checked"},
		// A refusal is the whole verdict: the replicas of a node that is
		// not Ready are not judged.
		"home down with a failed replica: refused only": {facts: with(func(f *safety.ReturnHomeFacts) {
			f.Nodes = nodes(func(n *safety.Node) { n.Ready = false })
			f.Volumes = vol(onA, failedOnB, onC)
		}), refused: "is not Ready"},
	} {
		t.Run(name, func(t *testing.T) {
			v := safety.ReturnHome(tc.facts)
			if v.AlreadyHome != tc.home {
				t.Fatalf("already home %v, want %v: %+v", v.AlreadyHome, tc.home, v)
			}
			check := func(what string, got []string, want string) {
				t.Helper()
				if want == "" {
					if len(got) > 0 {
						t.Errorf("%s %q, want none", what, got)
					}
					return
				}
				if len(got) != 1 || !strings.Contains(got[0], want) {
					t.Errorf("%s %q, want one saying %q", what, got, want)
				}
			}
			check("refusals", v.Refusals, tc.refused)
			check("warnings", v.Warnings, tc.warned)
			if tc.note != "" && !strings.Contains(strings.Join(v.Notes, "\n"), tc.note) {
				t.Errorf("notes %q lack %q", v.Notes, tc.note)
			}
			if v.Refused() != (tc.refused != "") || v.NeedsForce() != (tc.warned != "") {
				t.Errorf("Refused %v, NeedsForce %v for %+v", v.Refused(), v.NeedsForce(), v)
			}
		})
	}
}
