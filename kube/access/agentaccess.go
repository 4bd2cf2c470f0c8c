package access

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionapply "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	rbacapply "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/kube"
)

// Who the agents are and what each may do.
//
// Every node's agent reaches the cluster with a credential only that node
// holds, and the cluster decides by the credential, never by what a node
// says of itself (its config, or a label its kubelet could set):
//
//   - A server's agent uses k3s's admin kubeconfig (K3sKubeconfig), which
//     only a server has: it carries the etcd data and the cluster's CA keys,
//     so it is trusted with the cluster anyway. It alone writes the
//     cluster-wide state: the etcd member list, the cluster record, the
//     placement overrides, the stats-leader Lease (only servers stand), a
//     force-delete of a pod on a lost node and the release of its volume
//     attachments.
//   - A worker's agent uses its node's own identity, the kubelet client
//     certificate k3s issues each node (<data-dir>/agent/kubelet.kubeconfig:
//     user system:node:<name>, group system:nodes; see NodeUser). The
//     servers grant that group what a worker's agent needs (AgentRules,
//     AgentLayoutRules) and no more: it reads what the agent watches, lays
//     out in the app namespace the apps it is the designated node of, and
//     writes no ConfigMap, no Lease, no VolumeAttachment, no claim (the
//     leading server makes its volumes' claims: NodeRestriction admits
//     none from a node).
//   - The ValidatingAdmissionPolicy NodePolicyName narrows the group's
//     writes to its own node, as NodeRestriction does for kubelets (k3s
//     enables NodeRestriction; the policy does not rely on it): a node
//     deletes only pods bound to itself; lays out only workloads whose
//     node affinity names itself and that ask for no privilege on the host
//     (privileged or added capabilities, host namespaces or paths; for a
//     VM, the host's disks or devices); creates only sitecon's Longhorn
//     classes, as named; writes no sitecon ConfigMap even if some other
//     grant allowed it; and neither changes the node-uuid label of its Node
//     (apps are designated by it, and NodeRestriction lets a kubelet set
//     such labels) nor deletes its Node to register again under another.
//   - The ValidatingAdmissionPolicy NodeAppsPolicyName narrows its layouts
//     to its own apps, as the servers record them (designations.go).
//
// Until a server has granted it, a worker's agent reads nothing and retries.
// The k3s controller identity (system:k3s-controller), which every node
// shares and which the agents used before, is granted nothing.

// NodesGroup is the group of every node's own identity.
const NodesGroup = "system:nodes"

// nodeUserPrefix starts a node identity's user name: system:node:<name>.
const nodeUserPrefix = "system:node:"

// NodeUser is the user name of node's own identity.
func NodeUser(node string) string { return nodeUserPrefix + node }

// NodeOfIdentity is the node an identity belongs to: its name and true for
// a node's own identity (system:node:<name> in group system:nodes), false
// for any other (a server's admin credential).
func NodeOfIdentity(user authenticationv1.UserInfo) (string, bool) {
	name, ok := strings.CutPrefix(user.Username, nodeUserPrefix)
	if !ok || name == "" {
		return "", false
	}
	for _, g := range user.Groups {
		if g == NodesGroup {
			return name, true
		}
	}
	return "", false
}

// WhoAmI is the identity the API server sees behind cs (a SelfSubjectReview,
// which every authenticated user may make).
func WhoAmI(ctx context.Context, cs kubernetes.Interface) (authenticationv1.UserInfo, error) {
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, fmt.Errorf("who am I: %w", err)
	}
	return r.Status.UserInfo, nil
}

// ErrNodePolicy: the node policy could not be put in force (an API server
// without ValidatingAdmissionPolicy, GA since Kubernetes 1.30), although
// the grants are in place: the workers' agents run, their writes in the
// app namespace not confined to their own nodes.
var ErrNodePolicy = errors.New("the node policy " + kube.NodePolicyName + " is not in force")

// AgentRules is what a worker's agent may do cluster-wide: watch what the
// snapshot watches, record Events, and lay out sitecon's Longhorn storage
// classes (NodePolicyName checks them).
var AgentRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes", "pods", "configmaps", "persistentvolumeclaims", "persistentvolumes", "namespaces"},
		Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch"}},
	// A drain request's drain reads each DaemonSet whose pod it leaves
	// (k8s.io/kubectl/pkg/drain): its node's own pods it evicts, as its
	// kubelet may.
	{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"}},
	{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstances", "virtualmachineinstancereplicasets"},
		Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"longhorn.io"}, Resources: []string{"volumes", "replicas", "engines", "settings", "nodes"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses"}, Verbs: []string{"get", "list", "watch", "create", "patch"}},
	{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"volumeattachments"}, Verbs: []string{"get", "list", "watch"}},
	// No VM console here: each node's, by name (GrantNodeConsoles).
}

