package kube

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// PolicyAPIServed says whether the API server serves
// ValidatingAdmissionPolicy (Kubernetes 1.30 and later), by its discovery:
// what confines the nodes' identities (kube/access) and what the doctor
// checks (SC-NODE-POLICY).
func PolicyAPIServed(cs kubernetes.Interface) (bool, error) {
	served, err := cs.Discovery().ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(served.APIResources, func(r metav1.APIResource) bool { return r.Name == "validatingadmissionpolicies" }), nil
}
