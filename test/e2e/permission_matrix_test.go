package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/access"
	"github.com/sitecon/sitecon/test/sitebox"
)

// What an identity may do to one of sitecon's objects, as the API server
// answers with the real RBAC and the node policy (kube.NodePolicyName).
const (
	allowed = "allowed" // authorised and admitted
	refused = "refused" // Forbidden: not granted, or refused by Kubernetes' own NodeRestriction
	byNode  = "policy"  // refused by a node policy (kube.NodePolicyName, kube.NodeAppsPolicyName)
)

// permissionCell is one cell of the permission matrix: who, doing what to
// which object, and the answer. gap names a known hole, answered
// "allowed" today though least privilege would refuse it
// (docs/SECURITY.md, "Not refused yet"): closing it fails this test
// until the cell says so.
type permissionCell struct {
	who, verb, object, want, gap string
}

// The identities: a worker's agent (its node's own credential, node-c),
// the k3s controller identity every node shares (which older agents ran
// with), and a server's agent (the cluster's admin credential, as on a
// device).
const (
	asWorker     = "worker node-c"
	asController = "k3s controller"
	asServer     = "server"
	// An app's pod, with its namespace's default service account token,
	// and a host on the LAN with no credential at all.
	asApp       = "an app"
	asAnonymous = "anonymous"
	// The technician's read-only account (sitecon readonly-kubeconfig).
	asReadOnly = "read-only account"
)

