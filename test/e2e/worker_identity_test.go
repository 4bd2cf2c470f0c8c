package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/access"
	"github.com/sitecon/sitecon/test/sitebox"
)

// A compromised worker is not trusted with the cluster: acting with the
// credential a worker's agent holds on the device, it is refused every
// write of cluster-wide state (the etcd member list, the cluster record,
// the placement overrides, another node's pods and volume attachments, a
// layout for another node, a privileged layout), while a server's
// credential may do all of it and the worker may still read what it reads
// and lay out an app it is the designated node of, on itself.
func TestWorkerIdentityRefused(t *testing.T) {
	site := sitebox.Shared(t)
	ctx := t.Context()
	admin, err := kubernetes.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	// A cluster upgraded from a version that granted the k3s controller
	// identity every node shares the agent's rules, writes included.
	removeAgentAccess(admin)
	t.Cleanup(func() { removeAgentAccess(admin) })
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: kube.AgentRoleName},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: kube.AgentRoleName},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: kube.AgentRoleName},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:k3s-controller"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What a server's agent grants once it has joined.
	if err := access.EnsureAgentAccess(ctx, admin); err != nil {
		t.Fatal(err)
	}
	binding, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, kube.AgentRoleName, metav1.GetOptions{})
	if err != nil || len(binding.Subjects) != 1 || binding.Subjects[0].Kind != rbacv1.GroupKind || binding.Subjects[0].Name != access.NodesGroup {
		t.Fatalf("the agents' grant after an upgrade: %+v %v, want the group %s alone", binding, err, access.NodesGroup)
	}
	const workerNode = "node-c"
	workerCfg := workerIdentity(t, site, workerNode)
	worker, err := kubernetes.NewForConfig(workerCfg)
	if err != nil {
		t.Fatal(err)
	}
	workerDyn, err := dynamic.NewForConfig(workerCfg)
	if err != nil {
		t.Fatal(err)
	}
	adminDyn, err := dynamic.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}

	// The cluster-wide ConfigMaps, as the cluster has them.
	cms := admin.CoreV1().ConfigMaps(kube.AppNamespace)
	for _, name := range []string{kube.EtcdMembersConfigMapName, kube.ClusterConfigMapName, kube.PlacementConfigMapName} {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kube.AppNamespace},
			Data: map[string]string{"identity-test": "as written by a server"}}, metav1.CreateOptions{})
		switch {
		case err == nil:
			t.Cleanup(func() { _ = cms.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		case !apierrors.IsAlreadyExists(err):
			t.Fatal(err)
		}
	}

	// The worker reads what its agent reads, once the grant has reached the
	// authorizer.
	_ = until(t, 20*time.Second, "the worker's identity lists ConfigMaps, Nodes and Pods", func() (error, bool) {
		if _, err := worker.CoreV1().ConfigMaps(kube.AppNamespace).List(ctx, metav1.ListOptions{}); err != nil {
			return err, false
		}
		if _, err := worker.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
			return err, false
		}
		_, err := worker.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		return err, err == nil
	}, func(err error) string { return fmt.Sprintf("last error: %v", err) })

	// Cluster-wide ConfigMaps: no write of any kind.
	patch := []byte(`{"data":{"identity-test":"forged by a worker"}}`)
	workerCMs := worker.CoreV1().ConfigMaps(kube.AppNamespace)
	for _, name := range []string{kube.EtcdMembersConfigMapName, kube.ClusterConfigMapName, kube.PlacementConfigMapName} {
		if _, err := workerCMs.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the worker's identity patched ConfigMap %s (err %v), want Forbidden", name, err)
		}
		if err := workerCMs.Delete(ctx, name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("the worker's identity deleted ConfigMap %s (err %v), want Forbidden", name, err)
		}
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil || cm.Data["identity-test"] == "forged by a worker" {
			t.Errorf("ConfigMap %s after the worker's attempts: %v %v", name, cm.Data, err)
		}
	}
	// Nor the identity every node shares, which the agents used to have.
	controllerCfg, err := kube.LoadRESTConfig(site.K3sControllerKubeconfig(), "")
	if err != nil {
		t.Fatal(err)
	}
	controller, err := kubernetes.NewForConfig(controllerCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controller.CoreV1().ConfigMaps(kube.AppNamespace).Patch(ctx, kube.EtcdMembersConfigMapName, types.MergePatchType, patch,
		metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the k3s controller identity patched the member list (err %v), want Forbidden", err)
	}
	if _, err := workerCMs.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sitecon-forged", Namespace: kube.AppNamespace}},
		metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the worker's identity created a ConfigMap (err %v), want Forbidden", err)
		_ = cms.Delete(ctx, "sitecon-forged", metav1.DeleteOptions{})
	}

	// A layout for another node is refused once the policy is in force
	// (the API server loads a new policy within a second or two).
	forNodeA := appLayout(t, "identity-test-a", "node-a")
	_ = until(t, 20*time.Second, "the worker's identity refused laying out an app on node-a", func() (error, bool) {
		err := applyLayout(ctx, workerDyn, forNodeA, true)
		return err, refusedByPolicy(err)
	}, func(err error) string { return fmt.Sprintf("the apply answered: %v", err) })
	// The same for an auto-migration app (node-a preferred) and a VM.
	for _, l := range []apps.Layout{
		layoutOf(t, "identity-test-auto-a", apps.KindContainer, apps.AffinityPreferred, "node-a"),
		layoutOf(t, "identity-test-vm-a", apps.KindVM, apps.AffinityPreferred, "node-a"),
		layoutOf(t, "identity-test-pinned-vm-a", apps.KindVM, apps.AffinityRequired, "node-a"),
	} {
		if err := applyLayout(ctx, workerDyn, l, true); !refusedByPolicy(err) {
			t.Errorf("the worker's identity laid out %s %s on node-a (err %v), want refused by %s", l.GVR.Resource, l.Name(), err, kube.NodePolicyName)
		}
		if err := applyLayout(ctx, adminDyn, l, true); err != nil {
			t.Errorf("the server's identity may not lay out %s %s on node-a: %v", l.GVR.Resource, l.Name(), err)
		}
	}

	// No collection of workloads is removed at once: not granted at all.
	for _, gvr := range []schema.GroupVersionResource{{Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}} {
		err := workerDyn.Resource(gvr).Namespace(kube.AppNamespace).DeleteCollection(ctx, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("the worker's identity removed every %s at once (err %v), want Forbidden", gvr.Resource, err)
		}
	}

	// The stats-leader Lease: only servers stand for it.
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: kube.StatsLeaderLeaseName, Namespace: kube.AppNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(workerNode)}}
	if _, err := worker.CoordinationV1().Leases(kube.AppNamespace).Create(ctx, lease, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("the worker's identity may create the stats-leader Lease (err %v), want Forbidden", err)
	}
	if _, err := worker.CoordinationV1().Leases(kube.AppNamespace).Update(ctx, lease, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("the worker's identity may take the stats-leader Lease (err %v), want Forbidden", err)
	}
	// A claim: not deleted (a volume's data outlives its app).
	if err := worker.CoreV1().PersistentVolumeClaims(kube.AppNamespace).Delete(ctx, "any-claim", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the worker's identity may delete claims (err %v), want Forbidden", err)
	}

	// Another node's pod: not deleted.
	pods := admin.CoreV1().Pods(kube.AppNamespace)
	other, err := pods.Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "identity-test-on-node-a", Namespace: kube.AppNamespace},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "registry.local/idle:1"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pods.Delete(context.Background(), other.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	if err := worker.CoreV1().Pods(kube.AppNamespace).Delete(ctx, other.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); !apierrors.IsForbidden(err) {
		t.Errorf("the worker's identity deleted a pod on node-a (err %v), want Forbidden", err)
	}
	if _, err := pods.Get(ctx, other.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("node-a's pod after the worker's delete: %v", err)
	}
	// Its own Node: the kubelet's labels, yes; the UUID apps are designated
	// by, or the Node itself (to register again as another), no.
	workerNodes := worker.CoreV1().Nodes()
	relabel := func(key, value string) error {
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, key, value)
		_, err := workerNodes.Patch(ctx, workerNode, types.MergePatchType, patch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	if err := relabel("sitecon.io/identity-test", "x"); err != nil {
		t.Errorf("the worker's identity may not label its own Node: %v", err)
	}
	if err := relabel(kube.LabelNodeUUID, sitebox.NodeUUID("node-a")); !refusedByPolicy(err) {
		t.Errorf("the worker's identity took node-a's UUID on its Node (err %v), want refused by %s", err, kube.NodePolicyName)
	}
	if err := workerNodes.Delete(ctx, workerNode, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("the worker's identity may delete its Node (err %v), want Forbidden", err)
	}
	if _, err := admin.CoreV1().Nodes().Patch(ctx, workerNode, types.MergePatchType,
		fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, kube.LabelNodeUUID, sitebox.NodeUUID("node-a")),
		metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the server's identity may not relabel a Node: %v", err)
	}

	// Nor a VM with the host's disks or devices.
	for what, change := range map[string]func(vmi map[string]any){
		"a host disk": func(vmi map[string]any) {
			vmi["volumes"] = append(vmi["volumes"].([]any), map[string]any{"name": "host", "hostDisk": map[string]any{"path": "/dev/sda", "type": "Disk"}})
		},
		"a host device": func(vmi map[string]any) {
			devices := vmi["domain"].(map[string]any)["devices"].(map[string]any)
			devices["hostDevices"] = []any{map[string]any{"name": "nic", "deviceName": "intel.com/nic"}}
		},
	} {
		l := layoutOf(t, "identity-test-pinned-vm-c", apps.KindVM, apps.AffinityRequired, workerNode)
		vmi, _, _ := unstructured.NestedMap(l.Object.Object, "spec")
		change(vmi)
		if err := unstructured.SetNestedMap(l.Object.Object, vmi, "spec"); err != nil {
			t.Fatal(err)
		}
		if err := applyLayout(ctx, workerDyn, l, true); !refusedByPolicy(err) {
			t.Errorf("the worker's identity laid out a VM with %s (err %v), want refused by %s", what, err, kube.NodePolicyName)
		}
		if err := applyLayout(ctx, adminDyn, l, true); err != nil {
			t.Errorf("the server's identity may not lay out a VM with %s: %v", what, err)
		}
	}

	// VolumeAttachments: the worker releases none (the server's failover
	// guard does). Authorization answers before the object is looked up.
	if err := worker.StorageV1().VolumeAttachments().Delete(ctx, "csi-identity-test", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the worker's identity may delete VolumeAttachments (err %v), want Forbidden", err)
	}
	if _, err := worker.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the worker's identity cannot list VolumeAttachments: %v", err)
	}

	// Layouts: its own app on itself, yes (the servers record it as the
	// app's node); privileged, no.
	own := []apps.Layout{
		appLayout(t, "identity-test-c", workerNode),
		layoutOf(t, "identity-test-auto-c", apps.KindContainer, apps.AffinityPreferred, workerNode),
		layoutOf(t, "identity-test-vm-c", apps.KindVM, apps.AffinityPreferred, workerNode),
		layoutOf(t, "identity-test-pinned-vm-c", apps.KindVM, apps.AffinityRequired, workerNode),
	}
	record := map[string]apps.Layout{}
	for _, l := range own {
		record[workerNode+"/"+l.Name()] = l
	}
	recordDesignations(t, admin, record, nil)
	for _, l := range own {
		if err := applyLayout(ctx, workerDyn, l, true); err != nil {
			t.Errorf("the worker's identity may not lay out %s %s on itself: %v", l.GVR.Resource, l.Name(), err)
		}
	}
	// Nor a workload with privileges on its host, even on itself.
	for what, change := range map[string]func(pod map[string]any){
		"privileged": func(pod map[string]any) {
			pod["containers"].([]any)[0].(map[string]any)["securityContext"] = map[string]any{"privileged": true}
		},
		"with added capabilities": func(pod map[string]any) {
			pod["containers"].([]any)[0].(map[string]any)["securityContext"] = map[string]any{"capabilities": map[string]any{"add": []any{"SYS_ADMIN"}}}
		},
		"on the host network": func(pod map[string]any) { pod["hostNetwork"] = true },
		"with a host path": func(pod map[string]any) {
			pod["volumes"] = []any{map[string]any{"name": "root", "hostPath": map[string]any{"path": "/"}}}
		},
	} {
		l := appLayout(t, "identity-test-c", workerNode)
		pod, _, _ := unstructured.NestedMap(l.Object.Object, "spec", "template", "spec")
		change(pod)
		if err := unstructured.SetNestedMap(l.Object.Object, pod, "spec", "template", "spec"); err != nil {
			t.Fatal(err)
		}
		if err := applyLayout(ctx, workerDyn, l, true); !refusedByPolicy(err) {
			t.Errorf("the worker's identity laid out a pod %s (err %v), want refused by %s", what, err, kube.NodePolicyName)
		}
		if err := applyLayout(ctx, adminDyn, l, true); err != nil {
			t.Errorf("the server's identity may not lay out a pod %s: %v", what, err)
		}
	}

	// A server's credential may do all of it (dry run: nothing changes).
	dry := []string{metav1.DryRunAll}
	for _, name := range []string{kube.EtcdMembersConfigMapName, kube.ClusterConfigMapName, kube.PlacementConfigMapName} {
		if _, err := cms.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{DryRun: dry}); err != nil {
			t.Errorf("the server's identity may not patch ConfigMap %s: %v", name, err)
		}
	}
	if err := pods.Delete(ctx, other.Name, metav1.DeleteOptions{DryRun: dry}); err != nil {
		t.Errorf("the server's identity may not delete node-a's pod: %v", err)
	}
	if err := admin.StorageV1().VolumeAttachments().Delete(ctx, "csi-identity-test", metav1.DeleteOptions{DryRun: dry}); !apierrors.IsNotFound(err) {
		t.Errorf("the server's identity deleting a VolumeAttachment: %v, want NotFound (allowed, none there)", err)
	}
	if err := applyLayout(ctx, adminDyn, forNodeA, true); err != nil {
		t.Errorf("the server's identity may not lay out an app on node-a: %v", err)
	}
}

