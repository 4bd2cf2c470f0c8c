package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// Issue 13 item 1: sitebox refuses, through the real API server, what
// KubeVirt's admission refuses: a VMI (or a VMI replica set template)
// without memory, a disk without a volume, a volume without a source. And
// what the agent lays out for a VM app passes.
func TestKubevirtAdmissionSimulator(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	dyn, err := dynamic.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	vols := map[string]apps.VolumeConfig{"e2e00000-0000-4000-8000-0000000000f1": {UUID: "e2e00000-0000-4000-8000-0000000000f1",
		Name: "adm-disk", DesignatedNodeID: sitebox.NodeUUID("node-b"), Size: "1Gi", ReplicaCount: 1}}
	app := apps.AppConfig{UUID: "e2e00000-0000-4000-8000-0000000000f0", DisplayName: "adm-vm", Activate: true, Kind: apps.KindVM,
		Image: "registry.local/vm:1", DesignatedNodeID: sitebox.NodeUUID("node-b"), VolumeRefs: []string{"e2e00000-0000-4000-8000-0000000000f1"},
		Resources: apps.AppResources{Memory: "1Gi"}}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	create := func(l apps.Layout) error {
		_, err := dyn.Resource(l.GVR).Namespace(l.Namespace()).Create(t.Context(), l.Object, dry)
		return err
	}
	for _, affinity := range []string{apps.AffinityPreferred, apps.AffinityRequired} {
		a := app
		a.Affinity = affinity
		good, err := apps.LayoutApp(a, a.DesignatedNodeID, "node-b", vols, apps.PlacementOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := create(good); err != nil {
			t.Fatalf("%s: the agent's layout of a VM with memory was refused: %v", good.GVR.Resource, err)
		}
		// What the agent laid out before memory was required.
		a.Resources.Memory = ""
		bad, err := apps.LayoutApp(a, a.DesignatedNodeID, "node-b", vols, apps.PlacementOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := create(bad); err == nil || !strings.Contains(err.Error(), "no memory requested") {
			t.Fatalf("%s without memory: %v, want it refused for its memory", bad.GVR.Resource, err)
		}
		// A disk whose volume is gone, and a volume with no source.
		spec := []string{"spec"}
		if bad.GVR == apps.GVRVMIRS {
			spec = []string{"spec", "template", "spec"}
		}
		noVolume := good.Object.DeepCopy()
		volumes, _, _ := unstructured.NestedSlice(noVolume.Object, append(spec, "volumes")...)
		_ = unstructured.SetNestedSlice(noVolume.Object, volumes[:1], append(spec, "volumes")...)
		if err := create(apps.Layout{GVR: good.GVR, Object: noVolume}); err == nil || !strings.Contains(err.Error(), "no volume for disk 'adm-disk'") {
			t.Fatalf("%s with a disk without a volume: %v, want it refused naming the disk", good.GVR.Resource, err)
		}
		noSource := good.Object.DeepCopy()
		volumes[0] = map[string]any{"name": "rootdisk"}
		_ = unstructured.SetNestedSlice(noSource.Object, volumes, append(spec, "volumes")...)
		if err := create(apps.Layout{GVR: good.GVR, Object: noSource}); err == nil || !strings.Contains(err.Error(), "exactly one source type") {
			t.Fatalf("%s with a volume without a source: %v, want it refused", good.GVR.Resource, err)
		}
	}
	// A bare VMI, as a client other than the agent would write it.
	_, err = site.Clients(t).KubeVirt.KubevirtV1().VirtualMachineInstances(kube.AppNamespace).Create(t.Context(),
		&kvv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "no-memory"}}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "no memory requested") {
		t.Fatalf("a VMI without memory: %v, want it refused", err)
	}
}

