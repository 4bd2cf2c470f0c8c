package access

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacapply "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
)

// The consoles of a node's VMs: the agent's bridge (agent/vncbridge)
// opens virtualmachineinstances/vnc of the VM apps running on its node,
// and a node's identity may open those and no other. Admission does not
// see a CONNECT to the subresource, so the grant itself is narrow: a Role
// per node naming its VMIs, bound to that node's user alone, kept by the
// stats leader (ConsoleGrants) as the VMIs come, go and move.

// consoleRolePrefix starts the name of a node's console Role and binding.
const consoleRolePrefix = "sitecon-vnc-"

// consoleLabels mark the console Roles and bindings, so that those of
// nodes gone are found.
var consoleLabels = map[string]string{"app.kubernetes.io/managed-by": "sitecon", "sitecon.io/grant": "vm-consoles"}

// ConsoleRoleName names node's console Role and its binding.
func ConsoleRoleName(node string) string { return consoleRolePrefix + node }

// GrantNodeConsoles lets node's identity open the consoles of exactly the
// VMIs named (in the app namespace). With none, the Role and its binding
// go: an RBAC rule that names no resource grants every one.
func GrantNodeConsoles(ctx context.Context, cs kubernetes.Interface, node string, vmis []string) error {
	name := ConsoleRoleName(node)
	rbac := cs.RbacV1()
	if len(vmis) == 0 {
		// The binding first: a Role left without it grants nothing.
		for _, err := range []error{
			rbac.RoleBindings(kube.AppNamespace).Delete(ctx, name, metav1.DeleteOptions{}),
			rbac.Roles(kube.AppNamespace).Delete(ctx, name, metav1.DeleteOptions{}),
		} {
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("take back %s's VM consoles: %w", node, err)
			}
		}
		return nil
	}
	opts := metav1.ApplyOptions{FieldManager: "sitecon", Force: true}
	role := rbacapply.Role(name, kube.AppNamespace).WithLabels(consoleLabels).WithRules(
		rbacapply.PolicyRule().WithAPIGroups("subresources.kubevirt.io").WithResources("virtualmachineinstances/vnc").
			WithVerbs("get").WithResourceNames(slices.Sorted(slices.Values(vmis))...))
	if _, err := rbac.Roles(kube.AppNamespace).Apply(ctx, role, opts); err != nil {
		return fmt.Errorf("%s's VM consoles: %w", node, err)
	}
	binding := rbacapply.RoleBinding(name, kube.AppNamespace).WithLabels(consoleLabels).
		WithRoleRef(rbacapply.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("Role").WithName(name)).
		WithSubjects(rbacapply.Subject().WithAPIGroup(rbacv1.GroupName).WithKind(rbacv1.UserKind).WithName(NodeUser(node)))
	if _, err := rbac.RoleBindings(kube.AppNamespace).Apply(ctx, binding, opts); err != nil {
		return fmt.Errorf("%s's VM consoles: %w", node, err)
	}
	return nil
}

// NodeConsoles are the VMIs of the app namespace by the node they run on.
func NodeConsoles(vmis []*kvv1.VirtualMachineInstance) map[string][]string {
	out := map[string][]string{}
	for _, vmi := range vmis {
		if vmi.Namespace == kube.AppNamespace && vmi.Status.NodeName != "" {
			out[vmi.Status.NodeName] = append(out[vmi.Status.NodeName], vmi.Name)
		}
	}
	for n := range out {
		slices.Sort(out[n])
	}
	return out
}

// ConsoleGrants keeps every node's console grant equal to the VMIs it
// runs (NodeConsoles), from the cluster cache; the stats leader runs it.
// It remembers what it granted, so that a quiet site writes nothing; its
// first sync (and the first after Forget) lists the console Roles once to
// take back those of nodes that run no VM any more.
type ConsoleGrants struct {
	Client  kubernetes.Interface
	Log     *slog.Logger
	granted map[string][]string
}

// Forget drops what it remembers (when this node stops leading): the
// next leader, or this one later, reads the grants afresh.
func (g *ConsoleGrants) Forget() { g.granted = nil }

// Sync grants what vmis (the cache's, once synced: an empty list before
// then is not the cluster's) show and takes back the rest; it returns the
// first error, having tried every node.
func (g *ConsoleGrants) Sync(ctx context.Context, vmis []*kvv1.VirtualMachineInstance) error {
	want := NodeConsoles(vmis)
	if g.granted == nil {
		roles, err := g.Client.RbacV1().Roles(kube.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: "sitecon.io/grant=vm-consoles"})
		if err != nil {
			return fmt.Errorf("list the VM console grants: %w", err)
		}
		g.granted = map[string][]string{}
		for _, r := range roles.Items {
			var names []string
			for _, rule := range r.Rules {
				names = append(names, rule.ResourceNames...)
			}
			// A Role that names none would grant every VMI: never kept.
			if node, ok := strings.CutPrefix(r.Name, consoleRolePrefix); ok {
				g.granted[node] = append(slices.Sorted(slices.Values(names)), "\x00read") // differs from any want: applied again
			}
		}
	}
	var first error
	for _, node := range slices.Sorted(maps.Keys(joinKeys(want, g.granted))) {
		if slices.Equal(want[node], g.granted[node]) {
			continue
		}
		if err := GrantNodeConsoles(ctx, g.Client, node, want[node]); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		if g.Log != nil {
			g.Log.Info("VM consoles granted", "node", node, "vmis", want[node])
		}
		if len(want[node]) == 0 {
			delete(g.granted, node)
		} else {
			g.granted[node] = want[node]
		}
	}
	return first
}

func joinKeys(a, b map[string][]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