// permissionMatrix is the whole of it, written once. Every resource and
// write verb the agents' grant names (access.AgentRules,
// access.AgentLayoutRules) has its worker row: a rule added without one
// fails TestPermissionMatrix.
var permissionMatrix = []permissionCell{
	// Cluster-wide state: servers only.
	{asWorker, "patch", "the cluster record", refused, ""},
	{asWorker, "update", "the cluster record", refused, ""},
	{asWorker, "delete", "the cluster record", refused, ""},
	{asWorker, "create", "a ConfigMap", refused, ""},
	{asController, "patch", "the cluster record", refused, ""},
	{asServer, "patch", "the cluster record", allowed, ""},
	// Pods: its own node's, removed by its fence's renewal; no other's.
	{asWorker, "delete", "a pod on its node", allowed, ""},
	{asWorker, "delete", "a pod on another node", refused, ""},
	{asWorker, "create", "an eviction of a pod on its node", allowed, ""},
	{asWorker, "create", "an eviction of a pod on another node", refused, ""},
	{asWorker, "get", "the log of a pod on another node", refused, ""},
	{asController, "delete", "a pod on another node", refused, ""},
	{asServer, "delete", "a pod on another node", allowed, ""},
	{asServer, "create", "an eviction of a pod on another node", allowed, ""},
	// Nodes: its own labels (its kubelet's), never its UUID; no Node removed.
	{asWorker, "patch", "its Node", allowed, ""},
	{asWorker, "patch", "its Node's UUID label", byNode, ""},
	{asWorker, "patch", "its Node's schedulability", allowed, ""},
	{asWorker, "get", "a DaemonSet", allowed, ""},
	{asWorker, "update", "a DaemonSet", refused, ""},
	{asWorker, "patch", "another Node", refused, ""},
	{asWorker, "delete", "its Node", refused, ""},
	{asServer, "patch", "another Node", allowed, ""},
	// The stats leader: servers stand, workers follow.
	{asWorker, "create", "the stats-leader Lease", refused, ""},
	{asWorker, "update", "the stats-leader Lease", refused, ""},
	{asServer, "update", "the stats-leader Lease", allowed, ""},
	// Workloads: laid out for its own node only, never with the host's
	// privileges.
	{asWorker, "create", "a Deployment for its node", allowed, ""},
	{asWorker, "create", "a Deployment for another node", byNode, ""},
	{asWorker, "create", "a privileged Deployment for its node", byNode, ""},
	{asWorker, "update", "a Deployment for another node", byNode, ""},
	{asWorker, "patch", "a Deployment for another node", byNode, ""},
	{asWorker, "delete", "a Deployment for its node", allowed, ""},
	{asWorker, "delete", "a Deployment for another node", byNode, ""},
	// Whose app: the servers' record (kube.DesignationsConfigMapName)
	// names each app's node, and a node writes only its own apps.
	{asWorker, "patch", "a Deployment for another node, re-pointed to its node", byNode, ""},
	{asWorker, "create", "a Deployment for its node, of an app recorded as another node's", byNode, ""},
	{asWorker, "create", "a Deployment for its node, of an app recorded nowhere", byNode, ""},
	{asWorker, "create", "a Deployment for its node, with another app's claim", byNode, ""},
	{asWorker, "create", "a Deployment for its node, selecting another app's pods", byNode, ""},
	{asWorker, "create", "a Deployment for its node, named for another app", byNode, ""},
	{asWorker, "create", "a Deployment for its node, with a volume cloned from another app's claim", byNode, ""},
	{asWorker, "create", "a VMI for its node, with a disk over another app's claim", byNode, ""},
	{asWorker, "create", "a VMI replica set for its node, selecting another app's VMIs", byNode, ""},
	{asWorker, "patch", "the config stamps on a Deployment it laid out, of an app now another node's", allowed, ""},
	{asWorker, "patch", "a Deployment it laid out, of an app now another node's", byNode, ""},
	{asWorker, "delete", "a Deployment it laid out, of an app now another node's", byNode, ""},
	{asWorker, "delete", "a Deployment it laid out, of an app laid out no more", allowed, ""},
	{asWorker, "delete", "a Deployment another node laid out, of an app laid out no more", byNode, ""},
	{asWorker, "patch", "the record of designations", refused, ""},
	{asServer, "patch", "a Deployment for another node, re-pointed to its node", allowed, ""},
	{asWorker, "deletecollection", "the Deployments", refused, ""},
	{asWorker, "create", "a VMI for its node", allowed, ""},
	{asWorker, "create", "a VMI for another node", byNode, ""},
	{asWorker, "update", "a VMI for another node", byNode, ""},
	{asWorker, "patch", "a VMI for another node", byNode, ""},
	{asWorker, "delete", "a VMI for another node", byNode, ""},
	{asWorker, "create", "a VMI replica set for its node", allowed, ""},
	{asWorker, "create", "a VMI replica set for another node", byNode, ""},
	{asWorker, "update", "a VMI replica set for another node", byNode, ""},
	{asWorker, "patch", "a VMI replica set for another node", byNode, ""},
	{asWorker, "delete", "a VMI replica set for another node", byNode, ""},
	{asController, "create", "a Deployment for its node", refused, ""},
	{asServer, "create", "a Deployment for another node", allowed, ""},
	{asServer, "delete", "a Deployment for another node", allowed, ""},
	// Claims: a node makes none (NodeRestriction admits only a claim's
	// status from a node): the leading server makes a worker's volumes'
	// claims. Nobody's agent removes one (a volume's data outlives its app).
	{asWorker, "create", "a claim", refused, ""},
	{asWorker, "update", "a claim", refused, ""},
	{asWorker, "patch", "a claim", refused, ""},
	{asWorker, "delete", "a claim", refused, ""},
	{asServer, "create", "a claim", allowed, ""},
	// Volume attachments: released by the servers' failover guard only.
	{asWorker, "delete", "a VolumeAttachment", refused, ""},
	{asServer, "delete", "a VolumeAttachment", allowed, ""},
	// Storage classes: sitecon's own Longhorn classes, as named.
	{asWorker, "create", "sitecon's storage class", allowed, ""},
	{asWorker, "create", "another storage class", byNode, ""},
	{asWorker, "patch", "sitecon's storage class", allowed, ""},
	{asWorker, "update", "sitecon's storage class", refused, ""},
	{asWorker, "delete", "sitecon's storage class", refused, ""},
	// Events: every agent records its own.
	{asWorker, "create", "an Event", allowed, ""},
	{asWorker, "update", "an Event", allowed, ""},
	{asWorker, "patch", "an Event", allowed, ""},
	{asController, "create", "an Event", refused, ""},
	// VM consoles: the agent's bridge serves its node's VMs.
	{asWorker, "get", "the console of a VMI on its node", allowed, ""},
	{asWorker, "get", "the console of a VMI on another node", refused, ""},
	{asController, "get", "the console of a VMI on another node", refused, ""},
	// An app, and a host on the LAN: nothing of sitecon's.
	{asApp, "patch", "the cluster record", refused, ""},
	{asApp, "delete", "a pod on another node", refused, ""},
	{asApp, "create", "a Deployment for another node", refused, ""},
	{asApp, "create", "a claim", refused, ""},
	{asApp, "delete", "a VolumeAttachment", refused, ""},
	{asApp, "get", "the console of a VMI on its node", refused, ""},
	{asApp, "update", "the stats-leader Lease", refused, ""},
	{asAnonymous, "patch", "the cluster record", refused, ""},
	{asAnonymous, "delete", "a pod on another node", refused, ""},
	{asAnonymous, "get", "the console of a VMI on its node", refused, ""},
	{asAnonymous, "get", "the log of a pod on another node", refused, ""},
	// The technician's read-only account: reads, and writes nothing.
	{asReadOnly, "get", "the log of a pod on another node", allowed, ""},
	{asReadOnly, "patch", "the cluster record", refused, ""},
	{asReadOnly, "patch", "another Node", refused, ""},
	{asReadOnly, "delete", "a pod on another node", refused, ""},
	{asReadOnly, "create", "an eviction of a pod on another node", refused, ""},
	{asReadOnly, "create", "a Deployment for another node", refused, ""},
	{asReadOnly, "create", "a claim", refused, ""},
	{asReadOnly, "delete", "a VolumeAttachment", refused, ""},
	{asReadOnly, "update", "the stats-leader Lease", refused, ""},
	{asReadOnly, "create", "an Event", refused, ""},
	{asReadOnly, "get", "the console of a VMI on its node", refused, ""},
}

