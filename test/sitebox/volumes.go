package sitebox

import (
	"cmp"
	"context"
	"testing"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
)

// VolumeOptions say how a test wants a Longhorn volume made by hand.
type VolumeOptions struct {
	// Replicas is the replica count (3 when 0).
	Replicas int
	// Size in bytes (1 GiB when 0).
	Size int64
	// ReplicaOn, when set, is a node that must hold one of the replicas:
	// Longhorn places replicas by its own scheduling, so the test moves one
	// there through the API once they exist.
	ReplicaOn string
	// UsedOn, when set, is the node of a pod that mounts the volume (through
	// a PV and claim of the volume's name in namespace default): Longhorn
	// attaches only a volume in use. Empty: nothing uses the volume, and it
	// is detached with its replicas stopped.
	UsedOn string
}

// Volume creates a Longhorn volume as opts say, waits until Longhorn has
// it healthy and attached (in use) or detached with its replicas stopped
// (unused), and removes it, its replicas, its PV, claim and pod after the
// test.
func (ts *TestSite) Volume(t testing.TB, name string, opts VolumeOptions) *lhv1beta2.Volume {
	t.Helper()
	ctx := context.Background()
	clients := ts.Clients(t)
	volumes := clients.Longhorn.LonghornV1beta2().Volumes(kube.LonghornNamespace)
	replicas := clients.Longhorn.LonghornV1beta2().Replicas(kube.LonghornNamespace)
	n := opts.Replicas
	if n == 0 {
		n = 3
	}
	if _, err := volumes.Create(ctx, LonghornVolume(name, cmp.Or(opts.Size, 1<<30), n), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = volumes.Delete(ctx, name, metav1.DeleteOptions{})
		// The next run may reuse the name: wait until the garbage collector
		// has removed the replicas too.
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			reps, err := replicas.List(ctx, metav1.ListOptions{LabelSelector: "longhornvolume=" + name})
			return err == nil && len(reps.Items) == 0, nil
		})
	})
	var reps []lhv1beta2.Replica
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := replicas.List(ctx, metav1.ListOptions{LabelSelector: "longhornvolume=" + name})
		reps = nil
		if err == nil {
			reps = list.Items
		}
		return len(reps) == n, nil
	}); err != nil {
		t.Fatalf("volume %s: Longhorn never made its %d replicas", name, n)
	}
	if on := opts.ReplicaOn; on != "" {
		held := false
		for _, r := range reps {
			held = held || r.Spec.NodeID == on
		}
		if !held {
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				r, err := replicas.Get(ctx, reps[0].Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				r.Spec.NodeID, r.Labels["longhornnode"] = on, on
				_, err = replicas.Update(ctx, r, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				t.Fatalf("volume %s: move a replica to %s: %v", name, on, err)
			}
		}
	}
	if opts.UsedOn != "" {
		ts.useVolume(t, name, opts.UsedOn)
	}
	v := &lhv1beta2.Volume{}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := volumes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		v = got
		if opts.UsedOn != "" {
			return v.Status.State == lhv1beta2.VolumeStateAttached && v.Status.CurrentNodeID == opts.UsedOn &&
				v.Status.Robustness == lhv1beta2.VolumeRobustnessHealthy, nil
		}
		list, err := replicas.List(ctx, metav1.ListOptions{LabelSelector: "longhornvolume=" + name})
		if err != nil {
			return false, nil
		}
		for _, r := range list.Items {
			if kube.ReplicaState(&r) != kube.ReplicaStopped {
				return false, nil
			}
		}
		return v.Status.State == lhv1beta2.VolumeStateDetached && v.Status.Robustness == lhv1beta2.VolumeRobustnessUnknown, nil
	}); err != nil {
		t.Fatalf("volume %s never settled (%+v)", name, v.Status)
	}
	return v
}

// useVolume runs a pod on node that mounts the volume through a PV and a
// claim, both named as the volume, in namespace default.
func (ts *TestSite) useVolume(t testing.TB, name, node string) {
	t.Helper()
	ctx := context.Background()
	core := ts.Clients(t).Core.CoreV1()
	const ns = "default"
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			ClaimRef:    &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: longhornProvisioner, VolumeHandle: name, FSType: "ext4"}},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		},
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(""), VolumeName: name,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "uses-" + name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.local/x:1"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
		},
	}
	if _, err := core.PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pod names its node, so no scheduler stands between it and the
	// claim: wait for the binding as the scheduler's volume binding would
	// for a pod it places, and say so if the binder is what is slow.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		c, err := core.PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && c.Status.Phase == corev1.ClaimBound, nil
	}); err != nil {
		t.Fatalf("claim %s never bound to its volume", name)
	}
	if _, err := core.Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = core.Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		_ = core.PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{})
		_ = core.PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{})
		// The next run may reuse the names.
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, errPod := core.Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			_, errPV := core.PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
			return errPod != nil && errPV != nil, nil
		})
	})
}