// Issue 13 item 2: Longhorn detaches a volume nothing uses (its replicas
// stopped, robustness unknown: nothing judges it) and attaches it where a
// pod uses it.
func TestLonghornSimulatorDetachesUnusedVolumes(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	// Settles detached, its one replica stopped (Volume waits for it).
	site.Volume(t, "vol-unused", sitebox.VolumeOptions{Replicas: 1})
	// In use on node-c: attached there, healthy, the replica running.
	v := site.Volume(t, "vol-used", sitebox.VolumeOptions{Replicas: 1, UsedOn: "node-c"})
	if v.Status.State != "attached" || v.Status.CurrentNodeID != "node-c" {
		t.Fatalf("a volume in use: %+v", v.Status)
	}
	lh := site.Clients(t).Longhorn.LonghornV1beta2()
	// The pod goes: the volume detaches, its replica stops.
	if err := site.Clients(t).Core.CoreV1().Pods("default").Delete(t.Context(), "uses-vol-used", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	until(t, 30*time.Second, "vol-used detached (robustness unknown, its one replica stopped) once its pod went", func() (string, bool) {
		v, err := lh.Volumes(kube.LonghornNamespace).Get(t.Context(), "vol-used", metav1.GetOptions{})
		if err != nil {
			return err.Error(), false
		}
		if v.Status.State != "detached" || v.Status.Robustness != "unknown" || v.Status.CurrentNodeID != "" {
			return fmt.Sprintf("volume status %+v", v.Status), false
		}
		reps, err := lh.Replicas(kube.LonghornNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "longhornvolume=vol-used"})
		if err != nil {
			return err.Error(), false
		}
		states := make([]string, len(reps.Items))
		for i := range reps.Items {
			states[i] = string(kube.ReplicaState(&reps.Items[i]))
		}
		return fmt.Sprintf("detached, replicas %v", states), len(reps.Items) == 1 && kube.ReplicaState(&reps.Items[0]) == kube.ReplicaStopped
	}, func(last string) string { return "last seen: " + last })
}

// Issue 13 item 3: the Longhorn simulator places replicas as Longhorn's
// scheduler would for sitecon's storage class (no data locality): it
// ignores sitecon's own dnid annotation on the claim, and puts a replica on
// a given node only when the test itself asks, with the simulator's knob.
func TestLonghornSimulatorIgnoresTheProductsDNId(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	dyn, err := dynamic.NewForConfig(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := apps.LayoutStorageClass(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(sc.GVR).Create(t.Context(), sc.Object, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	claim := func(name string, knob string) {
		t.Helper()
		l, err := apps.LayoutVolume(placeVolume(name))
		if err != nil {
			t.Fatal(err)
		}
		if knob != "" {
			ann := l.Object.GetAnnotations()
			ann[sitebox.AnnotationReplicaNode] = knob
			l.Object.SetAnnotations(ann)
		}
		if _, err := dyn.Resource(l.GVR).Namespace(l.Namespace()).Create(t.Context(), l.Object, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = dyn.Resource(l.GVR).Namespace(l.Namespace()).Delete(context.Background(), l.Name(), metav1.DeleteOptions{})
		})
	}
	claim("place-d1", "")
	claim("place-k2", "node-c")
	lh := site.Clients(t).Longhorn.LonghornV1beta2()
	replicaNode := func(pvc string) string {
		vols, err := lh.Volumes(kube.LonghornNamespace).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return ""
		}
		for _, v := range vols.Items {
			if v.Status.KubernetesStatus.PVCName != pvc {
				continue
			}
			reps, err := lh.Replicas(kube.LonghornNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: "longhornvolume=" + v.Name})
			if err == nil && len(reps.Items) == 1 {
				return reps.Items[0].Spec.NodeID
			}
		}
		return ""
	}
	placed := until(t, 30*time.Second, "both claims' replicas placed", func() ([2]string, bool) {
		d1, k2 := replicaNode(apps.ClaimName(placeVolume("place-d1"))), replicaNode(apps.ClaimName(placeVolume("place-k2")))
		return [2]string{d1, k2}, d1 != "" && k2 != ""
	}, func(p [2]string) string { return fmt.Sprintf("place-d1's replica on %q, place-k2's on %q", p[0], p[1]) })
	d1, k2 := placed[0], placed[1]
	if d1 != "node-a" {
		t.Errorf("a claim whose dnid names node-c got its replica on %s: Longhorn ignores sitecon's annotation (first ready node by name: node-a)", d1)
	}
	if k2 != "node-c" {
		t.Errorf("the test's knob asked for node-c, the replica is on %s", k2)
	}
}

