package access

import (
	"errors"
	"slices"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sitecon/sitecon/kube"
)

// A node's own identity is told from a server's credential by what the
// API server authenticated, user and group together: a user name alone
// (a token file could name any user) or the group alone is not a node.
func TestNodeOfIdentity(t *testing.T) {
	for name, tc := range map[string]struct {
		user     authenticationv1.UserInfo
		wantNode string
		wantOK   bool
	}{
		"a worker's node identity":      {authenticationv1.UserInfo{Username: "system:node:node-d", Groups: []string{"system:nodes", "system:authenticated"}}, "node-d", true},
		"k3s's admin (a server)":        {authenticationv1.UserInfo{Username: "system:admin", Groups: []string{"system:masters", "system:authenticated"}}, "", false},
		"the shared k3s controller":     {authenticationv1.UserInfo{Username: "system:k3s-controller", Groups: []string{"system:authenticated"}}, "", false},
		"node name without the group":   {authenticationv1.UserInfo{Username: "system:node:node-d", Groups: []string{"system:authenticated"}}, "", false},
		"the group without a node name": {authenticationv1.UserInfo{Username: "someone", Groups: []string{"system:nodes"}}, "", false},
		"an empty node name":            {authenticationv1.UserInfo{Username: "system:node:", Groups: []string{"system:nodes"}}, "", false},
	} {
		t.Run(name, func(t *testing.T) {
			node, ok := NodeOfIdentity(tc.user)
			if node != tc.wantNode || ok != tc.wantOK {
				t.Errorf("NodeOfIdentity(%+v) = %q, %v; want %q, %v", tc.user, node, ok, tc.wantNode, tc.wantOK)
			}
		})
	}
	if got := NodeUser("node-d"); got != "system:node:node-d" {
		t.Errorf("NodeUser = %q", got)
	}
}

// The grant to the nodes' identities carries no write of cluster-wide
// state: no ConfigMap, Lease, VolumeAttachment, pod, Node, volume or RBAC
// write, cluster-wide or in the app namespace, and no claim is deleted.
func TestAgentRulesWriteNoClusterState(t *testing.T) {
	writes := map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true, "*": true}
	clusterState := map[string]bool{"configmaps": true, "leases": true, "volumeattachments": true, "pods": true, "nodes": true, "*": true,
		"persistentvolumes": true, "storageclasses": true,
		"clusterroles": true, "clusterrolebindings": true, "roles": true, "rolebindings": true,
		"validatingadmissionpolicies": true, "validatingadmissionpolicybindings": true}
	for set, rules := range map[string][]rbacv1.PolicyRule{"AgentRules": AgentRules, "AgentLayoutRules": AgentLayoutRules} {
		for _, r := range rules {
			for _, res := range r.Resources {
				for _, verb := range r.Verbs {
					if res == "persistentvolumeclaims" && (verb == "delete" || verb == "deletecollection" || verb == "*") {
						t.Errorf("%s lets a node's identity %s claims", set, verb)
					}
					// Sitecon's Longhorn classes are laid out by the node
					// that needs one; the node policy checks them.
					if writes[verb] && clusterState[res] && !(res == "storageclasses" && (verb == "create" || verb == "patch")) {
						t.Errorf("%s lets a node's identity %s %s", set, verb, res)
					}
				}
			}
		}
	}
}

// An API server that cannot take the node policy (no
// ValidatingAdmissionPolicy before Kubernetes 1.30: a real one of this
// project's version always can, hence the fake) gets no write grant for
// the nodes' identities: the confinement is what makes them safe to give
// (docs/SECURITY.md, gap 7). The reads stay, so workers' agents still see
// the cluster; a layout grant an earlier run left is taken back; and the
// caller learns the confinement is missing. An error that is not the API's
// absence by the server's discovery (a hiccup, a server still starting)
// changes no grant.
func TestEnsureAgentAccessWithoutPolicyAPI(t *testing.T) {
	cs := fake.NewClientset()
	// What a run with the policy in force left.
	if err := EnsureAgentAccess(t.Context(), cs); err != nil {
		t.Fatal(err)
	}
	absent := apierrors.NewNotFound(schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "validatingadmissionpolicies"}, kube.NodePolicyName)
	var policyErr error = absent
	cs.PrependReactor("patch", "validatingadmissionpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, policyErr
	})
	writes := func() []string {
		var out []string
		role, err := cs.RbacV1().ClusterRoles().Get(t.Context(), kube.AgentRoleName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range role.Rules {
			for _, v := range r.Verbs {
				if v != "get" && v != "list" && v != "watch" && !slices.Contains(r.Resources, "events") {
					out = append(out, v+" "+strings.Join(r.Resources, ","))
				}
			}
		}
		if _, err := cs.RbacV1().RoleBindings(kube.AppNamespace).Get(t.Context(), kube.AgentRoleName, metav1.GetOptions{}); err == nil {
			out = append(out, "the layout Role's binding")
		} else if !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return out
	}
	if w := writes(); len(w) == 0 {
		t.Fatal("with the policy in force the nodes have no write grant: the test sees nothing")
	}

	// The API server's discovery says whether it serves the policy API.
	served := func(policies bool) {
		list := &metav1.APIResourceList{GroupVersion: "admissionregistration.k8s.io/v1",
			APIResources: []metav1.APIResource{{Name: "validatingwebhookconfigurations"}}}
		if policies {
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: "validatingadmissionpolicies"})
		}
		cs.Resources = []*metav1.APIResourceList{list}
	}
	// Hiccups: the grants stay as they are. A NotFound from a server
	// whose discovery serves the policy API (one still starting) is one.
	served(true)
	for _, hiccup := range []error{apierrors.NewServiceUnavailable("etcd leader changed"), absent} {
		policyErr = hiccup
		if err := EnsureAgentAccess(t.Context(), cs); err == nil || errors.Is(err, ErrNodePolicy) {
			t.Fatalf("EnsureAgentAccess with the policy's write failing (%v): %v, want an error that is not ErrNodePolicy", hiccup, err)
		}
		if w := writes(); len(w) == 0 {
			t.Fatalf("a hiccup writing the policy (%v) took the grants back", hiccup)
		}
	}

	served(false)
	policyErr = absent
	err := EnsureAgentAccess(t.Context(), cs)
	if !errors.Is(err, ErrNodePolicy) {
		t.Fatalf("EnsureAgentAccess = %v, want ErrNodePolicy", err)
	}
	if w := writes(); len(w) != 0 {
		t.Errorf("without the policy the nodes' identities may still %v", w)
	}
	binding, err := cs.RbacV1().ClusterRoleBindings().Get(t.Context(), kube.AgentRoleName, metav1.GetOptions{})
	if err != nil || len(binding.Subjects) != 1 || binding.Subjects[0].Name != NodesGroup {
		t.Errorf("the read grant without the policy: %+v %v", binding, err)
	}
}