// AgentLayoutRules is what a worker's agent may write in the app namespace:
// the workloads of the apps it is the designated node of, and the removal
// of a workload that has no place there any more. No claim: Kubernetes'
// NodeRestriction admits none from a node's identity (only a claim's
// status), so the stats leader, a server, makes a worker's volumes'
// claims (apps.Controller's claimMaker); and the agent never deletes one
// (a volume's data outlives its app).
var AgentLayoutRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"create", "update", "patch", "delete"}},
	{APIGroups: []string{"kubevirt.io"}, Resources: []string{"virtualmachineinstances", "virtualmachineinstancereplicasets"},
		Verbs: []string{"create", "update", "patch", "delete"}},
}

// nodePolicyValidations are the checks of NodePolicyName, in CEL over the
// request. variables.node is the requesting node's name; variables.podSpec
// the pod (or VMI) spec of a workload.
var nodePolicyValidations = []struct{ expr, msg string }{
	{`request.resource.resource != 'configmaps' || request.namespace != '` + kube.AppNamespace + `' || !request.name.startsWith('sitecon-')`,
		"a node's identity writes no sitecon ConfigMap (cluster-wide state is written by servers)"},
	{`request.resource.resource != 'pods' || (oldObject != null && has(oldObject.spec.nodeName) && oldObject.spec.nodeName == variables.node)`,
		"a node's identity deletes only pods bound to its own node"},
	{`request.resource.resource != 'nodes' || request.operation != 'DELETE'`,
		"a node's identity deletes no Node (a node re-registering could claim another node's UUID)"},
	{`request.resource.resource != 'nodes' || request.operation != 'UPDATE' || ` +
		`(has(oldObject.metadata.labels) && '` + kube.LabelNodeUUID + `' in oldObject.metadata.labels) == (has(object.metadata.labels) && '` + kube.LabelNodeUUID + `' in object.metadata.labels) && ` +
		`(!has(object.metadata.labels) || !('` + kube.LabelNodeUUID + `' in object.metadata.labels) || object.metadata.labels['` + kube.LabelNodeUUID + `'] == oldObject.metadata.labels['` + kube.LabelNodeUUID + `'])`,
		"a node's identity does not change its Node's " + kube.LabelNodeUUID + " label (apps are designated to nodes by it)"},
	{`request.resource.resource != 'storageclasses' || (has(object.parameters) && 'numberOfReplicas' in object.parameters && object.metadata.name == 'sitecon-longhorn-r' + object.parameters.numberOfReplicas)`,
		"a node's identity creates only sitecon's Longhorn classes, as named"},
	{`!variables.workload || (!has(variables.podSpec.nodeName) || variables.podSpec.nodeName == variables.node) && ` +
		`(!has(variables.podSpec.nodeSelector) || !('kubernetes.io/hostname' in variables.podSpec.nodeSelector) || variables.podSpec.nodeSelector['kubernetes.io/hostname'] == variables.node)`,
		"a node's identity lays out workloads for its own node only"},
	{`!variables.workload || !has(variables.podSpec.affinity) || !has(variables.podSpec.affinity.nodeAffinity) || ` +
		`!has(variables.podSpec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution) || ` +
		`variables.podSpec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.all(t, ` +
		`(!has(t.matchExpressions) || t.matchExpressions.all(e, e.key != 'kubernetes.io/hostname' || (e.operator == 'In' && has(e.values) && e.values.all(v, v == variables.node)))) && ` +
		`(!has(t.matchFields) || t.matchFields.all(f, f.key != 'metadata.name' || (f.operator == 'In' && has(f.values) && f.values.all(v, v == variables.node)))))`,
		"a node's identity lays out workloads for its own node only"},
	{`!variables.workload || !has(variables.podSpec.affinity) || !has(variables.podSpec.affinity.nodeAffinity) || ` +
		`!has(variables.podSpec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution) || ` +
		`variables.podSpec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution.all(p, ` +
		`(!has(p.preference.matchExpressions) || p.preference.matchExpressions.all(e, e.key != 'kubernetes.io/hostname' || (e.operator == 'In' && has(e.values) && e.values.all(v, v == variables.node)))) && ` +
		`(!has(p.preference.matchFields) || p.preference.matchFields.all(f, f.key != 'metadata.name' || (f.operator == 'In' && has(f.values) && f.values.all(v, v == variables.node)))))`,
		"a node's identity lays out workloads for its own node only"},
	{`!variables.workload || has(variables.podSpec.affinity) && has(variables.podSpec.affinity.nodeAffinity) && (` +
		`has(variables.podSpec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution) && ` +
		`variables.podSpec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.exists(t, has(t.matchExpressions) && t.matchExpressions.exists(e, e.key == 'kubernetes.io/hostname')) || ` +
		`has(variables.podSpec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution) && ` +
		`variables.podSpec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution.exists(p, has(p.preference.matchExpressions) && p.preference.matchExpressions.exists(e, e.key == 'kubernetes.io/hostname')))`,
		"a node's identity lays out only workloads that name its node (the app's designated node)"},
	{`!variables.workload || request.resource.resource != 'deployments' || ` +
		`!(has(variables.podSpec.hostNetwork) && variables.podSpec.hostNetwork) && !(has(variables.podSpec.hostPID) && variables.podSpec.hostPID) && ` +
		`!(has(variables.podSpec.hostIPC) && variables.podSpec.hostIPC) && ` +
		`(!has(variables.podSpec.volumes) || variables.podSpec.volumes.all(v, !has(v.hostPath))) && ` +
		`variables.podSpec.containers.all(c, !has(c.securityContext) || (!has(c.securityContext.privileged) || !c.securityContext.privileged) && ` +
		`(!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || size(c.securityContext.capabilities.add) == 0)) && ` +
		`(!has(variables.podSpec.initContainers) || variables.podSpec.initContainers.all(c, !has(c.securityContext) || (!has(c.securityContext.privileged) || !c.securityContext.privileged) && ` +
		`(!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || size(c.securityContext.capabilities.add) == 0)))`,
		"a node's identity lays out no workload with privileges on the host (privileged, added capabilities, host namespaces or paths)"},
	{`!variables.workload || request.resource.resource == 'deployments' || ` +
		`(!has(variables.podSpec.volumes) || variables.podSpec.volumes.all(v, !has(v.hostDisk))) && ` +
		`(!has(variables.podSpec.domain) || !has(variables.podSpec.domain.devices) || ` +
		`!has(variables.podSpec.domain.devices.hostDevices) && !has(variables.podSpec.domain.devices.gpus))`,
		"a node's identity lays out no VM with the host's disks or devices"},
}

