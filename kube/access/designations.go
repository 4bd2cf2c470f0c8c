package access

import (
	"context"
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionapply "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/kube"
)

// Whose app a node's identity may write. The node policy (NodePolicyName)
// sees only the request: it keeps a node's layouts on that node, but it
// cannot tell whether the node is the app's designated node. The stats
// leader, a server, records that from its own app configs in the ConfigMap
// kube.DesignationsConfigMapName (kube.Designations), which no node's identity
// may write, and the policy kube.NodeAppsPolicyName reads it as its
// parameter: a node's identity creates, changes and removes the workload
// of an app only when the record names it the app's node, and mounts in it
// only that app's claims. Two narrower writes are left to the node that
// laid a workload out (its UUID in the workload's kube.AnnotationDNId):
// the removal of a workload whose app the record no longer lays out
// (deactivated, or gone from the config), and the record of the config it
// holds now on a layout another node places (the config stamps, nothing
// else). The record exists from the moment the policy does, empty until
// the leader fills it: a worker lays out nothing until a server has
// recorded its apps (ensureNodeAppsPolicy).

// stampAnnotations are the annotations a node that laid a workload out may
// change on it once another node places its app: the config it holds.
var stampAnnotations = []string{kube.AnnotationConfigDNId, kube.AnnotationConfigVersion, kube.AnnotationConfigHash}

// lookup is CEL for m[key], or ” when m (a field of a Kubernetes object,
// which may be absent) has no such key.
func lookup(object, field, key string) string {
	return `(has(` + object + `.` + field + `) && ` + key + ` in ` + object + `.` + field + ` ? ` + object + `.` + field + `[` + key + `] : '')`
}

// nodeAppsValidations are the checks of NodeAppsPolicyName, in CEL over
// the request and the record (params).
var nodeAppsValidations = []struct{ expr, msg string }{
	{`variables.app != ''`,
		"a node's identity writes only the workloads of sitecon's apps (labelled " + kube.LabelAppUUID + ")"},
	{`request.operation != 'CREATE' || variables.designated == variables.node`,
		"a node's identity lays out only the apps the servers record it the node of (" + kube.DesignationsConfigMapName + ")"},
	{`request.operation != 'UPDATE' || ` + lookup("oldObject", "metadata.labels", `'`+kube.LabelAppUUID+`'`) + ` == variables.app && ` +
		`(variables.designated == variables.node || variables.stampsOnly && variables.layer == variables.node)`,
		"a node's identity changes only the workloads of the apps the servers record it the node of (" + kube.DesignationsConfigMapName + "), or the config it holds on one it laid out"},
	{`request.operation != 'DELETE' || variables.designated == variables.node || variables.designated == '' && variables.layer == variables.node`,
		"a node's identity removes only the workloads of the apps the servers record it the node of (" + kube.DesignationsConfigMapName + "), or one it laid out whose app is laid out no more"},
	// Only the volumes sitecon lays out: its own app's claims, and a VM's
	// container disk. Any other kind could reach another app's data (an
	// ephemeral claim cloned from another's, a VM's ephemeral disk over
	// another's claim) or the namespace's Secrets.
	{`request.operation == 'DELETE' || variables.stampsOnly || !has(variables.podSpec.volumes) || variables.podSpec.volumes.all(v, ` +
		`has(v.persistentVolumeClaim) && ` + lookup("params", "data", `'`+kube.DesignationClaimPrefix+`' + v.persistentVolumeClaim.claimName`) + `.split(' ').exists(u, u == variables.app) || ` +
		`request.resource.resource != 'deployments' && has(v.containerDisk))`,
		"a node's identity lays out a workload with its own app's claims (" + kube.DesignationsConfigMapName + ") and, for a VM, a container disk; no other volume"},
	{`request.operation == 'DELETE' || variables.stampsOnly || ` +
		`(request.resource.resource != 'deployments' || !has(variables.podSpec.serviceAccountName) || variables.podSpec.serviceAccountName == 'default') && ` +
		`(request.resource.resource == 'deployments' || !has(variables.podSpec.accessCredentials))`,
		"a node's identity lays out no workload with another service account, nor a VM with access credentials"},
	// A workload's name ends with its app's UUID's first 8 characters
	// (apps.WorkloadName): a node cannot take the name another app's
	// workload will need, then hold it as its own app's.
	{`request.operation != 'CREATE' || size(variables.app) >= 8 && object.metadata.name.endsWith('-' + variables.app.substring(0, 8))`,
		"a node's identity names a workload after its own app (its name ends with the app UUID's first 8 characters)"},
	// A Deployment or a VMI replica set adopts the pods or VMIs its
	// selector matches that have no owner (a pinned VM's VMI has none):
	// one selecting another app's would take it over, and remove it.
	{`request.operation == 'DELETE' || request.resource.resource == 'virtualmachineinstances' || variables.stampsOnly || ` +
		`has(object.spec.selector) && ` + lookup("object.spec.selector", "matchLabels", `'`+kube.LabelAppUUID+`'`) + ` == variables.app && ` +
		`has(object.spec.template.metadata) && ` + lookup("object.spec.template.metadata", "labels", `'`+kube.LabelAppUUID+`'`) + ` == variables.app`,
		"a node's identity lays out a Deployment or VMI replica set that selects its own app's pods or VMIs only (" + kube.LabelAppUUID + " in its selector and its template)"},
}

