package doctor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
)

// checkAppsAway lists the apps running on another node than the one their
// layout designates (after a failover, or while their node is away), since
// when, and whether the designated node could take them back.
func checkAppsAway(_ context.Context, env *Env) []Finding {
	nodes := map[string]*corev1.Node{}
	for _, n := range env.Data.Nodes {
		nodes[n.Name] = n
	}
	var out []Finding
	for _, a := range kube.Derive(env.Data, env.Now).Apps {
		if !a.Away() {
			continue
		}
		f := Finding{Severity: Warn, Subject: a.Name, Summary: fmt.Sprintf("app %s runs on %s, not on its designated node %s", a.Name, a.Node, a.DesignatedNode),
			Evidence: []string{fmt.Sprintf("%s app (%s), %s %s, phase %s", a.Kind, a.Mode, kindObject(a.Kind), a.Object, a.Phase)}}
		t := a.AwaySince() // what the overview and sitecon status say
		if a.LastMove != nil && a.LastMove.To == a.Node {
			f.Evidence = append(f.Evidence, fmt.Sprintf("moved from %s to %s", a.LastMove.From, a.LastMove.To))
		}
		if !t.IsZero() {
			f.Since = since(t)
			f.Summary += " for " + ago(env.Now, t)
		}
		switch home := nodes[a.DesignatedNode]; {
		case home == nil:
			f.Evidence = append(f.Evidence, a.DesignatedNode+" is not a node of the cluster")
			f.Next = "the designated node is gone: the controller's config must name another"
		case !kube.NodeIsReady(home):
			f.Evidence = append(f.Evidence, a.DesignatedNode+" is not Ready")
			f.Next = "bring " + a.DesignatedNode + " back; then sitecon return-home " + a.Name
		case home.Spec.Unschedulable:
			f.Evidence = append(f.Evidence, a.DesignatedNode+" is cordoned")
			f.Next = "uncordon " + a.DesignatedNode + " when its maintenance is over; then sitecon return-home " + a.Name
		default:
			f.Evidence = append(f.Evidence, a.DesignatedNode+" is Ready")
			f.Next = "return it home: sitecon return-home " + a.Name + " (h on the console's apps screen)"
		}
		out = append(out, f)
	}
	return out
}

func kindObject(kind string) string {
	if kind == kube.AppKindVM {
		return "VMI"
	}
	return "pod"
}

// checkAppsNotRunning lists the apps placed on a node but not running
// (not ready), in the words the console's alert and sitecon status use:
// on a lost node an app is not known to run, an error; otherwise a
// warning. Those the scheduler has not placed are SC-APP-PENDING's.
func checkAppsNotRunning(_ context.Context, env *Env) []Finding {
	st := kube.Derive(env.Data, env.Now)
	var out []Finding
	for _, a := range st.Apps {
		if a.Ready || a.Phase == "Terminating" || a.Unscheduled != nil || a.Phase == "Pending" || a.Node == "" {
			continue
		}
		f := Finding{Severity: Warn, Subject: a.Name, Summary: a.NotRunningLine(),
			Evidence: []string{fmt.Sprintf("%s app (%s), %s %s on %s, phase %s", a.Kind, a.Mode, kindObject(a.Kind), a.Object, a.Node, a.Phase)}}
		switch lost := a.NodeLost || st.NodeLost(a.Node); {
		case lost && a.Mode == kube.AppModePinned:
			f.Severity = Error
			f.Evidence = append(f.Evidence, "pinned app "+a.Name+" waits for its node "+a.Node)
			f.Next = "bring " + a.Node + " back, or migrate it: sitecon migrate " + a.Name + " NODE"
		case lost:
			f.Severity = Error
			f.Evidence = append(f.Evidence, a.Node+" is lost: the failover guard moves the app once the node's copy has stopped (the console's apps screen shows its verdict)")
			f.Next = "wait for the failover; if it is held, power " + a.Node + " off or confirm it is off"
		}
		out = append(out, f)
	}
	return out
}