// EnsureAgentAccess puts the policy NodePolicyName (and the apps policy)
// in force, then grants the nodes' own identities what a worker's agent
// needs (ClusterRole and Role AgentRoleName, bound to NodesGroup), and
// takes back the grant earlier versions gave the shared k3s controller
// identity. Server-side apply makes it idempotent and puts drifted rules
// right. A server's agent calls it.
//
// The policy first: the writes it confines are granted only once it is
// in force. An API server without the policy API (Kubernetes before 1.30,
// by its discovery) gets the reads alone, any write grant an earlier run
// made taken back, and ErrNodePolicy: unconfined, a node's identity could
// lay out or remove any node's apps. Any other failure to write the
// policy changes no grant.
func EnsureAgentAccess(ctx context.Context, cs kubernetes.Interface) error {
	labels := map[string]string{"app.kubernetes.io/managed-by": "sitecon"}
	opts := metav1.ApplyOptions{FieldManager: "sitecon", Force: true}
	policyErr := ensureNodePolicy(ctx, cs, labels, opts)
	if policyErr == nil {
		policyErr = ensureNodeAppsPolicy(ctx, cs, labels, opts)
	}
	confined := policyErr == nil
	if !confined {
		// Absent only on the API server's own word (discovery), not on a
		// NotFound alone, which a server still starting also answers.
		served, err := kube.PolicyAPIServed(cs)
		if err != nil || served {
			return fmt.Errorf("the node policy %s not written (the grants unchanged): %w", kube.NodePolicyName, policyErr)
		}
	}
	nodes := rbacapply.Subject().WithAPIGroup(rbacv1.GroupName).WithKind(rbacv1.GroupKind).WithName(NodesGroup)
	rules := AgentRules
	if !confined {
		rules = readRules(AgentRules)
	}
	role := rbacapply.ClusterRole(kube.AgentRoleName).WithLabels(labels)
	for _, r := range rules {
		role.WithRules(rbacapply.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).WithVerbs(r.Verbs...))
	}
	if _, err := cs.RbacV1().ClusterRoles().Apply(ctx, role, opts); err != nil {
		return fmt.Errorf("agent ClusterRole: %w", err)
	}
	// The subjects are replaced as a whole: the k3s controller identity
	// an earlier version bound here loses the grant.
	binding := rbacapply.ClusterRoleBinding(kube.AgentRoleName).WithLabels(labels).
		WithRoleRef(rbacapply.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName(kube.AgentRoleName)).
		WithSubjects(nodes)
	if _, err := cs.RbacV1().ClusterRoleBindings().Apply(ctx, binding, opts); err != nil {
		return fmt.Errorf("agent ClusterRoleBinding: %w", err)
	}
	if !confined {
		err := cs.RbacV1().RoleBindings(kube.AppNamespace).Delete(ctx, kube.AgentRoleName, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("taking back the agents' layout grant: %w", err)
		}
		return fmt.Errorf("%w (the nodes' identities are granted reads only: workers' agents lay out no app): %w", ErrNodePolicy, policyErr)
	}
	layout := rbacapply.Role(kube.AgentRoleName, kube.AppNamespace).WithLabels(labels)
	for _, r := range AgentLayoutRules {
		layout.WithRules(rbacapply.PolicyRule().WithAPIGroups(r.APIGroups...).WithResources(r.Resources...).WithVerbs(r.Verbs...))
	}
	if _, err := cs.RbacV1().Roles(kube.AppNamespace).Apply(ctx, layout, opts); err != nil {
		return fmt.Errorf("agent Role: %w", err)
	}
	layoutBinding := rbacapply.RoleBinding(kube.AgentRoleName, kube.AppNamespace).WithLabels(labels).
		WithRoleRef(rbacapply.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(kube.AgentRoleName)).
		WithSubjects(nodes)
	if _, err := cs.RbacV1().RoleBindings(kube.AppNamespace).Apply(ctx, layoutBinding, opts); err != nil {
		return fmt.Errorf("agent RoleBinding: %w", err)
	}
	return nil
}