// workerIdentity is the credential a worker node's agent reaches the
// cluster with on a device: its node's own identity, issued by the site's
// CA as k3s issues it.
func workerIdentity(t *testing.T, site *sitebox.TestSite, node string) *rest.Config {
	t.Helper()
	cfg, err := kube.LoadRESTConfig(site.NodeKubeconfig(node), "")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// refusedByPolicy: the API server refused the request by one of the node
// policies (kube.NodePolicyName, kube.NodeAppsPolicyName).
func refusedByPolicy(err error) bool {
	return (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) &&
		(strings.Contains(err.Error(), kube.NodePolicyName) || strings.Contains(err.Error(), kube.NodeAppsPolicyName))
}

// recordDesignations writes the record of whose apps are whose, as the
// stats leader does (kube.WriteDesignations): the node of each app of
// layouts, by the app UUID on it; every site node by its UUID; claims'
// apps. The record goes when the test ends.
func recordDesignations(t *testing.T, cs kubernetes.Interface, layouts map[string]apps.Layout, claims map[string][]string) {
	t.Helper()
	d := kube.Designations{Apps: map[string]string{}, Nodes: map[string]string{}, Claims: claims}
	for node, l := range layouts {
		d.Apps[l.Object.GetLabels()[kube.LabelAppUUID]] = strings.SplitN(node, "/", 2)[0]
	}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		d.Nodes[strings.ToLower(sitebox.NodeUUID(n))] = n
	}
	if err := kube.WriteDesignations(t.Context(), cs, d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resetDesignations(cs) })
}

