package doctor

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sitecon/sitecon/kube"
)

// checkFenceSettings: a lost node's auto apps move only when that node
// fences with the stats leader's failover timeout (the leader holds the
// failover otherwise, and says so only once a node is lost). Said here
// beforehand: each node whose agent never said how it fences, runs
// without fencing, or fences with another timeout than most nodes.
func checkFenceSettings(_ context.Context, env *Env) []Finding {
	if len(env.Data.Nodes) == 0 {
		return []Finding{{NotChecked: true, Severity: Warn, Summary: "not checked: no node was read"}}
	}
	settings := map[string]kube.FenceSettings{}
	timeouts := map[time.Duration]int{}
	var out []Finding
	for _, n := range env.Data.Nodes {
		s, problem := kube.NodeFenceSettings(n)
		switch {
		case problem != "":
			out = append(out, Finding{Severity: Warn, Subject: n.Name, NotChecked: true,
				Summary:  fmt.Sprintf("not checked on %s: %s; a failover of its apps is held", n.Name, problem),
				Evidence: []string{"annotation " + kube.AnnotationFence + ": " + n.Annotations[kube.AnnotationFence]},
				Next:     "start sitecon's agent there (systemctl status sitecon-agent); it writes how it fences on its Node"})
		case !s.Fencing:
			out = append(out, Finding{Severity: Warn, Subject: n.Name,
				Summary:  n.Name + "'s agent runs without fencing (--no-fence): a failover of its apps is held, as nothing stops them there when it is cut off",
				Evidence: []string{kube.AnnotationFence + ": " + s.String()}})
		default:
			settings[n.Name] = s
			timeouts[s.FailoverTimeout]++
		}
	}
	// The cluster's timeout is its record's, which the stats leader times
	// by; a record without one: the one most fencing nodes run with (the
	// longest among equals: the safer guess of what the leader runs).
	common, published, problem := kube.ClusterFailoverTimeout(env.Data)
	if !published {
		for _, t := range slices.Sorted(maps.Keys(timeouts)) {
			if timeouts[t] >= timeouts[common] {
				common = t
			}
		}
	}
	if problem != "" {
		// The leader then times by its own flag: most nodes' is the
		// value to put back.
		fix := common
		if fix == 0 {
			fix = 28 * time.Second
		}
		out = append(out, Finding{Severity: Warn, NotChecked: true, Summary: "not checked against the cluster's failover timeout: " + problem + "; the leader times by its own --failover-timeout",
			Next: "put the cluster's timeout back, the one the nodes run: kubectl -n " + kube.AppNamespace + " edit configmap " + kube.ClusterConfigMapName + " (" + kube.ClusterKeyFailoverTimeout + ": " + fix.String() + ")"})
	}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		s := settings[name]
		switch {
		case s.FailoverTimeout == common:
		case published:
			out = append(out, Finding{Severity: Warn, Subject: name,
				Summary: fmt.Sprintf("%s fences with --failover-timeout %s, not the cluster's %s: a failover of its apps is held, as its fence could come after the leader's force-delete",
					name, s.FailoverTimeout, common),
				Evidence: []string{kube.AnnotationFence + ": " + s.String(), kube.ClusterConfigMapName + " " + kube.ClusterKeyFailoverTimeout + ": " + common.String()}})
		default:
			out = append(out, Finding{Severity: Warn, Subject: name,
				Summary: fmt.Sprintf("%s fences with --failover-timeout %s, the other nodes with %s: a leader with another timeout than a lost node's holds its failover",
					name, s.FailoverTimeout, common),
				Evidence: []string{kube.AnnotationFence + ": " + s.String(), "the cluster record publishes no " + kube.ClusterKeyFailoverTimeout}})
		}
	}
	return out
}