// readRules are rules with their writes left out, but recording Events:
// what the nodes' identities keep without the policy that confines them.
func readRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range rules {
		if slices.Contains(r.Resources, "events") {
			out = append(out, r)
			continue
		}
		r.Verbs = slices.DeleteFunc(slices.Clone(r.Verbs), func(v string) bool { return v != "get" && v != "list" && v != "watch" })
		if len(r.Verbs) > 0 {
			out = append(out, r)
		}
	}
	return out
}

func ensureNodePolicy(ctx context.Context, cs kubernetes.Interface, labels map[string]string, opts metav1.ApplyOptions) error {
	write := []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}
	rule := func(group string, ops []admissionv1.OperationType, resources ...string) *admissionapply.NamedRuleWithOperationsApplyConfiguration {
		return admissionapply.NamedRuleWithOperations().WithAPIGroups(group).WithAPIVersions("*").
			WithOperations(ops...).WithResources(resources...)
	}
	spec := admissionapply.ValidatingAdmissionPolicySpec().
		WithFailurePolicy(admissionv1.Fail).
		WithMatchConstraints(admissionapply.MatchResources().WithResourceRules(
			rule("", []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete}, "configmaps"),
			rule("", []admissionv1.OperationType{admissionv1.Delete}, "pods"),
			rule("", []admissionv1.OperationType{admissionv1.Update, admissionv1.Delete}, "nodes"),
			rule("apps", write, "deployments"),
			rule("kubevirt.io", write, "virtualmachineinstances", "virtualmachineinstancereplicasets"),
			rule("storage.k8s.io", write, "storageclasses"),
		)).
		WithMatchConditions(admissionapply.MatchCondition().WithName("node-identity").
			WithExpression(`'`+NodesGroup+`' in request.userInfo.groups`)).
		WithVariables(
			admissionapply.Variable().WithName("node").WithExpression(
				`request.userInfo.username.startsWith('`+nodeUserPrefix+`') ? request.userInfo.username.substring(`+fmt.Sprint(len(nodeUserPrefix))+`) : ''`),
			admissionapply.Variable().WithName("workload").WithExpression(
				`request.resource.resource in ['deployments', 'virtualmachineinstances', 'virtualmachineinstancereplicasets']`),
			admissionapply.Variable().WithName("podSpec").WithExpression(
				`request.resource.resource == 'virtualmachineinstances' ? object.spec : object.spec.template.spec`),
		)
	for _, v := range nodePolicyValidations {
		spec.WithValidations(admissionapply.Validation().WithExpression(v.expr).WithMessage(v.msg))
	}
	policy := admissionapply.ValidatingAdmissionPolicy(kube.NodePolicyName).WithLabels(labels).WithSpec(spec)
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Apply(ctx, policy, opts); err != nil {
		return fmt.Errorf("node policy: %w", err)
	}
	binding := admissionapply.ValidatingAdmissionPolicyBinding(kube.NodePolicyName).WithLabels(labels).
		WithSpec(admissionapply.ValidatingAdmissionPolicyBindingSpec().WithPolicyName(kube.NodePolicyName).
			WithValidationActions(admissionv1.Deny))
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Apply(ctx, binding, opts); err != nil {
		return fmt.Errorf("node policy binding: %w", err)
	}
	return nil
}
