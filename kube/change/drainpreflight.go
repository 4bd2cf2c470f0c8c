package change

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/kube/safety"
)

// CheckDrain reads what a drain of node would do and judges it. The reads
// are one-shot: a drain is an action, not steady state.
// opts are the drain's own, so the filters judge the pods as the drain will
// (with DeleteEmptyDirData, a pod with emptyDir data is evicted, not refused).
// Whether Longhorn is installed is asked again here, not taken from when
// the snapshot started: a console opened before Longhorn was installed
// must still judge the replicas.
func CheckDrain(ctx context.Context, clients *kube.Clients, d kube.Data, node string, opts DrainOptions) (safety.Preflight, error) {
	if !slices.ContainsFunc(d.Nodes, func(n *corev1.Node) bool { return n.Name == node }) {
		return safety.Preflight{}, fmt.Errorf("%s: %w (nodes: %s)", node, safety.ErrUnknownNode, kube.NodeNames(d.Nodes))
	}
	d, err := withLonghorn(ctx, clients, d)
	if err != nil {
		return safety.Preflight{}, err
	}
	purpose, local := opts.Purpose, opts.LocalNode
	opts.Progress = nil
	h := opts.helper(ctx, clients.Core)
	list, errs := h.GetPodsForDeletion(node)
	check := DrainCheck{Node: node, Data: d, Apps: kube.AppsAsReported(d), Excluded: errs, Purpose: purpose, LocalNode: local, Now: time.Now()}
	if list != nil {
		check.Evict = list.Pods()
	}
	if d.HasLonghorn {
		if s, err := clients.Longhorn.LonghornV1beta2().Settings(kube.LonghornNamespace).Get(ctx, kube.LonghornDrainPolicySetting, metav1.GetOptions{}); err == nil {
			check.LonghornPolicy = s.Value
		}
	}
	return safety.DrainPreflight(check.Facts()), nil
}

// DrainCheck is what the drain preflight judges, as read from the cluster:
// the snapshot's data, and the pods the drain would evict (from kubectl's
// drain filters). Facts turns it, once, into the plain values the rule in
// kube/safety (safety.DrainPreflight) judges.
type DrainCheck struct {
	Node     string
	Data     kube.Data
	Apps     []kube.AppStatus
	Evict    []corev1.Pod
	Excluded []error // pods the drain filters refuse (unmanaged, local data)
	// LonghornPolicy is Longhorn's node-drain-policy setting, if read.
	LonghornPolicy string
	// Purpose: a drain (the zero value), a remove or a replace.
	Purpose safety.Purpose
	// LocalNode is the node this program runs on, when known: a node does
	// not remove itself.
	LocalNode string
	// Now judges the age of the published etcd member list; zero: the
	// current time.
	Now time.Time
}

// Facts is the check as the preflight rule reads it: each Node's
// readiness and role, etcd's member list as counted (EtcdQuorumMembers),
// the volumes and their replicas, the pinned apps, and the pods by name.
func (c DrainCheck) Facts() safety.DrainFacts {
	now := c.Now
	if now.IsZero() {
		now = time.Now()
	}
	f := safety.DrainFacts{
		Node: c.Node, Nodes: kube.NodeFacts(c.Data.Nodes), Etcd: nodestate.EtcdQuorumMembers(c.Data, now),
		Volumes: c.Data.Volumes, Replicas: c.Data.Replicas,
		LonghornPolicy: c.LonghornPolicy, Purpose: c.Purpose, LocalNode: c.LocalNode,
	}
	pinned := map[string]bool{}
	for _, a := range c.Apps {
		f.Apps = append(f.Apps, safety.App{Name: a.Name, Node: a.Node, Pinned: a.Mode == kube.AppModePinned, Ready: a.Ready})
		pinned[a.Name] = a.Mode == kube.AppModePinned
	}
	// Every app pod bound to the node, the evicted ones too: a pod
	// evicted from a node that does not answer is deleted only in the API
	// server, its copy on the device runs on.
	for _, pod := range c.Data.Pods {
		app := pod.Labels[kube.LabelAppName]
		if pod.Spec.NodeName != c.Node || pod.Namespace != kube.AppNamespace || app == "" || pinned[app] ||
			pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		held := slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.PersistentVolumeClaim != nil })
		f.MovablePods = append(f.MovablePods, safety.AppPod{Pod: pod.Namespace + "/" + pod.Name, App: app, HeldByAVolume: held})
	}
	slices.SortFunc(f.MovablePods, func(a, b safety.AppPod) int { return strings.Compare(a.Pod, b.Pod) })
	for _, pod := range c.Evict {
		f.Evict = append(f.Evict, pod.Namespace+"/"+pod.Name)
	}
	for _, err := range c.Excluded {
		f.Excluded = append(f.Excluded, err.Error())
	}
	return f
}

