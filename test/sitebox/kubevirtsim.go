package sitebox

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	kvv1 "kubevirt.io/api/core/v1"
	kvclientset "kubevirt.io/client-go/kubevirt"

	"github.com/sitecon/sitecon/kube"
)

// kubevirtSimulator stands in for virt-controller and virt-handler: each VMI
// gets a virt-launcher pod that the real scheduler places, the VMI's node and
// phase follow that pod, and VMI replica sets keep their replica count.
type kubevirtSimulator struct {
	core kubernetes.Interface
	kv   kvclientset.Interface
	log  *slog.Logger
	pods interface {
		List(labels.Selector) ([]*corev1.Pod, error)
	}
	vmis        cache.Store
	replicaSets cache.Store
	// bootTime is SimulatorOptions.VMBootTime.
	bootTime time.Duration
	// created are the VMIs each replica set (by UID) was given that the
	// VMI cache may not show yet (KubeVirt's controller keeps the same
	// expectations): counted as live, so a lagging cache does not make a
	// second one.
	created map[types.UID]map[string]time.Time
}

const launcherLabel = "kubevirt.io"

func (s *kubevirtSimulator) reconcile(ctx context.Context) time.Duration {
	pods, _ := s.pods.List(labels.SelectorFromSet(labels.Set{launcherLabel: "virt-launcher"}))
	launchers := map[string][]*corev1.Pod{} // by VMI UID
	for _, p := range pods {
		uid := p.Labels["kubevirt.io/created-by"]
		launchers[uid] = append(launchers[uid], p)
	}
	var vmis []*kvv1.VirtualMachineInstance
	for _, obj := range s.vmis.List() {
		vmis = append(vmis, obj.(*kvv1.VirtualMachineInstance))
	}
	var again time.Duration
	for _, vmi := range vmis {
		if wait := s.reconcileVMI(ctx, vmi, launchers[string(vmi.UID)]); wait > 0 && (again == 0 || wait < again) {
			again = wait
		}
	}
	for _, obj := range s.replicaSets.List() {
		s.reconcileReplicaSet(ctx, obj.(*kvv1.VirtualMachineInstanceReplicaSet), vmis)
	}
	return again
}

func vmiFinal(vmi *kvv1.VirtualMachineInstance) bool {
	return vmi.Status.Phase == kvv1.Failed || vmi.Status.Phase == kvv1.Succeeded
}

// reconcileVMI moves one VMI's status along its launcher pod; it returns
// when to look again (a VM still booting), or zero.
func (s *kubevirtSimulator) reconcileVMI(ctx context.Context, vmi *kvv1.VirtualMachineInstance, pods []*corev1.Pod) time.Duration {
	if vmiFinal(vmi) || vmi.DeletionTimestamp != nil {
		return 0
	}
	var again time.Duration
	var pod *corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
			pod = p
		}
	}
	st := vmi.Status.DeepCopy()
	switch {
	case pod == nil && (vmi.Status.Phase == "" || vmi.Status.Phase == kvv1.Pending):
		if len(pods) == 0 {
			if err := s.createLauncher(ctx, vmi); err != nil {
				s.log.Warn("create virt-launcher pod", "vmi", vmi.Name, "err", err)
				return 0
			}
		}
		st.Phase = kvv1.Scheduling
	case pod == nil && len(pods) == 0 && vmi.Status.Phase == kvv1.Scheduling && vmi.Status.NodeName == "":
		// The launcher was just created and the pod cache has not shown it
		// yet (it lags, most of all while its watch is on re-list backoff):
		// that is no failure. Wait for the pod.
		return 0
	case pod == nil:
		// The launcher pod is gone or terminating (its node was lost): the VMI
		// has failed, as virt-controller decides when virt-handler goes silent.
		st.Phase = kvv1.Failed
	case pod.Spec.NodeName == "":
		st.Phase = kvv1.Scheduling
	case pod.Status.Phase == corev1.PodRunning && podReady(pod) && vmi.Status.Phase != kvv1.Running:
		// The domain boots once the launcher is up.
		if left := s.bootTime - time.Since(podReadySince(pod)); left > 0 {
			st.Phase, st.NodeName = kvv1.Scheduled, pod.Spec.NodeName
			again = left
			break
		}
		st.Phase, st.NodeName = kvv1.Running, pod.Spec.NodeName
	case pod.Status.Phase == corev1.PodRunning && podReady(pod):
		st.Phase, st.NodeName = kvv1.Running, pod.Spec.NodeName
	default:
		st.Phase, st.NodeName = kvv1.Scheduled, pod.Spec.NodeName
	}
	if st.Phase == vmi.Status.Phase && st.NodeName == vmi.Status.NodeName {
		return again
	}
	// VMIs have no status subresource in KubeVirt: status and the node label
	// are written together.
	nv := vmi.DeepCopy()
	nv.Status = *st
	if st.NodeName != "" {
		if nv.Labels == nil {
			nv.Labels = map[string]string{}
		}
		nv.Labels[kvv1.NodeNameLabel] = st.NodeName
	}
	if _, err := s.kv.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Update(ctx, nv, metav1.UpdateOptions{}); err != nil {
		if !apierrors.IsConflict(err) {
			s.log.Warn("update vmi", "vmi", vmi.Name, "err", err)
		}
		return time.Second
	}
	s.log.Info("vmi", "vmi", vmi.Name, "phase", st.Phase, "node", st.NodeName)
	return again
}