// ensureNodeAppsPolicy puts NodeAppsPolicyName in force, bound to the
// record, after making an empty record where there is none. The API
// server resolves a binding's parameter before it looks at who asks: a
// binding that refused when its record is missing would refuse every
// identity, the servers' and KubeVirt's included, so it lets the request
// through instead, and the record is never missing: made empty here (a
// worker lays out nothing until the leader fills it), and written again
// by the leader if removed (only servers may).
func ensureNodeAppsPolicy(ctx context.Context, cs kubernetes.Interface, labels map[string]string, opts metav1.ApplyOptions) error {
	empty := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: kube.DesignationsConfigMapName, Namespace: kube.AppNamespace, Labels: labels}}
	if _, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Create(ctx, empty, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("the record of designations: %w", err)
	}
	ops := []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete}
	rule := func(group string, resources ...string) *admissionapply.NamedRuleWithOperationsApplyConfiguration {
		return admissionapply.NamedRuleWithOperations().WithAPIGroups(group).WithAPIVersions("*").
			WithOperations(ops...).WithResources(resources...)
	}
	quoted := make([]string, len(stampAnnotations))
	for i, a := range stampAnnotations {
		quoted[i] = "'" + a + "'"
	}
	stamps := "[" + strings.Join(quoted, ", ") + "]"
	// same: the field of metadata is the same before and after.
	same := func(field string) string {
		return `has(object.metadata.` + field + `) == has(oldObject.metadata.` + field + `) && ` +
			`(!has(object.metadata.` + field + `) || object.metadata.` + field + ` == oldObject.metadata.` + field + `)`
	}
	spec := admissionapply.ValidatingAdmissionPolicySpec().
		WithFailurePolicy(admissionv1.Fail).
		WithParamKind(admissionapply.ParamKind().WithAPIVersion("v1").WithKind("ConfigMap")).
		WithMatchConstraints(admissionapply.MatchResources().
			WithResourceRules(
				rule("apps", "deployments"),
				rule("kubevirt.io", "virtualmachineinstances", "virtualmachineinstancereplicasets"),
			)).
		WithMatchConditions(admissionapply.MatchCondition().WithName("node-identity").
			WithExpression(`'`+NodesGroup+`' in request.userInfo.groups`)).
		WithVariables(
			// '?' for a member of the group with another kind of name: no
			// record names it, nor is it a removal's '' (an app recorded
			// nowhere).
			admissionapply.Variable().WithName("node").WithExpression(
				`request.userInfo.username.startsWith('`+nodeUserPrefix+`') ? request.userInfo.username.substring(`+fmt.Sprint(len(nodeUserPrefix))+`) : '?'`),
			// The object written, or the one removed.
			admissionapply.Variable().WithName("obj").WithExpression(`request.operation == 'DELETE' ? oldObject : object`),
			admissionapply.Variable().WithName("app").WithExpression(lookup("variables.obj", "metadata.labels", `'`+kube.LabelAppUUID+`'`)),
			// The node the record says lays the app out ('': none, the
			// app is not laid out).
			admissionapply.Variable().WithName("designated").WithExpression(lookup("params", "data", `'`+kube.DesignationAppPrefix+`' + variables.app`)),
			// The node that laid the object out, by the UUID it stamped.
			admissionapply.Variable().WithName("layer").WithExpression(lookup("params", "data",
				`'`+kube.DesignationNodePrefix+`' + `+lookup("variables.obj", "metadata.annotations", `'`+kube.AnnotationDNId+`'`))),
			admissionapply.Variable().WithName("podSpec").WithExpression(
				`request.resource.resource == 'virtualmachineinstances' ? object.spec : object.spec.template.spec`),
			// An update that changes nothing but the config stamps.
			admissionapply.Variable().WithName("stampsOnly").WithExpression(
				`request.operation == 'UPDATE' && object.spec == oldObject.spec && `+
					same("labels")+` && `+same("ownerReferences")+` && `+same("finalizers")+` && `+
					`(!has(object.status) && !has(oldObject.status) || has(object.status) && has(oldObject.status) && object.status == oldObject.status) && `+
					`(!has(object.metadata.annotations) || object.metadata.annotations.all(k, k in `+stamps+` || `+
					`has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations && oldObject.metadata.annotations[k] == object.metadata.annotations[k])) && `+
					`(!has(oldObject.metadata.annotations) || oldObject.metadata.annotations.all(k, k in `+stamps+` || `+
					`has(object.metadata.annotations) && k in object.metadata.annotations))`),
		)
	for _, v := range nodeAppsValidations {
		spec.WithValidations(admissionapply.Validation().WithExpression(v.expr).WithMessage(v.msg))
	}
	policy := admissionapply.ValidatingAdmissionPolicy(kube.NodeAppsPolicyName).WithLabels(labels).WithSpec(spec)
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Apply(ctx, policy, opts); err != nil {
		return fmt.Errorf("node apps policy: %w", err)
	}
	binding := admissionapply.ValidatingAdmissionPolicyBinding(kube.NodeAppsPolicyName).WithLabels(labels).
		WithSpec(admissionapply.ValidatingAdmissionPolicyBindingSpec().WithPolicyName(kube.NodeAppsPolicyName).
			WithParamRef(admissionapply.ParamRef().WithName(kube.DesignationsConfigMapName).WithNamespace(kube.AppNamespace).
				WithParameterNotFoundAction(admissionv1.AllowAction)).
			WithValidationActions(admissionv1.Deny))
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Apply(ctx, binding, opts); err != nil {
		return fmt.Errorf("node apps policy binding: %w", err)
	}
	return nil
}
