package kube

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// PodRow is one pod as the console lists it.
type PodRow struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Phase     string    `json:"phase"`
	Ready     string    `json:"ready"`
	Restarts  int32     `json:"restarts"`
	Node      string    `json:"node"`
	Created   time.Time `json:"created"`
	// Healthy is false for a pod that is failed, or not ready and not done.
	Healthy bool `json:"healthy"`
}

// PodRows lists the pods of the namespaces sitecon watches over, sorted by
// namespace and name.
func PodRows(pods []*corev1.Pod) []PodRow {
	watched := map[string]bool{}
	for _, ns := range Namespaces {
		watched[ns] = true
	}
	out := make([]PodRow, 0, len(pods))
	for _, p := range pods {
		if !watched[p.Namespace] {
			continue
		}
		ready, restarts := 0, int32(0)
		for _, c := range p.Status.ContainerStatuses {
			if c.Ready {
				ready++
			}
			restarts += c.RestartCount
		}
		phase := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		out = append(out, PodRow{
			Namespace: p.Namespace,
			Name:      p.Name,
			Phase:     phase,
			Ready:     fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers)),
			Restarts:  restarts,
			Node:      p.Spec.NodeName,
			Created:   p.CreationTimestamp.Time,
			Healthy:   p.Status.Phase == corev1.PodSucceeded || (PodReady(p) && p.DeletionTimestamp == nil),
		})
	}
	slices.SortFunc(out, func(a, b PodRow) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// EventRow is one Kubernetes event as the timeline shows it.
type EventRow struct {
	Time      time.Time `json:"time"`
	Type      string    `json:"type"`
	Reason    string    `json:"reason"`
	Object    string    `json:"object"`
	Namespace string    `json:"namespace"`
	// Name is the Event object's own name: with Namespace, what identifies
	// the row while newer events arrive above it.
	Name    string `json:"name"`
	Message string `json:"message"`
	Count   int32  `json:"count"`
	// First is when the event was first seen (its Time is the last);
	// zero when the event does not say.
	First time.Time `json:"first,omitempty"`
}

// EventRows lists events newest first, at most limit of them.
func EventRows(events []*corev1.Event, limit int) []EventRow {
	out := make([]EventRow, 0, len(events))
	for _, e := range events {
		t := e.LastTimestamp.Time
		if t.IsZero() {
			t = e.EventTime.Time
		}
		if t.IsZero() {
			t = e.CreationTimestamp.Time
		}
		first := e.FirstTimestamp.Time
		if first.IsZero() {
			first = e.EventTime.Time
		}
		out = append(out, EventRow{
			First: first,
			Time:  t, Type: e.Type, Reason: e.Reason, Namespace: e.Namespace, Name: e.Name, Message: e.Message, Count: max(e.Count, 1),
			Object: fmt.Sprintf("%s/%s", e.InvolvedObject.Kind, e.InvolvedObject.Name),
		})
	}
	slices.SortFunc(out, func(a, b EventRow) int { return cmp.Or(b.Time.Compare(a.Time), cmp.Compare(a.Object, b.Object)) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// affinityTarget reads the node an app is placed on by its node affinity on
// kubernetes.io/hostname: required means pinned, preferred means it may move
// (auto-migration).
func affinityTarget(aff *corev1.Affinity) (node string, mode string) {
	if aff == nil || aff.NodeAffinity == nil {
		return "", ""
	}
	na := aff.NodeAffinity
	if req := na.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
		for _, term := range req.NodeSelectorTerms {
			if n := hostnameIn(term); n != "" {
				return n, AppModePinned
			}
		}
	}
	best := int32(-1)
	for _, p := range na.PreferredDuringSchedulingIgnoredDuringExecution {
		if n := hostnameIn(p.Preference); n != "" && p.Weight > best {
			node, mode, best = n, AppModeAuto, p.Weight
		}
	}
	return node, mode
}

// nodeRequirements are the required node-affinity expressions other than the
// node name (first term only: sitecon writes one).
func nodeRequirements(aff *corev1.Affinity) []corev1.NodeSelectorRequirement {
	if aff == nil || aff.NodeAffinity == nil || aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	terms := aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return nil
	}
	var out []corev1.NodeSelectorRequirement
	for _, e := range terms[0].MatchExpressions {
		if e.Key != corev1.LabelHostname {
			out = append(out, e)
		}
	}
	return out
}

func hostnameIn(term corev1.NodeSelectorTerm) string {
	for _, e := range term.MatchExpressions {
		if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
			return e.Values[0]
		}
	}
	return ""
}

// App placement modes.
const (
	AppModeAuto   = "auto"
	AppModePinned = "pinned"
)
