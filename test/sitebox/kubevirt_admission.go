package sitebox

import (
	"context"
	"fmt"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	kvv1 "kubevirt.io/api/core/v1"
	kvclientset "kubevirt.io/client-go/kubevirt"

	"github.com/sitecon/sitecon/kube"
)

// The KubeVirt admission simulator stands in for virt-api's validating
// webhook, which sitebox does not run: ValidatingAdmissionPolicies in the
// real API server refuse, at creation, the VMIs (and VMI replica set
// templates) KubeVirt's admitters refuse for the checks below:
//   - no memory: none of spec.domain.resources.requests.memory,
//     spec.domain.memory.guest, spec.domain.memory.hugepages.size;
//   - a disk whose name matches no volume;
//   - a volume with no source, or with more than one.
//
// KubeVirt checks much more (buses, devices, CPU topology, ...); sitecon
// lays out none of that, so none of it is simulated.
const kubevirtAdmissionPrefix = "sitebox-kubevirt-admission-simulator"

// kubevirtAdmissionPolicy is the policy for one resource; spec is the CEL
// path of the VMI spec in that resource and field its name in messages.
func kubevirtAdmissionPolicy(res string, ops []admissionv1.OperationType, spec, field string) *admissionv1.ValidatingAdmissionPolicy {
	v := func(expr, msg string) admissionv1.Validation {
		return admissionv1.Validation{Expression: expr, MessageExpression: msg, Reason: ptr.To(metav1.StatusReasonInvalid)}
	}
	return &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: kubevirtAdmissionPrefix + "-" + res},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{Operations: ops, Rule: admissionv1.Rule{
					APIGroups: []string{kvv1.SchemeGroupVersion.Group}, APIVersions: []string{"*"}, Resources: []string{res}}},
			}}},
			Variables: []admissionv1.Variable{
				{Name: "spec", Expression: "has(" + spec + ") ? " + spec + " : {}"},
				{Name: "domain", Expression: "has(variables.spec.domain) ? variables.spec.domain : {}"},
				{Name: "disks", Expression: "has(variables.domain.devices) && has(variables.domain.devices.disks) ? variables.domain.devices.disks : []"},
				{Name: "volumes", Expression: "has(variables.spec.volumes) ? variables.spec.volumes : []"},
			},
			Validations: []admissionv1.Validation{
				v(`(has(variables.domain.resources) && has(variables.domain.resources.requests) && has(variables.domain.resources.requests.memory)) ||
(has(variables.domain.memory) && (has(variables.domain.memory.guest) || (has(variables.domain.memory.hugepages) && has(variables.domain.memory.hugepages.size))))`,
					fmt.Sprintf(`"no memory requested, at least one of '%[1]s.domain.memory.guest', '%[1]s.domain.memory.hugepages.size' or '%[1]s.domain.resources.requests.memory' must be set"`, field)),
				v(`variables.disks.all(d, variables.volumes.exists(vol, vol.name == d.name))`,
					fmt.Sprintf(`"%s.domain.devices.disks: no volume for disk " + variables.disks.filter(d, !variables.volumes.exists(vol, vol.name == d.name)).map(d, "'" + string(d.name) + "'").join(", ")`, field)),
				v(`variables.volumes.all(vol, vol.filter(k, k != "name").size() == 1)`,
					fmt.Sprintf(`"%s.volumes: must have exactly one source type set: " + variables.volumes.filter(vol, vol.filter(k, k != "name").size() != 1).map(vol, "'" + string(vol.name) + "'").join(", ")`, field)),
			},
		},
	}
}

// installKubevirtAdmission creates the policies and their bindings and
// returns once the API server enforces them: a dry-run VMI without memory
// is refused.
func installKubevirtAdmission(ctx context.Context, cs kubernetes.Interface, kv kvclientset.Interface) error {
	policies := []*admissionv1.ValidatingAdmissionPolicy{
		// VMIs: KubeVirt validates a new VMI; its spec never changes after.
		kubevirtAdmissionPolicy("virtualmachineinstances", []admissionv1.OperationType{admissionv1.Create}, "object.spec", "spec"),
		// Replica sets: the template is validated on create and update.
		kubevirtAdmissionPolicy("virtualmachineinstancereplicasets", []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
			"object.spec.template.spec", "spec.template.spec"),
	}
	api := cs.AdmissionregistrationV1()
	for _, p := range policies {
		if _, err := api.ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("policy %s: %w", p.Name, err)
		}
		b := &admissionv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name},
			Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: p.Name,
				ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
		}
		if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("policy binding %s: %w", p.Name, err)
		}
	}
	// The API server loads policies from its own watch: wait until both
	// refuse what they must, so no object slips in before.
	probeVMI := &kvv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-probe-"}}
	probeRS := &kvv1.VirtualMachineInstanceReplicaSet{ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-probe-"},
		Spec: kvv1.VirtualMachineInstanceReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"probe": "1"}},
			Template: &kvv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"probe": "1"}}}}}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	refused := func(err error) bool { return err != nil && strings.Contains(err.Error(), "no memory requested") }
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, errVMI := kv.KubevirtV1().VirtualMachineInstances(kube.AppNamespace).Create(ctx, probeVMI, dry)
		_, errRS := kv.KubevirtV1().VirtualMachineInstanceReplicaSets(kube.AppNamespace).Create(ctx, probeRS, dry)
		return refused(errVMI) && refused(errRS), nil
	})
}
