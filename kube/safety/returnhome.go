package safety

import (
	"fmt"
	"slices"
	"strings"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
)

// ReturnHomeFacts is what the return-home preflight judges: an app, the
// node it runs on, the node its layout designates (its home), the nodes,
// and the Longhorn volumes it uses with their replicas. kube.ReturnHomeCheck
// gathers them from a snapshot.
type ReturnHomeFacts struct {
	App string
	// Node is where the app runs ("": not placed); Home the node its
	// layout's affinity names ("": none).
	Node, Home string
	Requires   []corev1.NodeSelectorRequirement
	Nodes      []Node
	// Volumes are the Longhorn volumes behind the app's claims.
	Volumes []AppVolume
	// Unknown are the app's claims with no Longhorn volume seen for them:
	// their replicas cannot be judged.
	Unknown []string
}

// AppVolume is one Longhorn volume an app uses and its replicas.
type AppVolume struct {
	Name     string
	Replicas []*lhv1beta2.Replica
}

// ReturnHomeVerdict is the return-home preflight's verdict. AlreadyHome:
// nothing to do. Refusals stop it; Warnings need --force and the home
// node's name typed, as the drain's do.
type ReturnHomeVerdict struct {
	App         string   `json:"app"`
	From        string   `json:"from,omitempty"`
	Home        string   `json:"home,omitempty"`
	AlreadyHome bool     `json:"alreadyHome,omitempty"`
	Refusals    []string `json:"refusals,omitempty"`
	Warnings    []string `json:"warnings,omitempty"`
	Notes       []string `json:"notes,omitempty"`
}

// Refused reports whether the move home must not run.
func (v ReturnHomeVerdict) Refused() bool { return len(v.Refusals) > 0 }

// NeedsForce reports whether it may only run with --force (the home
// node's name typed).
func (v ReturnHomeVerdict) NeedsForce() bool { return len(v.Warnings) > 0 }

// ReturnHome judges moving an app back to its designated node (home).
//
// Nothing to do when it runs there. Refused when it has no home, runs
// nowhere (the scheduler places it home by itself when it can), or when
// home is not a node, not Ready, cordoned or lacks the app's required
// labels (as MigrateTargets refuses a target): an app is never stopped to
// be sent where it cannot start.
//
// A volume with no up-to-date replica on home (its copy there failed with
// the node and is being rebuilt, or it never had one) warns: the app would
// start there on copies read across the network while Longhorn rebuilds
// one on home. That is a warning and not a refusal for the reason the
// drain's are (DrainPreflight): the data is safe (the copies it runs on
// now stay), only the app's footing is weaker for a while; what loses data
// or strands an app is refused. A volume with no up-to-date copy anywhere
// is said too.
func ReturnHome(f ReturnHomeFacts) ReturnHomeVerdict {
	v := ReturnHomeVerdict{App: f.App, From: f.Node, Home: f.Home}
	switch {
	case f.Home == "":
		v.Refusals = append(v.Refusals, fmt.Sprintf("%s has no designated node: its layout names none, so it has no home to return to", f.App))
		return v
	case f.Node == f.Home:
		v.AlreadyHome = true
		return v
	case f.Node == "":
		v.Refusals = append(v.Refusals, fmt.Sprintf("%s is not placed on any node: the scheduler places it on %s by itself once it can; nothing runs to move", f.App, f.Home))
		return v
	}
	var home *Node
	for i := range f.Nodes {
		if f.Nodes[i].Name == f.Home {
			home = &f.Nodes[i]
		}
	}
	switch {
	case home == nil:
		v.Refusals = append(v.Refusals, fmt.Sprintf("%s, the designated node of %s, is not a node of the cluster (nodes: %s)", f.Home, f.App, nodeNames(f.Nodes)))
	case !home.Ready:
		v.Refusals = append(v.Refusals, fmt.Sprintf("%s, the designated node of %s, is not Ready: %s stays on %s until it is", f.Home, f.App, f.App, f.Node))
	case home.Cordoned:
		v.Refusals = append(v.Refusals, fmt.Sprintf("%s, the designated node of %s, is cordoned: uncordon it once its maintenance is over (sitecon uncordon %s)", f.Home, f.App, f.Home))
	default:
		if miss := unmet(f.Requires, home.Labels); miss != "" {
			v.Refusals = append(v.Refusals, fmt.Sprintf("%s, the designated node of %s, lacks %s, which the app requires", f.Home, f.App, miss))
		}
	}
	if v.Refused() {
		return v
	}
	for _, vol := range f.Volumes {
		var onHome, elsewhere []string
		rebuilding := false
		for _, r := range UpToDate(vol.Replicas) {
			if r.Spec.NodeID == f.Home {
				onHome = append(onHome, r.Name)
			} else if !slices.Contains(elsewhere, r.Spec.NodeID) {
				elsewhere = append(elsewhere, r.Spec.NodeID)
			}
		}
		for _, r := range vol.Replicas {
			if r.Spec.NodeID == f.Home && r.DeletionTimestamp == nil && r.Spec.HealthyAt == "" {
				rebuilding = true
			}
		}
		slices.Sort(elsewhere)
		switch {
		case len(onHome) > 0:
			v.Notes = append(v.Notes, fmt.Sprintf("volume %s: %s holds a healthy replica", vol.Name, f.Home))
		case len(elsewhere) == 0:
			v.Warnings = append(v.Warnings, fmt.Sprintf("volume %s has no up-to-date replica on any node: %s may not start on %s", vol.Name, f.App, f.Home))
		case rebuilding:
			v.Warnings = append(v.Warnings, fmt.Sprintf("%s holds no healthy replica of volume %s: its replica there is still rebuilding; %s would start on %s reading its data across the network from %s",
				f.Home, vol.Name, f.App, f.Home, strings.Join(elsewhere, ", ")))
		default:
			v.Warnings = append(v.Warnings, fmt.Sprintf("%s holds no healthy replica of volume %s: %s would start on %s reading its data across the network from %s until Longhorn rebuilds a copy there",
				f.Home, vol.Name, f.App, f.Home, strings.Join(elsewhere, ", ")))
		}
	}
	for _, c := range f.Unknown {
		v.Notes = append(v.Notes, fmt.Sprintf("claim %s: no Longhorn volume seen for it; its replicas are not checked", c))
	}
	return v
}
