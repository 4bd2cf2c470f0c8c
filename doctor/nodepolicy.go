package doctor

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
)

// checkNodePolicies: a worker's agent acts with its node's own identity,
// and what keeps that identity to its own node and its own apps are two
// ValidatingAdmissionPolicies a server's agent puts in force, and the
// record of designations the stats leader keeps, which the second reads.
// A policy removed by hand leaves the grant without the confinement: a
// worker could write any app's workload. An API server without the
// policy API gets no write grant (access.EnsureAgentAccess): its workers
// lay out no app. An error while a worker is in the cluster, a warning
// otherwise (the next worker to join would be unconfined, or idle).
func checkNodePolicies(ctx context.Context, env *Env) []Finding {
	if env.Clients == nil {
		return []Finding{{Severity: Warn, NotChecked: true, Summary: "not checked: no client of the cluster API to read the policies with"}}
	}
	var workers []string
	for _, n := range env.Data.Nodes {
		if !kube.IsServer(n) {
			workers = append(workers, n.Name)
		}
	}
	severity, whom := Warn, "a worker that joins"
	if len(workers) > 0 {
		severity, whom = Error, "the workers ("+strings.Join(workers, ", ")+")"
	}
	restart := "restart a server's agent (systemctl restart sitecon-agent): it puts the node policies in force at start"
	served, err := kube.PolicyAPIServed(env.Clients.Core)
	if err != nil {
		return []Finding{{Severity: Warn, NotChecked: true, Summary: "not checked: the API server's admission resources could not be listed: " + err.Error()}}
	}
	if !served {
		return []Finding{{Severity: severity, Summary: "this API server has no ValidatingAdmissionPolicy (Kubernetes before 1.30): " + whom + " get reads only and lay out no app (unconfined, a node's identity could write any app's workload)",
			Next: "run k3s 1.30 or later on the servers, " + oneServerAtATime}}
	}
	admission := env.Clients.Core.AdmissionregistrationV1()
	var out []Finding
	for _, name := range []string{kube.NodePolicyName, kube.NodeAppsPolicyName} {
		_, err := admission.ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			_, err = admission.ValidatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{})
		}
		switch {
		case err == nil:
		case apierrors.IsNotFound(err):
			out = append(out, Finding{Severity: severity, Subject: name,
				Summary:  fmt.Sprintf("the node policy %s is not in force: %s may write beyond its own node and apps", name, whom),
				Evidence: []string{err.Error()}, Next: restart})
		default:
			out = append(out, Finding{Severity: Warn, NotChecked: true, Subject: name,
				Summary: fmt.Sprintf("not checked: the node policy %s could not be read: %v", name, err),
				Next:    "run the doctor with the cluster's admin credential (on a server: sudo sitecon doctor)"})
		}
	}
	if _, ok := kube.DesignationsIn(env.Data); ok {
		return out
	}
	return append(out, Finding{Severity: severity, Subject: kube.DesignationsConfigMapName,
		Summary: "the record of whose app is whose (" + kube.DesignationsConfigMapName + ") is missing: until the stats leader writes it again, " + whom + " may write any app's workload",
		Next:    "the stats leader writes it within seconds; if it stays missing, check the leader's agent (" + IDStatsLeaderLost + ") or " + restart})
}