// matrixObject is an object of the matrix: its resource, and how to make
// a new one (create) or name the existing one (the other verbs).
type matrixObject struct {
	gvr         schema.GroupVersionResource
	subresource string
	namespace   string
	name        string
	// fresh is a new object of this kind for a create (nil: no create).
	fresh func() *unstructured.Unstructured
	// patch is the merge patch a patch sends (default: an annotation).
	patch string
}

func TestPermissionMatrix(t *testing.T) {
	site := sitebox.Shared(t)
	ctx := t.Context()
	admin, err := kubernetes.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	grantAgentAccessAfresh(t, admin)
	controllerCfg, err := kube.LoadRESTConfig(site.K3sControllerKubeconfig(), "")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := admin.CoreV1().ServiceAccounts(kube.AppNamespace).CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the app namespace's default service account: %v", err)
	}
	appCfg := rest.AnonymousClientConfig(site.Config)
	appCfg.BearerToken = tok.Status.Token
	if err := access.EnsureReadOnlyAccount(ctx, admin); err != nil {
		t.Fatal(err)
	}
	readOnlyToken, _, err := access.ReadOnlyToken(ctx, admin, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	readOnlyCfg := rest.AnonymousClientConfig(site.Config)
	readOnlyCfg.BearerToken = readOnlyToken
	configs := map[string]*rest.Config{asWorker: workerIdentity(t, site, "node-c"), asController: controllerCfg, asServer: site.Config,
		asApp: appCfg, asAnonymous: rest.AnonymousClientConfig(site.Config), asReadOnly: readOnlyCfg}
	// The read-only role reads: a write verb added to it fails here.
	for _, r := range slices.Concat(access.ReadOnlyRules, access.ReadOnlyAppNamespaceRules) {
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("the read-only role grants %s on %v", v, r.Resources)
			}
		}
	}
	const own, other = "node-c", "node-a"
	objects := matrixObjects(t, ctx, site, admin, own, other)

	// Every resource and write verb the grant names has a worker row.
	granted := map[string]bool{}
	for _, r := range slices.Concat(access.AgentRules, access.AgentLayoutRules) {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				if v == "get" && !strings.Contains(res, "/") || v == "list" || v == "watch" {
					continue // reads: what the snapshot watches
				}
				granted[res+" "+v] = true
			}
		}
	}
	for _, c := range permissionMatrix {
		o, ok := objects[c.object]
		if !ok {
			t.Fatalf("the matrix names %q, which the test does not make", c.object)
		}
		if c.who == asWorker {
			res := o.gvr.Resource
			if o.subresource != "" {
				res += "/" + o.subresource
			}
			delete(granted, res+" "+c.verb)
		}
	}
	for _, g := range slices.Sorted(func(yield func(string) bool) {
		for g := range granted {
			if !yield(g) {
				return
			}
		}
	}) {
		t.Errorf("the agents' grant allows %q, and the permission matrix has no worker row for it", g)
	}

	clients := map[string]struct {
		dyn dynamic.Interface
		cs  kubernetes.Interface
	}{}
	for who, cfg := range configs {
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		clients[who] = struct {
			dyn dynamic.Interface
			cs  kubernetes.Interface
		}{dyn, cs}
	}
	adminDyn := dynClient(t, site)
	answer := func(c permissionCell) (string, error) {
		err := doMatrixVerb(ctx, clients[c.who].dyn, clients[c.who].cs, adminDyn, c.verb, objects[c.object])
		return judge(err, objects[c.object].subresource != ""), err
	}
	// The grant reaches the authorizer, and the policy admission, within
	// seconds: a cell each must answer by them before any is judged (an
	// answer from before would be the old rules').
	for _, c := range []permissionCell{{asWorker, "create", "a Deployment for its node", allowed, ""}, {asWorker, "create", "a Deployment for another node", byNode, ""}} {
		_ = until(t, 20*time.Second, fmt.Sprintf("%s %s %s: %s (the rules in force)", c.who, c.verb, c.object, c.want), func() (error, bool) {
			got, err := answer(c)
			return err, got == c.want
		}, func(err error) string { return fmt.Sprintf("last answer: %v", err) })
	}
	for _, c := range permissionMatrix {
		got, err := answer(c)
		switch {
		case got == "":
			t.Errorf("%s %s %s: could not judge the answer: %v", c.who, c.verb, c.object, err)
		case got != c.want && c.gap != "":
			t.Errorf("%s %s %s: %s (%v); the matrix says %s, a known gap (%s): closed? say so in the matrix and docs/SECURITY.md", c.who, c.verb, c.object, got, err, c.want, c.gap)
		case got != c.want:
			t.Errorf("%s %s %s: %s (%v), want %s", c.who, c.verb, c.object, got, err, c.want)
		}
	}
}