// placeVolume is a one-replica volume whose designated node is node-c.
func placeVolume(name string) apps.VolumeConfig {
	return apps.VolumeConfig{UUID: "e2e00000-0000-4000-8000-0000000000" + map[string]string{"place-d1": "d1", "place-k2": "d2"}[name], Name: name,
		DesignatedNodeID: sitebox.NodeUUID("node-c"), Size: "1Gi", ReplicaCount: 1}
}

// Issue 13 item 4: a ReadWriteOnce Longhorn volume stays attached to the
// node whose pod holds it, and a second pod on another node is held as the
// kubelet holds it (Pending, its container ContainerCreating, a
// Multi-Attach event from the attach/detach controller) until the first pod
// is really gone; then the volume moves and the second pod starts.
func TestLonghornSimulatorKeepsAttachmentWhilePodExists(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	v := site.Volume(t, "vol-held", sitebox.VolumeOptions{Replicas: 1, UsedOn: "node-c"})
	if v.Status.CurrentNodeID != "node-c" {
		t.Fatalf("a volume in use on node-c: %+v", v.Status)
	}
	core := site.Clients(t).Core.CoreV1()
	lh := site.Clients(t).Longhorn.LonghornV1beta2()
	second := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "second-vol-held", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:   "node-a",
			Containers: []corev1.Container{{Name: "c", Image: "registry.local/x:1"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "vol-held"}}}},
		},
	}
	if _, err := core.Pods("default").Create(t.Context(), second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = core.Pods("default").Delete(context.Background(), second.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	// Judged: the pod either ran (the volume moved under the first pod) or
	// was held with the attach/detach controller's word for why.
	held := waitPodJudged(t, site, "default", second.Name, 30*time.Second)
	if held == nil {
		p, _ := core.Pods("default").Get(t.Context(), second.Name, metav1.GetOptions{})
		v, _ := lh.Volumes(kube.LonghornNamespace).Get(t.Context(), "vol-held", metav1.GetOptions{})
		t.Fatalf("the second pod on node-a started while uses-vol-held on node-c still used the volume (phase %s, volume on %q)", p.Status.Phase, v.Status.CurrentNodeID)
	}
	if !strings.Contains(held.Message, `Multi-Attach error for volume "vol-held" Volume is already used by pod(s) uses-vol-held`) {
		t.Fatalf("the held pod's event does not say why: %q", held.Message)
	}
	p, err := core.Pods("default").Get(t.Context(), second.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != corev1.PodPending || kube.PodReady(p) || len(p.Status.ContainerStatuses) != 1 ||
		p.Status.ContainerStatuses[0].State.Waiting == nil || p.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
		t.Fatalf("the held pod is not waiting in ContainerCreating: %+v", p.Status)
	}
	if v, err := lh.Volumes(kube.LonghornNamespace).Get(t.Context(), "vol-held", metav1.GetOptions{}); err != nil || v.Status.CurrentNodeID != "node-c" {
		t.Fatalf("the volume left node-c while its pod there exists: %v %+v", err, v.Status)
	}
	// The first pod goes (its kubelet finishes it): the volume moves to
	// node-a and the second pod starts.
	if err := core.Pods("default").Delete(t.Context(), "uses-vol-held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunsWithVolume(t, site, second.Name, "vol-held", "node-a", 30*time.Second)
}

// The attach/detach controller (the real one, in sitebox's
// kube-controller-manager) does not detach a volume from a lost node that
// last reported it in use, even once the pod there is force-deleted: it
// waits maxWaitForUnmountDuration (6 min), unless the VolumeAttachment is
// deleted or the node carries the out-of-service taint. The simulators
// must not be kinder: the Longhorn volume stays attached to the lost node,
// its VolumeAttachment stays, and a pod elsewhere that wants it stays held,
// well past the point where a simulator that followed pods alone would have
// moved it. Deleting one volume's VolumeAttachment releases that volume
// alone; the out-of-service taint releases every volume of the node.
func TestLonghornSimulatorHoldsVolumeOnLostNodeUntilVolumeAttachmentGoes(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	core := site.Clients(t).Core
	lh := site.Clients(t).Longhorn.LonghornV1beta2()
	names := []string{"vol-lost-1", "vol-lost-2"}
	for _, name := range names {
		if v := site.Volume(t, name, sitebox.VolumeOptions{Replicas: 3, UsedOn: "node-c"}); v.Status.CurrentNodeID != "node-c" {
			t.Fatalf("%s in use on node-c: %+v", name, v.Status)
		}
		// A kubelet attaches nothing itself: the attach/detach controller
		// made a VolumeAttachment, and Longhorn's attacher marked it attached.
		waitVolumeAttachment(t, site, name, "node-c", func(va *storagev1.VolumeAttachment) bool { return va != nil && va.Status.Attached })
	}
	site.RecoverOnCleanup(t, "node-c")
	t.Cleanup(func() { removeOutOfService(t, site, "node-c") })
	if err := site.Fail("node-c"); err != nil {
		t.Fatal(err)
	}
	until(t, 60*time.Second, "node-c marked unreachable", func() (*corev1.Node, bool) {
		n, err := core.CoreV1().Nodes().Get(t.Context(), "node-c", metav1.GetOptions{})
		return n, err == nil && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeUnreachable })
	}, func(n *corev1.Node) string { return fmt.Sprintf("its taints: %+v", n.Spec.Taints) })
	// What the failover guard does: force-delete the pods stuck there, and
	// start others on node-a that want the volumes.
	for _, name := range names {
		if err := core.CoreV1().Pods("default").Delete(t.Context(), "uses-"+name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		second := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "second-" + name, Namespace: "default"},
			Spec: corev1.PodSpec{
				NodeName:   "node-a",
				Containers: []corev1.Container{{Name: "c", Image: "registry.local/x:1"}},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
			},
		}
		if _, err := core.CoreV1().Pods("default").Create(t.Context(), second, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = core.CoreV1().Pods("default").Delete(context.Background(), second.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
	}
	gone := time.Now()
	// Held: for 20 s (a pod-following simulator moved it within a second;
	// the controller holds it for 6 min), the volumes stay on node-c, their
	// VolumeAttachments stay, and the pods on node-a do not start.
	const hold = 20 * time.Second
	holds(t, hold, "the volumes held on lost node-c", func() error {
		for _, name := range names {
			v, err := lh.Volumes(kube.LonghornNamespace).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return nil
			}
			if v.Status.CurrentNodeID != "node-c" {
				return fmt.Errorf("%s left lost node-c %s after its pod there was force-deleted (now on %q, %s); the attach/detach controller holds it for 6 min while node-c last reported it in use",
					name, time.Since(gone).Round(100*time.Millisecond), v.Status.CurrentNodeID, v.Status.State)
			}
			if p, err := core.CoreV1().Pods("default").Get(t.Context(), "second-"+name, metav1.GetOptions{}); err == nil && p.Status.Phase == corev1.PodRunning {
				return fmt.Errorf("second-%s runs on node-a while %s is attached to node-c", name, name)
			}
		}
		return nil
	})
	for _, name := range names {
		waitVolumeAttachment(t, site, name, "node-c", func(va *storagev1.VolumeAttachment) bool { return va != nil && va.DeletionTimestamp == nil })
	}
	// Deleting vol-lost-1's VolumeAttachment releases vol-lost-1 alone.
	va := waitVolumeAttachment(t, site, names[0], "node-c", func(va *storagev1.VolumeAttachment) bool { return va != nil })
	if err := core.StorageV1().VolumeAttachments().Delete(t.Context(), va.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRunsWithVolume(t, site, "second-"+names[0], names[0], "node-a", 60*time.Second)
	if v, err := lh.Volumes(kube.LonghornNamespace).Get(t.Context(), names[1], metav1.GetOptions{}); err != nil || v.Status.CurrentNodeID != "node-c" {
		t.Fatalf("%s left node-c with the other volume's VolumeAttachment: %v %+v", names[1], err, v.Status)
	}
	waitVolumeAttachment(t, site, names[1], "node-c", func(va *storagev1.VolumeAttachment) bool { return va != nil && va.DeletionTimestamp == nil })
	// The out-of-service taint releases whatever is left on the node.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := core.CoreV1().Nodes().Get(t.Context(), "node-c", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute})
		_, err = core.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitRunsWithVolume(t, site, "second-"+names[1], names[1], "node-a", 60*time.Second)
}

// waitVolumeAttachment waits until the VolumeAttachment of the volume's PV
// on node (nil: none) satisfies ok, and returns it.
func waitVolumeAttachment(t *testing.T, site *sitebox.TestSite, pv, node string, ok func(*storagev1.VolumeAttachment) bool) *storagev1.VolumeAttachment {
	t.Helper()
	storage := site.Clients(t).Core.StorageV1()
	return until(t, 30*time.Second, "the VolumeAttachment of "+pv+" on "+node+" as expected", func() (*storagev1.VolumeAttachment, bool) {
		vas, err := storage.VolumeAttachments().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return nil, false
		}
		var found *storagev1.VolumeAttachment
		for i, va := range vas.Items {
			if va.Spec.NodeName == node && ptr.Deref(va.Spec.Source.PersistentVolumeName, "") == pv {
				found = &vas.Items[i]
			}
		}
		return found, ok(found)
	}, func(found *storagev1.VolumeAttachment) string { return fmt.Sprintf("last seen: %+v", found) })
}

