package sitebox

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/ptr"
)

// AnnotationVolumesAttached is how the volume-manager simulator tells kwok
// that a pod's volumes are attached on its node (the node's name): kwok's
// pod-ready stage (kwok/stages.yaml) starts a pod that mounts a claim only
// once it carries it, as a kubelet starts no container before its volumes
// are attached and mounted. Simulator plumbing: the product never reads it.
const AnnotationVolumesAttached = "sitebox.sitecon.io/volumes-attached"

// ControllerManagedAttachAnnotation is what a kubelet puts on its Node
// when the attach/detach controller attaches its volumes (the kubelet's
// default, and k3s's): the controller manages no node without it.
const ControllerManagedAttachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"

// csiUniqueVolumeName is how the kubelet and the attach/detach controller
// name a CSI volume in node.status.volumesInUse and volumesAttached
// (kubernetes.io/csi/<driver>^<volume handle>).
func csiUniqueVolumeName(csi *corev1.CSIPersistentVolumeSource) corev1.UniqueVolumeName {
	return corev1.UniqueVolumeName("kubernetes.io/csi/" + csi.Driver + "^" + csi.VolumeHandle)
}

// volumeManagerSimulator stands in for the kubelet's volume manager. The
// real attach/detach controller (in kube-controller-manager) does the
// attaching: it makes a VolumeAttachment for a pod's CSI volume on the
// pod's node, the Longhorn simulator (as Longhorn's CSI attacher) attaches
// the volume and marks it attached, and the controller lists the volume in
// the node's status.volumesAttached. What a kubelet adds, this does:
//   - it reports in node.status.volumesInUse the CSI volumes of the pods
//     on its node that have not finished (a terminating pod's volumes stay
//     mounted until the pod is gone). The controller detaches nothing
//     listed there; from a lost node, whose list stays as it last wrote
//     it, only after maxWaitForUnmountDuration (6 min), or once the node
//     carries the out-of-service taint or the VolumeAttachment is deleted;
//   - it starts a pod (AnnotationVolumesAttached, for kwok) only once each
//     of its CSI volumes is in the node's volumesAttached and, for a
//     Longhorn volume, Longhorn has it attached on that node. Until then the
//     pod stays Pending, its containers waiting in ContainerCreating; the
//     controller itself reports a Multi-Attach error on it when the volume
//     is attached to another node.
//
// Only a live kubelet acts: a lost node's status and pods are left as they
// were.
type volumeManagerSimulator struct {
	core    kubernetes.Interface
	log     *slog.Logger
	nodes   nodeLister
	pods    corelisters.PodLister
	claims  corelisters.PersistentVolumeClaimLister
	pvs     corelisters.PersistentVolumeLister
	volumes interface {
		List(labels.Selector) ([]*lhv1beta2.Volume, error)
	}
}

func (s *volumeManagerSimulator) reconcile(ctx context.Context) time.Duration {
	nodes, _ := s.nodes.List(labels.Everything())
	ready := readyNodes(s.nodes)
	pods, _ := s.pods.List(labels.Everything())
	volumes, _ := s.volumes.List(labels.Everything())
	byName := map[string]*lhv1beta2.Volume{}
	for _, v := range volumes {
		byName[v.Name] = v
	}
	var again time.Duration
	// Volumes in use, by node: every CSI volume of a pod placed there that
	// has not finished, the volumes of a pod still starting included (a
	// kubelet reports a volume in use before it waits for its attachment).
	inUse := map[string][]corev1.UniqueVolumeName{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, claim := range podClaimKeys(p) {
			if pv, ok := s.claimPV(claim); ok && pv.Spec.CSI != nil {
				inUse[p.Spec.NodeName] = append(inUse[p.Spec.NodeName], csiUniqueVolumeName(pv.Spec.CSI))
			}
		}
	}
	attached := map[string][]corev1.UniqueVolumeName{}
	for _, n := range nodes {
		for _, av := range n.Status.VolumesAttached {
			attached[n.Name] = append(attached[n.Name], av.Name)
		}
		if !ready[n.Name] {
			continue
		}
		want := inUse[n.Name]
		slices.Sort(want)
		want = slices.Compact(want)
		if !slices.Equal(want, n.Status.VolumesInUse) {
			if err := s.reportInUse(ctx, n.Name, want); err != nil {
				again = time.Second
			}
		}
	}
	for _, p := range pods {
		// Only a live kubelet acts, on a pod placed on its node and not
		// started yet; a started pod's volumes were attached.
		if p.Spec.NodeName == "" || !ready[p.Spec.NodeName] || p.DeletionTimestamp != nil ||
			p.Status.Phase != corev1.PodPending || p.Annotations[AnnotationVolumesAttached] == p.Spec.NodeName {
			continue
		}
		claims := podClaimKeys(p)
		if len(claims) == 0 {
			continue
		}
		waiting := false
		for _, claim := range claims {
			pv, ok := s.claimPV(claim)
			if !ok {
				waiting = true // not bound yet: the kubelet waits for it too
				continue
			}
			if pv.Spec.CSI == nil {
				continue // not attachable: nothing to wait for
			}
			if !slices.Contains(attached[p.Spec.NodeName], csiUniqueVolumeName(pv.Spec.CSI)) {
				waiting = true // the attach/detach controller has not attached it here
				continue
			}
			if pv.Spec.CSI.Driver == longhornProvisioner {
				// The CSI node plugin stages the device Longhorn attached.
				if v := byName[pv.Spec.CSI.VolumeHandle]; v == nil || v.Status.State != lhv1beta2.VolumeStateAttached || v.Status.CurrentNodeID != p.Spec.NodeName {
					waiting = true
				}
			}
		}
		if !waiting {
			if err := s.markAttached(ctx, p); err != nil {
				again = time.Second
			}
			continue
		}
		if err := s.hold(ctx, p); err != nil {
			again = time.Second
		}
	}
	return again
}