// judge names the API server's answer: allowed (a dry run went through, or
// an object or backend not there once authorised), refused by RBAC or by
// the node policy; "" when it cannot tell.
func judge(err error, subresource bool) string {
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsAlreadyExists(err):
		return allowed
	case refusedByPolicy(err):
		return byNode
	case apierrors.IsForbidden(err):
		return refused
	case subresource:
		// Authorised: the backend (KubeVirt's API, a kubelet) is a
		// simulator's or absent, and answered otherwise.
		return allowed
	}
	return ""
}

// doMatrixVerb does verb to o with the identity's clients, as a dry run:
// nothing changes.
func doMatrixVerb(ctx context.Context, dyn dynamic.Interface, cs kubernetes.Interface, adminDyn dynamic.Interface, verb string, o matrixObject) error {
	dry := []string{metav1.DryRunAll}
	res := dyn.Resource(o.gvr).Namespace(o.namespace)
	if o.namespace == "" {
		res = dyn.Resource(o.gvr)
	}
	switch {
	case o.subresource == "eviction":
		return cs.PolicyV1().Evictions(o.namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: o.name, Namespace: o.namespace},
			DeleteOptions: &metav1.DeleteOptions{DryRun: dry}})
	case o.subresource == "log":
		_, err := cs.CoreV1().Pods(o.namespace).GetLogs(o.name, &corev1.PodLogOptions{}).DoRaw(ctx)
		return err
	case o.subresource != "":
		_, err := dyn.Resource(o.gvr).Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{}, o.subresource)
		return err
	}
	switch verb {
	case "create":
		_, err := res.Create(ctx, o.fresh(), metav1.CreateOptions{DryRun: dry})
		return err
	case "update":
		cur, err := adminDyn.Resource(o.gvr).Namespace(o.namespace).Get(ctx, o.name, metav1.GetOptions{})
		if o.namespace == "" {
			cur, err = adminDyn.Resource(o.gvr).Get(ctx, o.name, metav1.GetOptions{})
		}
		if err != nil {
			return fmt.Errorf("read %s for the update: %w", o.name, err)
		}
		cur.SetAnnotations(mergeAnnotations(cur.GetAnnotations(), "sitecon.io/matrix", "update"))
		_, err = res.Update(ctx, cur, metav1.UpdateOptions{DryRun: dry})
		return err
	case "patch":
		p := o.patch
		if p == "" {
			p = `{"metadata":{"annotations":{"sitecon.io/matrix":"patch"}}}`
		}
		_, err := res.Patch(ctx, o.name, types.MergePatchType, []byte(p), metav1.PatchOptions{DryRun: dry})
		return err
	case "get":
		_, err := res.Get(ctx, o.name, metav1.GetOptions{})
		return err
	case "delete":
		return res.Delete(ctx, o.name, metav1.DeleteOptions{DryRun: dry})
	case "deletecollection":
		return res.DeleteCollection(ctx, metav1.DeleteOptions{DryRun: dry}, metav1.ListOptions{})
	}
	return fmt.Errorf("no verb %q", verb)
}

