package kube

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// K3sControllerUser is the identity k3s gives every node's own controllers
// (the client certificate in <data-dir>/agent/k3scontroller.kubeconfig,
// which k3s writes on servers and agents alike). A worker node has no admin
// kubeconfig: its sitecon agent reaches the cluster with this one, and the
// servers grant it what the agent needs. Anyone who can read that file is
// root on a node of the cluster, the trust the agent already has.
const K3sControllerUser = "system:k3s-controller"

// AgentRoleName names the ClusterRole and ClusterRoleBinding of the agent's
// access.
const AgentRoleName = "sitecon-agent"

// AgentRules is what a sitecon agent does in the cluster: watch what the
// snapshot watches, lay out apps (workloads, claims, the storage class),
// keep the placement and cluster ConfigMaps, hold the stats-leader Lease,
// record Events, and force-delete a pod stuck on a lost node.
var AgentRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes", "pods", "events", "configmaps", "persistentvolumeclaims", "persistentvolumes", "namespaces"},
		Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps", "persistentvolumeclaims"}, Verbs: []string{"create", "update", "patch", "delete"}},
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"delete"}},
	{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
	{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstances", "virtualmachineinstancereplicasets"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	{APIGroups: []string{"longhorn.io"}, Resources: []string{"volumes", "replicas", "engines", "settings", "nodes"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
}

// EnsureAgentAccess grants the k3s controller identity the agent's rules
// (a ClusterRole and its binding), so the agents of worker nodes can run.
// Idempotent: it creates what is missing and puts the rules right.
func EnsureAgentAccess(ctx context.Context, cs kubernetes.Interface) error {
	labels := map[string]string{"app.kubernetes.io/managed-by": "sitecon"}
	roles := cs.RbacV1().ClusterRoles()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: AgentRoleName, Labels: labels}, Rules: AgentRules}
	if live, err := roles.Get(ctx, AgentRoleName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := roles.Create(ctx, role, metav1.CreateOptions{FieldManager: "sitecon"}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("agent ClusterRole: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("agent ClusterRole: %w", err)
	} else {
		live.Rules = AgentRules
		if _, err := roles.Update(ctx, live, metav1.UpdateOptions{FieldManager: "sitecon"}); err != nil {
			return fmt.Errorf("agent ClusterRole: %w", err)
		}
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: AgentRoleName, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AgentRoleName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: K3sControllerUser}},
	}
	bindings := cs.RbacV1().ClusterRoleBindings()
	if _, err := bindings.Get(ctx, AgentRoleName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{FieldManager: "sitecon"}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("agent ClusterRoleBinding: %w", err)
		}
	} else if err != nil {
		return fmt.Errorf("agent ClusterRoleBinding: %w", err)
	}
	return nil
}