// waitRunsWithVolume waits until the pod runs with the volume attached on node.
func waitRunsWithVolume(t *testing.T, site *sitebox.TestSite, pod, volume, node string, within time.Duration) {
	t.Helper()
	core := site.Clients(t).Core.CoreV1()
	lh := site.Clients(t).Longhorn.LonghornV1beta2()
	until(t, within, fmt.Sprintf("%s runs on %s with %s attached there", pod, node, volume), func() (string, bool) {
		v, err := lh.Volumes(kube.LonghornNamespace).Get(t.Context(), volume, metav1.GetOptions{})
		if err != nil {
			return "the volume: " + err.Error(), false
		}
		seen := fmt.Sprintf("the volume on %q, %s", v.Status.CurrentNodeID, v.Status.State)
		p, err := core.Pods("default").Get(t.Context(), pod, metav1.GetOptions{})
		if err != nil {
			return seen + "; the pod: " + err.Error(), false
		}
		seen += "; the pod " + podLine(*p)
		return seen, v.Status.CurrentNodeID == node && v.Status.State == "attached" && p.Status.Phase == corev1.PodRunning && kube.PodReady(p)
	}, func(last string) string { return "last seen: " + last })
}

// removeOutOfService takes the out-of-service taint off the node.
func removeOutOfService(t *testing.T, site *sitebox.TestSite, node string) {
	core := site.Clients(t).Core.CoreV1()
	_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := core.Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		taints := slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeOutOfService })
		if len(taints) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = taints
		_, err = core.Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		return err
	})
}