// reportInUse writes the node's volumesInUse, as its kubelet's status
// update does.
func (s *volumeManagerSimulator) reportInUse(ctx context.Context, node string, names []corev1.UniqueVolumeName) error {
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"volumesInUse": names}})
	if _, err := s.core.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		if !apierrors.IsNotFound(err) {
			s.log.Warn("report volumes in use", "node", node, "err", err)
		}
		return err
	}
	s.log.Info("volumes in use", "node", node, "volumes", names)
	return nil
}

// claimPV follows a claim ("namespace/name") to its bound PV; false while
// the claim is not bound (or its PV not known yet).
func (s *volumeManagerSimulator) claimPV(claim string) (*corev1.PersistentVolume, bool) {
	ns, name, _ := strings.Cut(claim, "/")
	pvc, err := s.claims.PersistentVolumeClaims(ns).Get(name)
	if err != nil || pvc.Spec.VolumeName == "" {
		return nil, false
	}
	pv, err := s.pvs.Get(pvc.Spec.VolumeName)
	if err != nil {
		return nil, false
	}
	return pv, true
}

// markAttached lets kwok start the pod.
func (s *volumeManagerSimulator) markAttached(ctx context.Context, p *corev1.Pod) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AnnotationVolumesAttached: p.Spec.NodeName}}})
	_, err := s.core.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		s.log.Warn("mark volumes attached", "pod", p.Namespace+"/"+p.Name, "err", err)
		return err
	}
	s.log.Info("volumes attached, pod may start", "pod", p.Namespace+"/"+p.Name, "node", p.Spec.NodeName)
	return nil
}

// hold writes what a kubelet shows of a pod whose volumes are not attached
// yet: Pending, not ready, every container waiting in ContainerCreating.
func (s *volumeManagerSimulator) hold(ctx context.Context, p *corev1.Pod) error {
	if len(p.Status.ContainerStatuses) == len(p.Spec.Containers) && !slices.ContainsFunc(p.Status.ContainerStatuses, func(c corev1.ContainerStatus) bool {
		return c.State.Waiting == nil || c.State.Waiting.Reason != "ContainerCreating"
	}) {
		return nil // held already
	}
	np := p.DeepCopy()
	now := metav1.Now()
	var names []string
	np.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		names = append(names, c.Name)
		np.Status.ContainerStatuses = append(np.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: false, Started: ptr.To(false),
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
		})
	}
	notReady := fmt.Sprintf("containers with unready status: [%s]", strings.Join(names, " "))
	setCondition := func(c corev1.PodCondition) {
		c.LastTransitionTime = now
		if i := slices.IndexFunc(np.Status.Conditions, func(x corev1.PodCondition) bool { return x.Type == c.Type }); i >= 0 {
			np.Status.Conditions[i] = c
			return
		}
		np.Status.Conditions = append(np.Status.Conditions, c)
	}
	setCondition(corev1.PodCondition{Type: corev1.PodInitialized, Status: corev1.ConditionTrue})
	setCondition(corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", Message: notReady})
	setCondition(corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady", Message: notReady})
	if np.Status.StartTime == nil {
		np.Status.StartTime = &now
	}
	if _, err := s.core.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, np, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			s.log.Warn("hold pod for its volumes", "pod", p.Namespace+"/"+p.Name, "err", err)
		}
		return err
	}
	s.log.Info("pod held: volumes not attached on its node", "pod", p.Namespace+"/"+p.Name, "node", p.Spec.NodeName)
	return nil
}
