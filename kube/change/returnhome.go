package change

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/safety"
)

// ReturnHomeCheck gathers what the return-home preflight judges of app
// (safety.ReturnHome) from the snapshot's data: the nodes, and the
// Longhorn volumes behind the claims of its pod or VMI with their
// replicas.
func ReturnHomeCheck(d kube.Data, app kube.AppStatus) safety.ReturnHomeFacts {
	f := safety.ReturnHomeFacts{App: app.Name, Node: app.Node, Home: app.DesignatedNode, Requires: app.Requires, Nodes: kube.NodeFacts(d.Nodes)}
	for _, claim := range appClaims(d, app) {
		var vol string
		for _, v := range d.Volumes {
			ks := v.Status.KubernetesStatus
			if ks.PVCName == claim && (ks.Namespace == "" || ks.Namespace == app.Namespace) {
				vol = v.Name
			}
		}
		if vol == "" {
			f.Unknown = append(f.Unknown, claim)
			continue
		}
		av := safety.AppVolume{Name: vol}
		for _, r := range d.Replicas {
			if r.Spec.VolumeName == vol {
				av.Replicas = append(av.Replicas, r)
			}
		}
		f.Volumes = append(f.Volumes, av)
	}
	return f
}

// appClaims are the PersistentVolumeClaims the app's pod or VMI mounts,
// sorted.
func appClaims(d kube.Data, app kube.AppStatus) []string {
	var out []string
	add := func(c string) {
		if c != "" && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	if app.Kind == kube.AppKindVM {
		for _, v := range d.VMIs {
			if v.Namespace == app.Namespace && v.Name == app.Object {
				for _, vol := range v.Spec.Volumes {
					if vol.PersistentVolumeClaim != nil {
						add(vol.PersistentVolumeClaim.ClaimName)
					}
				}
			}
		}
	} else {
		for _, p := range d.Pods {
			if p.Namespace == app.Namespace && p.Name == app.Object {
				for _, vol := range p.Spec.Volumes {
					if vol.PersistentVolumeClaim != nil {
						add(vol.PersistentVolumeClaim.ClaimName)
					}
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// RestartApp deletes the app's running pod or VMI, as read in d, so that
// its controller (the Deployment's ReplicaSet, the VMI replica set) starts
// it again and the scheduler places it anew, by its layout's affinity. It
// refuses an object no controller would start again (a pinned VM's VMI,
// a bare pod): deleting it would stop the app for good. The delete names
// the object's UID: a newer object under the name is left alone.
func RestartApp(ctx context.Context, c *kube.Clients, d kube.Data, app kube.AppStatus) error {
	var uid types.UID
	var owners []metav1.OwnerReference
	found := false
	if app.Kind == kube.AppKindVM {
		for _, v := range d.VMIs {
			if v.Namespace == app.Namespace && v.Name == app.Object {
				uid, owners, found = v.UID, v.OwnerReferences, true
			}
		}
	} else {
		for _, p := range d.Pods {
			if p.Namespace == app.Namespace && p.Name == app.Object {
				uid, owners, found = p.UID, p.OwnerReferences, true
			}
		}
	}
	if !found {
		return fmt.Errorf("%s: its %s %s is gone: nothing to start again", app.Name, objectKind(app.Kind), app.Object)
	}
	if !slices.ContainsFunc(owners, func(o metav1.OwnerReference) bool { return o.Controller != nil && *o.Controller }) {
		return fmt.Errorf("%s: its %s %s has no controller to start it again: it is not restarted", app.Name, objectKind(app.Kind), app.Object)
	}
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	if app.Kind == kube.AppKindVM {
		return c.KubeVirt.KubevirtV1().VirtualMachineInstances(app.Namespace).Delete(ctx, app.Object, opts)
	}
	return c.Core.CoreV1().Pods(app.Namespace).Delete(ctx, app.Object, opts)
}

func objectKind(kind string) string {
	if kind == kube.AppKindVM {
		return "VMI"
	}
	return "pod"
}