// layoutOf is the workload the agent lays out for an app of that kind and
// affinity designated to node.
func layoutOf(t *testing.T, name, kind, affinity, node string) apps.Layout {
	t.Helper()
	app := apps.AppConfig{UUID: sitebox.NodeUUID(name), DisplayName: name,
		Activate: true, Kind: kind, Image: "registry.local/idle:1", DesignatedNodeID: sitebox.NodeUUID(node),
		Affinity: affinity, Resources: apps.AppResources{Memory: "64Mi"}}
	l, err := apps.LayoutApp(app, app.DesignatedNodeID, node, nil, apps.PlacementOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// appLayout is the workload the agent lays out for a container app
// designated to node (pinned there).
func appLayout(t *testing.T, name, node string) apps.Layout {
	t.Helper()
	return layoutOf(t, name, apps.KindContainer, apps.AffinityRequired, node)
}

// applyLayout writes a layout as the agent's layout writer does
// (server-side apply), as a dry run when asked.
func applyLayout(ctx context.Context, dyn dynamic.Interface, l apps.Layout, dryRun bool) error {
	opts := metav1.ApplyOptions{FieldManager: apps.FieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err := dyn.Resource(l.GVR).Namespace(l.Namespace()).Apply(ctx, l.Name(), l.Object, opts)
	return err
}

// A worker's agent, with only its node's identity, does what its role
// needs once a server's agent has granted it: it reads the cluster, lays
// out the app it is the designated node of (on itself), and follows the
// stats-leader election the servers stand in without standing itself.
func TestWorkerAgentWithItsNodeIdentity(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	cs := clientset(t, site)
	// No grant yet: the server's agent gives it.
	removeAgentAccess(cs)
	t.Cleanup(func() { removeAgentAccess(cs) })
	// node-a is to lead within a bound shorter than the lease a dead
	// holder of an earlier test may have left (30 s at shipped timings).
	clearStatsLeaderLease(t, cs)

	// node-c a worker, as its node identity says: no server role.
	actAsWorker(t, cs, "node-c")
	appsDir, logDir := t.TempDir(), t.TempDir()
	// Its app has a volume: Kubernetes' NodeRestriction admits no claim
	// from a node's identity, so the leading server makes it.
	vol := apps.VolumeConfig{UUID: "e5000000-0000-4000-8000-0000000000c2", Name: "worker-own-data", DesignatedNodeID: sitebox.NodeUUID("node-c"), Size: "1Gi", ReplicaCount: 1}
	app := apps.AppConfig{UUID: "e5000000-0000-4000-8000-0000000000c1", DisplayName: "worker-own-app", Activate: true, Kind: apps.KindContainer,
		Image: "registry.local/logger:1", DesignatedNodeID: sitebox.NodeUUID("node-c"), Affinity: apps.AffinityRequired, VolumeRefs: []string{vol.UUID}}
	writeJSON(t, appsDir+"/apps/worker-own-app.json", app)
	writeJSON(t, appsDir+"/volumes/worker-own-data.json", vol)
	workerCfg := workerIdentity(t, site, "node-c")
	agents := map[string]*siteAgent{
		"node-c": startAgentWith(t, site, "node-c", appsDir, logDir, func(o *agent.Options) {
			startSiteAgentTimings(o)
			o.RESTConfig = workerCfg
			o.LeaderDurations = apps.LeaderDurations{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
		}),
		"node-a": startSiteAgent(t, site, "node-a", appsDir, logDir),
	}
	all := []*siteAgent{agents["node-a"], agents["node-c"]}
	t.Cleanup(func() {
		cleanupApps(t, cs, dynClient(t, site), agents, appsDir, map[string]apps.AppConfig{"worker-own-app": app})
		_ = cs.CoreV1().PersistentVolumeClaims(kube.AppNamespace).Delete(context.Background(), apps.ClaimName(vol), metav1.DeleteOptions{})
	})
	waitAgents(t, all, app.DisplayName, 60*time.Second, "running on node-c", runningOn("node-c"))
	if pvc, err := cs.CoreV1().PersistentVolumeClaims(kube.AppNamespace).Get(t.Context(), apps.ClaimName(vol), metav1.GetOptions{}); err != nil || pvc.Annotations[apps.AnnotationLaidOutBy] != "node-a" {
		t.Errorf("the worker's volume's claim was not laid out by the leading server node-a: %v %v", pvc.GetAnnotations(), err)
	}
	d, err := cs.AppsV1().Deployments(kube.AppNamespace).Get(t.Context(), apps.WorkloadName(app), metav1.GetOptions{})
	if err != nil || d.Annotations[apps.AnnotationLaidOutBy] != "node-c" {
		t.Errorf("the app's workload was not laid out by node-c's agent: %v %v", d.GetAnnotations(), err)
	}
	// node-a, the only server here, leads (the lease cleared above);
	// node-c follows and never stands.
	until(t, 20*time.Second, "node-c's agent follows node-a leading", func() ([2]apps.LeaderState, bool) {
		ls := [2]apps.LeaderState{agents["node-a"].agent.LeaderState(), agents["node-c"].agent.LeaderState()}
		return ls, ls[0].IsLeader && ls[1].Leader == "node-a" && !ls[1].IsLeader
	}, func(ls [2]apps.LeaderState) string {
		return fmt.Sprintf("node-a's and node-c's leader states: %+v", ls)
	})
	// The leader recorded node-c as the app's node, which is what let
	// node-c's identity lay it out.
	if record, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(t.Context(), kube.DesignationsConfigMapName, metav1.GetOptions{}); err != nil {
		t.Errorf("the record of designations: %v", err)
	} else if kube.RecordedNode(record.Data, app.UUID) != "node-c" {
		t.Errorf("the record of designations does not name node-c for the app: %v", record.Data)
	}
	// A record changed by hand (no node may) is written again by the
	// leader.
	resetDesignations(cs)
	_ = until(t, 15*time.Second, "the leader wrote the emptied record again", func() (error, bool) {
		record, err := cs.CoreV1().ConfigMaps(kube.AppNamespace).Get(t.Context(), kube.DesignationsConfigMapName, metav1.GetOptions{})
		return err, err == nil && kube.RecordedNode(record.Data, app.UUID) == "node-c"
	}, func(err error) string { return fmt.Sprintf("last read: %v", err) })
	// The app leaves the config: the leader's record drops it, and node-c,
	// which laid it out, removes it with its own identity.
	if err := os.Remove(appsDir + "/apps/worker-own-app.json"); err != nil {
		t.Fatal(err)
	}
	_ = until(t, 30*time.Second, "node-c removed the workload of the app gone from the config", func() (error, bool) {
		_, err := cs.AppsV1().Deployments(kube.AppNamespace).Get(t.Context(), apps.WorkloadName(app), metav1.GetOptions{})
		return err, apierrors.IsNotFound(err)
	}, func(err error) string {
		st, _ := agents["node-c"].app(app.DisplayName)
		return fmt.Sprintf("the Deployment: %v; node-c's state of the app: %+v", err, st)
	})
}

// actAsWorker takes the server roles off node's Node until the test ends:
// a worker, as the shared site (three servers) has none.
func actAsWorker(t *testing.T, cs kubernetes.Interface, node string) {
	t.Helper()
	roles := []string{"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master", kube.LabelEtcd}
	set := func(value *string) {
		t.Helper()
		labels := map[string]any{}
		for _, r := range roles {
			if value == nil {
				labels[r] = nil
			} else {
				labels[r] = *value
			}
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
		if _, err := cs.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("%s's roles: %v", node, err)
		}
	}
	set(nil)
	t.Cleanup(func() { set(ptr.To("true")) })
}

// The record of designations exists as soon as the apps policy does
// (empty: a worker lays out nothing until the leader fills it), and the
// policy never holds up a server's write. Its binding lets a request
// through when the record cannot be found: the API server resolves a
// binding's parameter before it looks at who asks, so the first version,
// which refused then, refused the admin's layouts too (seen failing).
func TestRecordOfDesignationsHoldsNoServer(t *testing.T) {
	site := sitebox.Shared(t)
	ctx := t.Context()
	admin := clientset(t, site)
	grantAgentAccessAfresh(t, admin)
	record, err := admin.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.DesignationsConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the record after the grant: %v", err)
	}
	for key := range record.Data {
		if strings.HasPrefix(key, kube.DesignationAppPrefix) {
			t.Fatalf("the record after the grant names apps: %v", record.Data)
		}
	}
	workerDyn, err := dynamic.NewForConfig(workerIdentity(t, site, "node-c"))
	if err != nil {
		t.Fatal(err)
	}
	adminDyn := dynClient(t, site)
	own := appLayout(t, "record-test-c", "node-c")
	_ = until(t, 20*time.Second, "the worker's own layout refused while the record names no app", func() (error, bool) {
		err := applyLayout(ctx, workerDyn, own, true)
		return err, refusedByPolicy(err)
	}, func(err error) string { return fmt.Sprintf("the apply answered: %v", err) })
	for _, l := range []apps.Layout{own, layoutOf(t, "record-test-vm-a", apps.KindVM, apps.AffinityPreferred, "node-a")} {
		if err := applyLayout(ctx, adminDyn, l, true); err != nil {
			t.Errorf("the server's identity may not lay out %s: %v", l.Name(), err)
		}
	}
	b, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, kube.NodeAppsPolicyName, metav1.GetOptions{})
	if err != nil || b.Spec.ParamRef == nil || b.Spec.ParamRef.ParameterNotFoundAction == nil ||
		*b.Spec.ParamRef.ParameterNotFoundAction != admissionv1.AllowAction {
		t.Errorf("the apps policy's binding: %+v %v, want a record not found to let the request through", b, err)
	}
}