// checkAppsPending lists the apps' pods (VM launchers included) that the
// scheduler has not placed, with its reason: the PodScheduled condition's
// message ("0/3 nodes are available: ...").
func checkAppsPending(_ context.Context, env *Env) []Finding {
	var out []Finding
	for _, p := range env.Data.Pods {
		if p.Namespace != kube.AppNamespace || p.Status.Phase != corev1.PodPending || p.DeletionTimestamp != nil || p.Spec.NodeName != "" {
			continue
		}
		name := p.Labels[kube.LabelAppName]
		if name == "" {
			name = p.Name
		}
		f := Finding{Severity: Warn, Subject: name, Summary: fmt.Sprintf("app %s is Pending: no node was found for pod %s", name, p.Name)}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				f.Since = since(c.LastTransitionTime.Time)
				f.Summary = fmt.Sprintf("app %s is Pending for %s: the scheduler finds no node", name, ago(env.Now, c.LastTransitionTime.Time))
				f.Evidence = append(f.Evidence, fmt.Sprintf("%s: %s", c.Reason, c.Message))
				if env.Now.Sub(c.LastTransitionTime.Time) < kube.UnschedulableAfter {
					// As the console's alert: seconds into it, the
					// scheduler tries again; not yet a problem.
					f.Severity = Info
					f.Summary += fmt.Sprintf(" (judged after %s: the scheduler tries again)", kube.UnschedulableAfter)
				}
			}
		}
		if len(f.Evidence) == 0 {
			f.Since = since(p.CreationTimestamp.Time)
			f.Evidence = append(f.Evidence, "the scheduler has not said why yet (no PodScheduled condition)")
		}
		out = append(out, f)
	}
	return out
}

// checkOverrides judges every entry of the on-site placement ConfigMap: one
// the agents cannot read, one for an app the cluster does not run, one
// naming a node that is not in the cluster, and one the app's layout no
// longer follows (its config moved on since the move) no longer applies.
func checkOverrides(_ context.Context, env *Env) []Finding {
	var cm *corev1.ConfigMap
	for _, c := range env.Data.ConfigMaps {
		if c.Namespace == kube.AppNamespace && c.Name == kube.PlacementConfigMapName {
			cm = c
		}
	}
	if cm == nil {
		return nil
	}
	byUUID := map[string]*corev1.Node{}
	for _, n := range env.Data.Nodes {
		if u := n.Labels[kube.LabelNodeUUID]; u != "" {
			byUUID[strings.ToLower(u)] = n
		}
	}
	apps := map[string]kube.AppStatus{}
	for _, a := range kube.Derive(env.Data, env.Now).Apps {
		if a.UUID != "" {
			apps[strings.ToLower(a.UUID)] = a
		}
	}
	where := "entry " + kube.PlacementConfigMapName + "/"
	var out []Finding
	for _, key := range slices.Sorted(maps.Keys(cm.Data)) {
		raw := cm.Data[key]
		o, err := kube.ParseOverride(raw) // as the agents read it
		if err != nil {
			out = append(out, Finding{Severity: Error, Subject: key, Summary: "placement override for " + key + " is not usable: the agents ignore it",
				Evidence: []string{fmt.Sprintf("%s%s = %q", where, key, raw)},
				Next:     "remove the entry, then move the app again with sitecon migrate"})
			continue
		}
		target := o.Node
		if target == "" {
			target = o.NodeUUID
		}
		ev := []string{fmt.Sprintf("%s%s: move to %s by %s at %s", where, key, target, o.By, o.At.UTC().Format("2006-01-02 15:04Z"))}
		node := byUUID[strings.ToLower(o.NodeUUID)]
		app, running := apps[strings.ToLower(key)]
		f := Finding{Severity: Warn, Subject: key, Evidence: ev, Since: since(o.At)}
		switch {
		case node == nil:
			f.Summary = fmt.Sprintf("placement override for %s names no node of the cluster (UUID %s)", key, o.NodeUUID)
		case !running:
			f.Severity = Info
			f.Summary = fmt.Sprintf("placement override for %s names an app the cluster does not run", key)
		case app.DesignatedNode != "" && app.DesignatedNode != node.Name:
			f.Subject = app.Name
			f.Summary = fmt.Sprintf("placement override of %s to %s no longer applies: its layout designates %s", app.Name, node.Name, app.DesignatedNode)
			f.Evidence = append(f.Evidence, fmt.Sprintf("made against designated_node_id %s (config version %d); the config has named another node since", o.ConfigDNId, o.ConfigVersion))
		default:
			continue
		}
		out = append(out, f)
	}
	return out
}
