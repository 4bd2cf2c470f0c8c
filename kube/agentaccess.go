package kube

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacapply "k8s.io/client-go/applyconfigurations/rbac/v1"
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
// record Events, and force-delete a pod stuck on a lost node and release
// its volumes' attachments there.
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
	// The failover guard, after a force-delete, deletes the VolumeAttachments
	// of the volumes it judged safe on the lost node (agent.AttachmentsToRelease).
	{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"get", "list", "delete"}},
}

// EnsureAgentAccess grants the k3s controller identity the agent's rules
// (a ClusterRole and its binding), so the agents of worker nodes can run.
// Server-side apply makes it idempotent and puts drifted rules right.
func EnsureAgentAccess(ctx context.Context, cs kubernetes.Interface) error {
	labels := map[string]string{"app.kubernetes.io/managed-by": "sitecon"}
	opts := metav1.ApplyOptions{FieldManager: "sitecon", Force: true}
	role := rbacapply.ClusterRole(AgentRoleName).WithLabels(labels)
	for _, r := range AgentRules {
		role.WithRules(rbacapply.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).WithVerbs(r.Verbs...))
	}
	if _, err := cs.RbacV1().ClusterRoles().Apply(ctx, role, opts); err != nil {
		return fmt.Errorf("agent ClusterRole: %w", err)
	}
	binding := rbacapply.ClusterRoleBinding(AgentRoleName).WithLabels(labels).
		WithRoleRef(rbacapply.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(AgentRoleName)).
		WithSubjects(rbacapply.Subject().WithAPIGroup(rbacv1.GroupName).WithKind(rbacv1.UserKind).WithName(K3sControllerUser))
	if _, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, binding, opts); err != nil {
		return fmt.Errorf("agent ClusterRoleBinding: %w", err)
	}
	return nil
}