// podReadySince is when the pod last turned Ready.
func podReadySince(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func (s *kubevirtSimulator) createLauncher(ctx context.Context, vmi *kvv1.VirtualMachineInstance) error {
	podLabels := map[string]string{
		launcherLabel:            "virt-launcher",
		"kubevirt.io/created-by": string(vmi.UID),
		"vm.kubevirt.io/name":    vmi.Name,
	}
	for k, v := range vmi.Labels {
		if !strings.HasPrefix(k, "kubevirt.io") {
			podLabels[k] = v
		}
	}
	// Admission saw to it that the VMI asks for memory one way or another.
	requests := corev1.ResourceList{}
	for name, q := range vmi.Spec.Domain.Resources.Requests {
		requests[name] = q
	}
	if _, ok := requests[corev1.ResourceMemory]; !ok && vmi.Spec.Domain.Memory != nil && vmi.Spec.Domain.Memory.Guest != nil {
		requests[corev1.ResourceMemory] = *vmi.Spec.Domain.Memory.Guest
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: kube.VirtLauncherPrefix + vmi.Name + "-",
			Namespace:    vmi.Namespace,
			Labels:       podLabels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: kvv1.SchemeGroupVersion.String(), Kind: "VirtualMachineInstance",
				Name: vmi.Name, UID: vmi.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			Affinity:     vmi.Spec.Affinity,
			NodeSelector: vmi.Spec.NodeSelector,
			Tolerations:  vmi.Spec.Tolerations,
			Containers: []corev1.Container{{
				Name:      "compute",
				Image:     "quay.io/kubevirt/virt-launcher:v1.7.0",
				Resources: corev1.ResourceRequirements{Requests: requests},
			}, {
				// KubeVirt follows the guest's serial console into this
				// container's log (serial console logging is on unless
				// the KubeVirt CR turns it off).
				Name:  "guest-console-log",
				Image: "quay.io/kubevirt/virt-launcher:v1.7.0",
			}},
		},
	}
	// As virt-controller does, the launcher mounts the VMI's claims.
	for _, v := range vmi.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.PersistentVolumeClaim.ClaimName}}})
		}
	}
	_, err := s.core.CoreV1().Pods(vmi.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

func (s *kubevirtSimulator) reconcileReplicaSet(ctx context.Context, rs *kvv1.VirtualMachineInstanceReplicaSet, vmis []*kvv1.VirtualMachineInstance) {
	if rs.DeletionTimestamp != nil || rs.Spec.Template == nil || rs.Spec.Selector == nil {
		return
	}
	selector, err := metav1.LabelSelectorAsSelector(rs.Spec.Selector)
	if err != nil {
		return
	}
	want := int(ptr.Deref(rs.Spec.Replicas, 1))
	var live []*kvv1.VirtualMachineInstance
	ready := 0
	vmiClient := s.kv.KubevirtV1().VirtualMachineInstances(rs.Namespace)
	for _, vmi := range vmis {
		if vmi.Namespace != rs.Namespace || !selector.Matches(labels.Set(vmi.Labels)) || !metav1.IsControlledBy(vmi, rs) {
			continue
		}
		if vmiFinal(vmi) {
			// A finished VMI is replaced, as KubeVirt's replica set does.
			if vmi.DeletionTimestamp == nil {
				_ = vmiClient.Delete(ctx, vmi.Name, metav1.DeleteOptions{})
			}
			continue
		}
		if vmi.DeletionTimestamp != nil {
			continue
		}
		live = append(live, vmi)
		if vmi.Status.Phase == kvv1.Running {
			ready++
		}
	}
	expected := s.created[rs.UID]
	for name, at := range expected {
		seen := slices.ContainsFunc(vmis, func(v *kvv1.VirtualMachineInstance) bool { return v.Namespace == rs.Namespace && v.Name == name })
		if seen || time.Since(at) > 30*time.Second {
			delete(expected, name)
		}
	}
	for i := len(live) + len(expected); i < want; i++ {
		vmi := &kvv1.VirtualMachineInstance{
			ObjectMeta: *rs.Spec.Template.ObjectMeta.DeepCopy(),
			Spec:       *rs.Spec.Template.Spec.DeepCopy(),
		}
		vmi.Name, vmi.GenerateName, vmi.Namespace = "", rs.Name, rs.Namespace
		vmi.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: kvv1.SchemeGroupVersion.String(), Kind: "VirtualMachineInstanceReplicaSet",
			Name: rs.Name, UID: rs.UID, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}}
		made, err := vmiClient.Create(ctx, vmi, metav1.CreateOptions{})
		if err != nil {
			s.log.Warn("create vmi for replica set", "replicaset", rs.Name, "err", err)
			continue
		}
		if s.created[rs.UID] == nil {
			s.created[rs.UID] = map[string]time.Time{}
		}
		s.created[rs.UID][made.Name] = time.Now()
	}
	slices.SortFunc(live, func(a, b *kvv1.VirtualMachineInstance) int {
		return cmp.Compare(b.CreationTimestamp.UnixNano(), a.CreationTimestamp.UnixNano())
	})
	for i := want; i < len(live); i++ {
		_ = vmiClient.Delete(ctx, live[i].Name, metav1.DeleteOptions{})
	}
	if rs.Status.Replicas != int32(min(len(live), want)) || rs.Status.ReadyReplicas != int32(ready) {
		nrs := rs.DeepCopy()
		nrs.Status.Replicas, nrs.Status.ReadyReplicas = int32(min(len(live), want)), int32(ready)
		_, _ = s.kv.KubevirtV1().VirtualMachineInstanceReplicaSets(rs.Namespace).UpdateStatus(ctx, nrs, metav1.UpdateOptions{})
	}
}
