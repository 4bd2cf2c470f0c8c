package safety

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// MigrateTarget is a node an app could move to, or why not.
type MigrateTarget struct {
	Node     string `json:"node"`
	Eligible bool   `json:"eligible"`
	Why      string `json:"why,omitempty"`
}

// MigrateTargets lists every node with whether an app running on appNode
// (empty: nowhere yet) and requiring requires may move there: Ready,
// schedulable, meets the app's node requirements, not where it is.
func MigrateTargets(appNode string, requires []corev1.NodeSelectorRequirement, nodes []Node) []MigrateTarget {
	var out []MigrateTarget
	for _, n := range nodes {
		t := MigrateTarget{Node: n.Name}
		switch {
		case n.Name == appNode:
			t.Why = "the app runs here"
		case !n.Ready:
			t.Why = "not Ready"
		case n.Cordoned:
			t.Why = "cordoned"
		default:
			if miss := unmet(requires, n.Labels); miss != "" {
				t.Why = "lacks " + miss
			} else {
				t.Eligible = true
			}
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b MigrateTarget) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// unmet names the first requirement the labels do not meet.
func unmet(reqs []corev1.NodeSelectorRequirement, labels map[string]string) string {
	for _, r := range reqs {
		v, has := labels[r.Key]
		ok := false
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			ok = has && slices.Contains(r.Values, v)
		case corev1.NodeSelectorOpNotIn:
			ok = !has || !slices.Contains(r.Values, v)
		case corev1.NodeSelectorOpExists:
			ok = has
		case corev1.NodeSelectorOpDoesNotExist:
			ok = !has
		default:
			ok = true // Gt/Lt: left to the scheduler
		}
		if !ok {
			return fmt.Sprintf("%s %s %s", r.Key, strings.ToLower(string(r.Operator)), strings.Join(r.Values, ","))
		}
	}
	return ""
}
