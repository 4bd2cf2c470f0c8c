package access

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	rbacapply "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
)

// The technician's read-only account: a ServiceAccount the cluster itself
// holds to reading, so that read-only is the API server's word and not
// the client's (--readonly is sitecon's alone, and kubectl never knew
// it). It reads what the console, `sitecon status` and the doctor read,
// and writes nothing: no Secret (the cluster token is one), no VM
// console (a viewer types into the VM), no pod exec or port-forward.
// Its tokens are bound to the account: Revoke (a new account under the
// same name) ends every one handed out.

// ReadOnlyName names the account's ServiceAccount, ClusterRole and
// ClusterRoleBinding; the ServiceAccount lives in ReadOnlyNamespace.
const (
	ReadOnlyName      = "sitecon-readonly"
	ReadOnlyNamespace = "kube-system"
)

var readOnlyLabels = map[string]string{"app.kubernetes.io/managed-by": "sitecon", "sitecon.io/grant": "read-only"}

// ReadOnlyRules are what the account may read: the agents' reads
// (AgentRules), the logs the console and `sitecon logs` show, the events
// of the events screen, and the workloads behind the pods.
var ReadOnlyRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes", "pods", "pods/log", "persistentvolumeclaims", "persistentvolumes", "namespaces", "events"},
		Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"apps"}, Resources: []string{"deployments", "replicasets", "daemonsets", "statefulsets"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstances", "virtualmachineinstancereplicasets"},
		Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"longhorn.io"}, Resources: []string{"volumes", "replicas", "engines", "settings", "nodes", "supportbundles"}, Verbs: []string{"get", "list", "watch"}},
	// The doctor's SC-NODE-POLICY reads whether the node policies are in force.
	{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"},
		Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses", "volumeattachments"}, Verbs: []string{"get", "list", "watch"}},
}

// ReadOnlyAppNamespaceRules are what the account reads in the app
// namespace alone: sitecon's ConfigMaps (the cluster record, the etcd
// members' view, the designations) live there, and other namespaces'
// ConfigMaps are none of its business.
var ReadOnlyAppNamespaceRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
}

// EnsureReadOnlyAccount puts the account, its roles and their bindings in
// place (server-side apply: run again, it changes nothing).
func EnsureReadOnlyAccount(ctx context.Context, cs kubernetes.Interface) error {
	opts := metav1.ApplyOptions{FieldManager: "sitecon", Force: true}
	sa := corev1apply.ServiceAccount(ReadOnlyName, ReadOnlyNamespace).WithLabels(readOnlyLabels).
		// A pod cannot take the account's token: it is handed out by
		// TokenRequest alone.
		WithAutomountServiceAccountToken(false)
	if _, err := cs.CoreV1().ServiceAccounts(ReadOnlyNamespace).Apply(ctx, sa, opts); err != nil {
		return fmt.Errorf("read-only account: %w", err)
	}
	role := rbacapply.ClusterRole(ReadOnlyName).WithLabels(readOnlyLabels)
	for _, r := range ReadOnlyRules {
		role.WithRules(rbacapply.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).WithVerbs(r.Verbs...))
	}
	if _, err := cs.RbacV1().ClusterRoles().Apply(ctx, role, opts); err != nil {
		return fmt.Errorf("read-only role: %w", err)
	}
	binding := rbacapply.ClusterRoleBinding(ReadOnlyName).WithLabels(readOnlyLabels).
		WithRoleRef(rbacapply.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(ReadOnlyName)).
		WithSubjects(rbacapply.Subject().WithKind(rbacv1.ServiceAccountKind).WithName(ReadOnlyName).WithNamespace(ReadOnlyNamespace))
	if _, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, binding, opts); err != nil {
		return fmt.Errorf("read-only role binding: %w", err)
	}
	appRole := rbacapply.Role(ReadOnlyName, kube.AppNamespace).WithLabels(readOnlyLabels)
	for _, r := range ReadOnlyAppNamespaceRules {
		appRole.WithRules(rbacapply.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).WithVerbs(r.Verbs...))
	}
	if _, err := cs.RbacV1().Roles(kube.AppNamespace).Apply(ctx, appRole, opts); err != nil {
		return fmt.Errorf("read-only role in %s: %w", kube.AppNamespace, err)
	}
	appBinding := rbacapply.RoleBinding(ReadOnlyName, kube.AppNamespace).WithLabels(readOnlyLabels).
		WithRoleRef(rbacapply.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(ReadOnlyName)).
		WithSubjects(rbacapply.Subject().WithKind(rbacv1.ServiceAccountKind).WithName(ReadOnlyName).WithNamespace(ReadOnlyNamespace))
	if _, err := cs.RbacV1().RoleBindings(kube.AppNamespace).Apply(ctx, appBinding, opts); err != nil {
		return fmt.Errorf("read-only role binding in %s: %w", kube.AppNamespace, err)
	}
	return nil
}

// ReadOnlyToken is a token of the account, valid for ttl (the API server
// may shorten it: the expiry returned is the one it gave).
func ReadOnlyToken(ctx context.Context, cs kubernetes.Interface, ttl time.Duration) (string, time.Time, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(ttl.Seconds()))}}
	got, err := cs.CoreV1().ServiceAccounts(ReadOnlyNamespace).CreateToken(ctx, ReadOnlyName, req, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("a token of the read-only account: %w", err)
	}
	return got.Status.Token, got.Status.ExpirationTimestamp.Time, nil
}

// RevokeReadOnlyTokens ends every token of the account handed out so far:
// its tokens are bound to the ServiceAccount's UID, so the account is
// deleted (and made again by the next EnsureReadOnlyAccount).
func RevokeReadOnlyTokens(ctx context.Context, cs kubernetes.Interface) error {
	err := cs.CoreV1().ServiceAccounts(ReadOnlyNamespace).Delete(ctx, ReadOnlyName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("revoke the read-only account's tokens: %w", err)
	}
	return nil
}

// MayChangeNodes says whether the credential cs holds may cordon a node
// (patch nodes), the least of the console's actions: an identity that may
// not is a read-only one, and the console then offers no action.
func MayChangeNodes(ctx context.Context, cs kubernetes.Interface) (bool, error) {
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "patch", Resource: "nodes"}}}
	got, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return got.Status.Allowed, nil
}