// longhornInstalled asks the API server whether Longhorn's volumes exist.
// An answer that cannot be had is an error, not "no Longhorn": unknown is
// not empty, and a preflight that skipped the replicas would pass a drain
// that strands the last copy.
func longhornInstalled(ctx context.Context, clients *kube.Clients) (bool, error) {
	list, err := clients.Core.Discovery().ServerResourcesForGroupVersion(lhv1beta2.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cannot tell whether Longhorn is installed (discovery of %s: %w); not judging a drain without its replicas", lhv1beta2.SchemeGroupVersion, err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "volumes" }), nil
}

// withLonghorn fills d's Longhorn volumes and replicas from the API server
// when the snapshot was started without them and Longhorn exists now.
func withLonghorn(ctx context.Context, clients *kube.Clients, d kube.Data) (kube.Data, error) {
	has, err := longhornInstalled(ctx, clients)
	if err != nil || !has || d.HasLonghorn {
		return d, err
	}
	return readLonghorn(ctx, clients, d)
}

func readLonghorn(ctx context.Context, clients *kube.Clients, d kube.Data) (kube.Data, error) {
	lh := clients.Longhorn.LonghornV1beta2()
	volumes, err := lh.Volumes(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	replicas, err := lh.Replicas(kube.LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	d.HasLonghorn = true
	d.Volumes, d.Replicas = nil, nil
	for i := range volumes.Items {
		d.Volumes = append(d.Volumes, &volumes.Items[i])
	}
	for i := range replicas.Items {
		d.Replicas = append(d.Replicas, &replicas.Items[i])
	}
	return d, nil
}

// freshDrainData replaces, in d, what the drain preflight judges by (nodes,
// the published etcd member list, Longhorn volumes and replicas) with a
// read from the API server. These are one-shot reads for an action, not
// steady state.
func freshDrainData(ctx context.Context, clients *kube.Clients, d kube.Data) (kube.Data, error) {
	nodes, err := clients.Core.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	d.Nodes = nil
	for i := range nodes.Items {
		d.Nodes = append(d.Nodes, &nodes.Items[i])
	}
	members, err := clients.Core.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.EtcdMembersConfigMapName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return d, fmt.Errorf("etcd member list: %w", err)
	}
	d.ConfigMaps = slices.DeleteFunc(slices.Clone(d.ConfigMaps), func(cm *corev1.ConfigMap) bool {
		return cm.Name == kube.EtcdMembersConfigMapName
	})
	if err == nil {
		d.ConfigMaps = append(d.ConfigMaps, members)
	}
	// Asked again, not taken from d: Longhorn may have come since.
	has, err := longhornInstalled(ctx, clients)
	if err != nil || !has {
		d.HasLonghorn, d.Volumes, d.Replicas = false, nil, nil
		return d, err
	}
	return readLonghorn(ctx, clients, d)
}

// freshClusterRecord replaces, in d, the sitecon-cluster ConfigMap with a
// read from the API server (none when it is gone).
func freshClusterRecord(ctx context.Context, clients *kube.Clients, d kube.Data) (kube.Data, error) {
	cm, err := clients.Core.CoreV1().ConfigMaps(kube.AppNamespace).Get(ctx, kube.ClusterConfigMapName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return d, fmt.Errorf("cluster record: %w", err)
	}
	d.ConfigMaps = slices.DeleteFunc(slices.Clone(d.ConfigMaps), func(c *corev1.ConfigMap) bool {
		return c.Name == kube.ClusterConfigMapName && c.Namespace == kube.AppNamespace
	})
	if err == nil {
		d.ConfigMaps = append(d.ConfigMaps, cm)
	}
	return d, nil
}
