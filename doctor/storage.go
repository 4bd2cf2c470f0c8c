package doctor

import (
	"context"
	"fmt"
	"strings"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
)

// volumeFindings lists the volumes in robustness, with since when and
// where their replicas stand.
func volumeFindings(env *Env, robustness string, sev Severity) []Finding {
	if !env.Data.HasLonghorn {
		return nil
	}
	var out []Finding
	for _, v := range kube.Derive(env.Data, env.Now).Volumes {
		if v.Robustness != robustness {
			continue
		}
		f := Finding{Severity: sev, Subject: v.Label()}
		// The snapshot is fresh: a time it did not see happen is no
		// lower bound worth saying. Longhorn dates a degradation
		// (lastDegradedAt) but not a fault: the last replica failure is
		// when the volume lost its last healthy copy.
		at, exact := v.Since, v.SinceExact
		if !exact {
			at, exact = lastReplicaFailure(env.Data, v.Name)
		}
		f.Summary = fmt.Sprintf("volume %s is %s", v.Label(), robustness)
		if exact {
			f.Since = since(at)
			f.Summary += " for " + ago(env.Now, at)
		}
		healthy := 0
		var reps []string
		for _, r := range v.Replicas {
			s := r.Node + " " + r.State
			if r.State == kube.ReplicaHealthy {
				healthy++
			}
			if r.State == kube.ReplicaRebuilding && r.Progress >= 0 {
				s += fmt.Sprintf(" %d %%", r.Progress)
			}
			reps = append(reps, s)
		}
		f.Evidence = []string{fmt.Sprintf("%d of %d replicas healthy: %s", healthy, v.WantReplicas, strings.Join(reps, ", "))}
		if v.PVC != "" {
			f.Evidence = append(f.Evidence, "Longhorn volume "+v.Name)
		}
		out = append(out, f)
	}
	return out
}

func checkVolumesDegraded(_ context.Context, env *Env) []Finding {
	return volumeFindings(env, kube.RobustnessDegraded, Warn)
}

func checkVolumesFaulted(_ context.Context, env *Env) []Finding {
	return volumeFindings(env, kube.RobustnessFaulted, Error)
}

// checkReplicasUnschedulable lists the volumes whose Scheduled condition
// is False (Longhorn could not place a replica) with Longhorn's reason, and
// replicas that have no node.
func checkReplicasUnschedulable(_ context.Context, env *Env) []Finding {
	if !env.Data.HasLonghorn {
		return nil
	}
	unplaced := map[string]int{}
	for _, r := range env.Data.Replicas {
		if r.Spec.NodeID == "" && r.DeletionTimestamp == nil {
			unplaced[r.Spec.VolumeName]++
		}
	}
	var out []Finding
	for _, v := range env.Data.Volumes {
		label := v.Status.KubernetesStatus.PVCName
		if label == "" {
			label = v.Name
		}
		var cond *lhv1beta2.Condition
		for i := range v.Status.Conditions {
			if c := &v.Status.Conditions[i]; c.Type == lhv1beta2.VolumeConditionTypeScheduled && c.Status == lhv1beta2.ConditionStatusFalse {
				cond = c
			}
		}
		if cond == nil && unplaced[v.Name] == 0 {
			continue
		}
		f := Finding{Severity: Warn, Subject: label, Summary: "Longhorn cannot schedule a replica of volume " + label}
		if cond != nil {
			f.Evidence = append(f.Evidence, fmt.Sprintf("Scheduled=False %s: %s", cond.Reason, strings.TrimSpace(cond.Message)))
			if t, err := time.Parse(time.RFC3339, cond.LastTransitionTime); err == nil {
				f.Since = since(t)
				f.Summary += " for " + ago(env.Now, t)
			}
		}
		if n := unplaced[v.Name]; n > 0 {
			f.Evidence = append(f.Evidence, fmt.Sprintf("%d replica%s with no node", n, plural(n)))
		}
		f.Evidence = append(f.Evidence, fmt.Sprintf("wants %d replicas", v.Spec.NumberOfReplicas))
		out = append(out, f)
	}
	return out
}

// supportBundleManagerPrefix begins the name of the deployment Longhorn
// runs for each support bundle.
const supportBundleManagerPrefix = "longhorn-support-bundle-manager"

// checkSupportBundles lists Longhorn SupportBundle objects and support
// bundle manager deployments left in longhorn-system: while one is there
// Longhorn refuses to create volumes (lf-edge/eve #6230).
func checkSupportBundles(ctx context.Context, env *Env) []Finding {
	if !env.Data.HasLonghorn {
		return nil
	}
	var out []Finding
	bundles, err := env.Clients.Longhorn.LonghornV1beta2().SupportBundles(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []Finding{{NotChecked: true, Severity: Warn, Summary: "not checked: the support bundles could not be read", Evidence: []string{err.Error()}}}
	}
	for _, b := range bundles.Items {
		out = append(out, Finding{Severity: Warn, Subject: b.Name, Since: since(b.CreationTimestamp.Time),
			Summary:  fmt.Sprintf("Longhorn support bundle %s left for %s (state %q)", b.Name, ago(env.Now, b.CreationTimestamp.Time), b.Status.State),
			Evidence: []string{"supportbundles.longhorn.io " + kube.LonghornNamespace + "/" + b.Name},
			Next:     "kubectl -n " + kube.LonghornNamespace + " delete supportbundles.longhorn.io " + b.Name})
	}
	deps, err := env.Clients.Core.AppsV1().Deployments(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return append(out, Finding{NotChecked: true, Severity: Warn, Summary: "not checked: the deployments in " + kube.LonghornNamespace + " could not be read", Evidence: []string{err.Error()}})
	}
	for _, d := range deps.Items {
		if !strings.HasPrefix(d.Name, supportBundleManagerPrefix) {
			continue
		}
		out = append(out, Finding{Severity: Warn, Subject: d.Name, Since: since(d.CreationTimestamp.Time),
			Summary:  fmt.Sprintf("support bundle manager %s left running for %s", d.Name, ago(env.Now, d.CreationTimestamp.Time)),
			Evidence: []string{"deployment " + kube.LonghornNamespace + "/" + d.Name},
			Next:     "delete its SupportBundle (Longhorn then removes it), else: kubectl -n " + kube.LonghornNamespace + " delete deployment " + d.Name})
	}
	return out
}

// lastReplicaFailure is when the volume's most recent replica failure was
// recorded (the replica's failedAt); false when none is.
func lastReplicaFailure(d kube.Data, volume string) (time.Time, bool) {
	var last time.Time
	for _, r := range d.Replicas {
		if r.Spec.VolumeName != volume {
			continue
		}
		if t, err := time.Parse(time.RFC3339, r.Spec.FailedAt); err == nil && t.After(last) {
			last = t
		}
	}
	return last, !last.IsZero()
}
