package doctor

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/kubetest"
)

// An API server without ValidatingAdmissionPolicy (Kubernetes before
// 1.30) confines no worker: an error naming the workers, with what to
// run instead. The fake clientset stands in for such a server, which
// sitebox (1.34) cannot be; TestDoctorSaysTheNodePolicies holds the rest
// against the real one.
func TestNodePoliciesWithoutThePolicyAPI(t *testing.T) {
	cs := fake.NewClientset()
	cs.Resources = []*metav1.APIResourceList{{GroupVersion: "admissionregistration.k8s.io/v1",
		APIResources: []metav1.APIResource{{Name: "validatingwebhookconfigurations"}, {Name: "mutatingwebhookconfigurations"}}}}
	nodes := []*corev1.Node{
		kubetest.Node("node-a", "10.0.0.1", corev1.ConditionTrue, kubetest.T0, kubetest.ServerLabels),
		kubetest.Node("node-c", "10.0.0.3", corev1.ConditionTrue, kubetest.T0, nil),
	}
	fs := checkNodePolicies(context.Background(), &Env{Data: kube.Data{Nodes: nodes}, Clients: &kube.Clients{Core: cs}, Now: kubetest.T0})
	if len(fs) != 1 || fs[0].Severity != Error || fs[0].NotChecked ||
		!strings.Contains(fs[0].Summary, "no ValidatingAdmissionPolicy") || !strings.Contains(fs[0].Summary, "node-c") {
		t.Errorf("without the policy API and with a worker: %+v, want one error naming node-c", fs)
	}
	// Only servers: a warning (the next worker to join is not confined).
	fs = checkNodePolicies(context.Background(), &Env{Data: kube.Data{Nodes: nodes[:1]}, Clients: &kube.Clients{Core: cs}, Now: kubetest.T0})
	if len(fs) != 1 || fs[0].Severity != Warn {
		t.Errorf("without the policy API, servers only: %+v, want one warning", fs)
	}
	// No client: not checked, never ok.
	if fs := checkNodePolicies(context.Background(), &Env{Data: kube.Data{Nodes: nodes}}); len(fs) != 1 || !fs[0].NotChecked {
		t.Errorf("with no client: %+v, want not checked", fs)
	}
}

// The apps policy's binding and the record missing, on a cluster with a
// worker: an error for each, naming the worker. A fake stands in for the
// API server here: removing the apps policy's binding and its record on
// sitebox's, then making them again, leaves kube-apiserver 1.34 unable to
// resolve the record for the tests after (kubernetes/kubernetes#133827).
func TestNodePoliciesMissing(t *testing.T) {
	cs := fake.NewClientset(
		&admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: kube.NodePolicyName}},
		&admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: kube.NodePolicyName}},
		&admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: kube.NodeAppsPolicyName}},
	)
	cs.Resources = []*metav1.APIResourceList{{GroupVersion: "admissionregistration.k8s.io/v1",
		APIResources: []metav1.APIResource{{Name: "validatingadmissionpolicies"}, {Name: "validatingadmissionpolicybindings"}}}}
	nodes := []*corev1.Node{
		kubetest.Node("node-a", "10.0.0.1", corev1.ConditionTrue, kubetest.T0, kubetest.ServerLabels),
		kubetest.Node("node-c", "10.0.0.3", corev1.ConditionTrue, kubetest.T0, nil),
	}
	fs := checkNodePolicies(context.Background(), &Env{Data: kube.Data{Nodes: nodes}, Clients: &kube.Clients{Core: cs}, Now: kubetest.T0})
	got := map[string]Finding{}
	for _, f := range fs {
		got[f.Subject] = f
	}
	for _, subject := range []string{kube.NodeAppsPolicyName, kube.DesignationsConfigMapName} {
		if f := got[subject]; f.Severity != Error || !strings.Contains(f.Summary, "node-c") {
			t.Errorf("%s missing with node-c a worker: %+v, want an error naming the worker", subject, f)
		}
	}
	if len(fs) != 2 {
		t.Errorf("findings: %+v, want the two missing", fs)
	}
	// All there: nothing to say (the report's "ok").
	record := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kube.DesignationsConfigMapName, Namespace: kube.AppNamespace}}
	_, _ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(context.Background(),
		&admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: kube.NodeAppsPolicyName}}, metav1.CreateOptions{})
	if fs := checkNodePolicies(context.Background(), &Env{Data: kube.Data{Nodes: nodes, ConfigMaps: []*corev1.ConfigMap{record}}, Clients: &kube.Clients{Core: cs}}); len(fs) != 0 {
		t.Errorf("with everything in force: %+v, want nothing", fs)
	}
}