func mergeAnnotations(a map[string]string, k, v string) map[string]string {
	if a == nil {
		a = map[string]string{}
	}
	a[k] = v
	return a
}

// matrixObjects makes (as the admin) the objects the matrix acts on, on
// own's node and on other's, and removes them when the test ends.
func matrixObjects(t *testing.T, ctx context.Context, site *sitebox.TestSite, admin kubernetes.Interface, own, other string) map[string]matrixObject {
	t.Helper()
	adminDyn := dynClient(t, site)
	ns := kube.AppNamespace
	toUnstructured := func(obj runtime.Object) *unstructured.Unstructured {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		return &unstructured.Unstructured{Object: m}
	}
	gvr := func(group, version, resource string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
	}
	cmGVR, podGVR, nodeGVR := gvr("", "v1", "configmaps"), gvr("", "v1", "pods"), gvr("", "v1", "nodes")
	leaseGVR, pvcGVR := gvr("coordination.k8s.io", "v1", "leases"), gvr("", "v1", "persistentvolumeclaims")
	vaGVR, scGVR, evGVR := gvr("storage.k8s.io", "v1", "volumeattachments"), gvr("storage.k8s.io", "v1", "storageclasses"), gvr("", "v1", "events")
	vncGVR := gvr("subresources.kubevirt.io", "v1", "virtualmachineinstances")
	dsGVR := gvr("apps", "v1", "daemonsets")

	// What exists for the verbs other than create: made real, removed after.
	made := func(g schema.GroupVersionResource, obj *unstructured.Unstructured) {
		t.Helper()
		r := adminDyn.Resource(g).Namespace(obj.GetNamespace())
		if obj.GetNamespace() == "" {
			r = adminDyn.Resource(g)
		}
		_, err := r.Create(ctx, obj, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			return // not this test's: left as it is
		case err != nil:
			t.Fatalf("make %s %s: %v", g.Resource, obj.GetName(), err)
		}
		t.Cleanup(func() {
			_ = r.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		})
	}
	pod := func(name, node string) *unstructured.Unstructured {
		return toUnstructured(&corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.local/idle:1"}},
				Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}})
	}
	made(podGVR, pod("matrix-pod-own", own))
	made(podGVR, pod("matrix-pod-other", other))
	if _, err := admin.CoreV1().ConfigMaps(ns).Get(ctx, kube.ClusterConfigMapName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		made(cmGVR, toUnstructured(&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: kube.ClusterConfigMapName, Namespace: ns}}))
	}
	clearStatsLeaderLease(t, admin)
	made(leaseGVR, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
		"metadata": map[string]any{"name": kube.StatsLeaderLeaseName, "namespace": ns}, "spec": map[string]any{"holderIdentity": other}}})
	claim := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}}}}}
	}
	made(pvcGVR, claim("matrix-claim"))
	class := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
			"metadata": map[string]any{"name": name}, "provisioner": apps.LonghornProvisioner,
			"parameters": map[string]any{"numberOfReplicas": "3"}}}
	}
	made(scGVR, class("sitecon-longhorn-r3"))
	event := func(name string) *unstructured.Unstructured {
		return toUnstructured(&corev1.Event{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"},
			ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "matrix-pod-own"}, Reason: "Matrix", Message: "the permission matrix", Type: "Normal"})
	}
	made(evGVR, event("matrix-event"))
	made(dsGVR, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": "matrix-ds", "namespace": ns},
		"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "matrix-ds"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "matrix-ds"}},
				"spec": map[string]any{"nodeSelector": map[string]any{"kubernetes.io/hostname": "no-such-node"},
					"containers": []any{map[string]any{"name": "c", "image": "registry.local/idle:1"}}}}}}})

	// Workloads as the agent lays them out, for each node.
	workloads := map[string]apps.Layout{}
	for _, kind := range []struct{ key, appKind, affinity string }{
		{"a Deployment", apps.KindContainer, apps.AffinityRequired},
		{"a VMI", apps.KindVM, apps.AffinityRequired},
		{"a VMI replica set", apps.KindVM, apps.AffinityPreferred},
	} {
		for where, node := range map[string]string{"its node": own, "another node": other} {
			l := layoutOf(t, fmt.Sprintf("matrix-%s-%s", strings.ReplaceAll(strings.TrimPrefix(kind.key, "a "), " ", ""), node), kind.appKind, kind.affinity, node)
			if err := applyLayout(ctx, adminDyn, l, false); err != nil {
				t.Fatalf("lay out %s for %s: %v", kind.key, node, err)
			}
			t.Cleanup(func() {
				_ = adminDyn.Resource(l.GVR).Namespace(l.Namespace()).Delete(context.Background(), l.Name(), metav1.DeleteOptions{})
			})
			workloads[kind.key+" for "+where] = l
		}
	}
	// Whose app each is, as the stats leader records it: the workloads
	// above their nodes'; and the cases of the record below.
	record := map[string]apps.Layout{}
	for key, l := range workloads {
		node := own
		if strings.HasSuffix(key, "another node") {
			node = other
		}
		record[node+"/"+key] = l
	}
	// Laid out by own (its UUID stamped) for an app recorded as other's
	// now, and for an app recorded nowhere (deactivated); laid out by
	// other for an app recorded nowhere.
	handedOver := layoutOf(t, "matrix-handed-over", apps.KindContainer, apps.AffinityRequired, own)
	goneOwn := layoutOf(t, "matrix-gone-own", apps.KindContainer, apps.AffinityRequired, own)
	goneOther := layoutOf(t, "matrix-gone-other", apps.KindContainer, apps.AffinityRequired, other)
	recordedElsewhere := layoutOf(t, "matrix-recorded-elsewhere", apps.KindContainer, apps.AffinityRequired, own)
	unrecorded := layoutOf(t, "matrix-unrecorded", apps.KindContainer, apps.AffinityRequired, own)
	for _, l := range []apps.Layout{handedOver, goneOwn, goneOther} {
		if err := applyLayout(ctx, adminDyn, l, false); err != nil {
			t.Fatalf("lay out %s: %v", l.Name(), err)
		}
		t.Cleanup(func() {
			_ = adminDyn.Resource(l.GVR).Namespace(l.Namespace()).Delete(context.Background(), l.Name(), metav1.DeleteOptions{})
		})
	}
	record[other+"/handed-over"] = handedOver
	record[other+"/recorded-elsewhere"] = recordedElsewhere
	ownApp := workloads["a Deployment for its node"].Object.GetLabels()[kube.LabelAppUUID]
	recordDesignations(t, admin, record, map[string][]string{"matrix-claim": {"another-app"}, "matrix-own-claim": {ownApp}})
	withClaim := func(claim string) *unstructured.Unstructured {
		o := workloads["a Deployment for its node"].Object.DeepCopy()
		o.SetName("claim-" + workloads["a Deployment for its node"].Name())
		if err := unstructured.SetNestedSlice(o.Object, []any{map[string]any{"name": "data", "persistentVolumeClaim": map[string]any{"claimName": claim}}},
			"spec", "template", "spec", "volumes"); err != nil {
			t.Fatal(err)
		}
		return o
	}
	if _, err := adminDyn.Resource(apps.GVRDeployment).Namespace(ns).Create(ctx, withClaim("matrix-own-claim"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("a Deployment with its own claim, as the admin: %v", err)
	}
	// Its own app's workload whose selector (and template) is another
	// app's: it would adopt that app's unowned pods or VMIs.
	selecting := func(l apps.Layout, app string) *unstructured.Unstructured {
		o := l.Object.DeepCopy()
		o.SetName("selecting-" + l.Name())
		for _, path := range [][]string{{"spec", "selector", "matchLabels"}, {"spec", "template", "metadata", "labels"}} {
			if err := unstructured.SetNestedField(o.Object, app, append(path, kube.LabelAppUUID)...); err != nil {
				t.Fatal(err)
			}
		}
		return o
	}
	otherApp := workloads["a Deployment for another node"].Object.GetLabels()[kube.LabelAppUUID]
	squatting := func() *unstructured.Unstructured {
		o := workloads["a Deployment for its node"].Object.DeepCopy()
		o.SetName("matrix-squat-" + otherApp[:8])
		return o
	}
	// Volumes that reach another app's claim other than by mounting it.
	withVolume := func(l apps.Layout, path []string, volume map[string]any) *unstructured.Unstructured {
		o := l.Object.DeepCopy()
		o.SetName("volume-" + l.Name())
		vols, _, _ := unstructured.NestedSlice(o.Object, path...)
		if err := unstructured.SetNestedSlice(o.Object, append(vols, volume), path...); err != nil {
			t.Fatal(err)
		}
		return o
	}
	cloned := map[string]any{"name": "cloned", "ephemeral": map[string]any{"volumeClaimTemplate": map[string]any{"spec": map[string]any{
		"accessModes": []any{"ReadWriteOnce"}, "resources": map[string]any{"requests": map[string]any{"storage": "1Gi"}},
		"dataSource": map[string]any{"kind": "PersistentVolumeClaim", "name": "matrix-claim"}}}}}
	overlay := map[string]any{"name": "overlay", "ephemeral": map[string]any{"persistentVolumeClaim": map[string]any{"claimName": "matrix-claim"}}}
	repoint := fmt.Sprintf(`{"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":[%q]}]}]}}}}}}}`, own)
	named := func(l apps.Layout) *unstructured.Unstructured { return l.Object.DeepCopy() }

	// Each node opens its own VMs' consoles, by name, as the stats leader
	// grants them (access.ConsoleGrants).
	if err := access.GrantNodeConsoles(ctx, admin, own, []string{workloads["a VMI for its node"].Name()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = access.GrantNodeConsoles(context.Background(), admin, own, nil) })
	objects := map[string]matrixObject{
		"the cluster record": {gvr: cmGVR, namespace: ns, name: kube.ClusterConfigMapName},
		"a ConfigMap": {gvr: cmGVR, namespace: ns, name: "matrix-plain", fresh: func() *unstructured.Unstructured {
			return toUnstructured(&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "matrix-plain", Namespace: ns}})
		}},
		"a pod on its node":                    {gvr: podGVR, namespace: ns, name: "matrix-pod-own"},
		"a pod on another node":                {gvr: podGVR, namespace: ns, name: "matrix-pod-other"},
		"an eviction of a pod on its node":     {gvr: podGVR, subresource: "eviction", namespace: ns, name: "matrix-pod-own"},
		"an eviction of a pod on another node": {gvr: podGVR, subresource: "eviction", namespace: ns, name: "matrix-pod-other"},
		"the log of a pod on another node":     {gvr: podGVR, subresource: "log", namespace: ns, name: "matrix-pod-other"},
		"its Node":                             {gvr: nodeGVR, name: own},
		"its Node's UUID label":                {gvr: nodeGVR, name: own, patch: fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, kube.LabelNodeUUID, sitebox.NodeUUID(other))},
		"another Node":                         {gvr: nodeGVR, name: other},
		"its Node's schedulability":            {gvr: nodeGVR, name: own, patch: `{"spec":{"unschedulable":true}}`},
		"a DaemonSet":                          {gvr: dsGVR, namespace: ns, name: "matrix-ds"},
		"the stats-leader Lease": {gvr: leaseGVR, namespace: ns, name: kube.StatsLeaderLeaseName, fresh: func() *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": map[string]any{"name": "matrix-lease", "namespace": ns}}}
		}},
		"a claim":                              {gvr: pvcGVR, namespace: ns, name: "matrix-claim", fresh: func() *unstructured.Unstructured { return claim("matrix-claim-new") }},
		"a VolumeAttachment":                   {gvr: vaGVR, name: "csi-matrix"},
		"sitecon's storage class":              {gvr: scGVR, name: "sitecon-longhorn-r3", fresh: func() *unstructured.Unstructured { return class("sitecon-longhorn-r3") }},
		"another storage class":                {gvr: scGVR, name: "matrix-class", fresh: func() *unstructured.Unstructured { return class("matrix-class") }},
		"an Event":                             {gvr: evGVR, namespace: ns, name: "matrix-event", fresh: func() *unstructured.Unstructured { return event("matrix-event-new") }},
		"the console of a VMI on its node":     {gvr: vncGVR, subresource: "vnc", namespace: ns, name: workloads["a VMI for its node"].Name()},
		"the console of a VMI on another node": {gvr: vncGVR, subresource: "vnc", namespace: ns, name: workloads["a VMI for another node"].Name()},
		"the Deployments":                      {gvr: apps.GVRDeployment, namespace: ns},
		"a privileged Deployment for its node": {gvr: apps.GVRDeployment, namespace: ns, fresh: func() *unstructured.Unstructured { return privileged(t, workloads["a Deployment for its node"]) }},
		"a Deployment for another node, re-pointed to its node":           {gvr: apps.GVRDeployment, namespace: ns, name: workloads["a Deployment for another node"].Name(), patch: repoint},
		"a Deployment for its node, of an app recorded as another node's": {gvr: apps.GVRDeployment, namespace: ns, fresh: func() *unstructured.Unstructured { return named(recordedElsewhere) }},
		"a Deployment for its node, of an app recorded nowhere":           {gvr: apps.GVRDeployment, namespace: ns, fresh: func() *unstructured.Unstructured { return named(unrecorded) }},
		"a Deployment for its node, with another app's claim":             {gvr: apps.GVRDeployment, namespace: ns, fresh: func() *unstructured.Unstructured { return withClaim("matrix-claim") }},
		"a Deployment for its node, named for another app":                {gvr: apps.GVRDeployment, namespace: ns, fresh: squatting},
		"a Deployment for its node, with a volume cloned from another app's claim": {gvr: apps.GVRDeployment, namespace: ns, fresh: func() *unstructured.Unstructured {
			return withVolume(workloads["a Deployment for its node"], []string{"spec", "template", "spec", "volumes"}, cloned)
		}},
		"a VMI for its node, with a disk over another app's claim": {gvr: apps.GVRVMI, namespace: ns, fresh: func() *unstructured.Unstructured {
			return withVolume(workloads["a VMI for its node"], []string{"spec", "volumes"}, overlay)
		}},
		"a Deployment for its node, selecting another app's pods": {gvr: apps.GVRDeployment, namespace: ns, fresh: func() *unstructured.Unstructured {
			return selecting(workloads["a Deployment for its node"], otherApp)
		}},
		"a VMI replica set for its node, selecting another app's VMIs": {gvr: apps.GVRVMIRS, namespace: ns, fresh: func() *unstructured.Unstructured {
			return selecting(workloads["a VMI replica set for its node"], workloads["a VMI for another node"].Object.GetLabels()[kube.LabelAppUUID])
		}},
		"the config stamps on a Deployment it laid out, of an app now another node's": {gvr: apps.GVRDeployment, namespace: ns, name: handedOver.Name(),
			patch: fmt.Sprintf(`{"metadata":{"annotations":{%q:"0123456789abcdef",%q:"7"}}}`, kube.AnnotationConfigHash, kube.AnnotationConfigVersion)},
		"a Deployment it laid out, of an app now another node's":         {gvr: apps.GVRDeployment, namespace: ns, name: handedOver.Name()},
		"a Deployment it laid out, of an app laid out no more":           {gvr: apps.GVRDeployment, namespace: ns, name: goneOwn.Name()},
		"a Deployment another node laid out, of an app laid out no more": {gvr: apps.GVRDeployment, namespace: ns, name: goneOther.Name()},
		"the record of designations":                                     {gvr: cmGVR, namespace: ns, name: kube.DesignationsConfigMapName},
	}
	for key, l := range workloads {
		fresh := func() *unstructured.Unstructured {
			o := l.Object.DeepCopy()
			o.SetName("new-" + l.Name()) // its app's UUID ends a workload's name
			return o
		}
		objects[key] = matrixObject{gvr: l.GVR, namespace: l.Namespace(), name: l.Name(), fresh: fresh}
	}
	return objects
}

// privileged is l's Deployment, its container privileged, as a new object.
func privileged(t *testing.T, l apps.Layout) *unstructured.Unstructured {
	o := l.Object.DeepCopy()
	o.SetName("privileged-" + l.Name())
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	containers[0].(map[string]any)["securityContext"] = map[string]any{"privileged": true}
	if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	return o
}
