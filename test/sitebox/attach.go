package sitebox

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
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

// attachDetachController is the component that reports a Multi-Attach
// error on a pod, as the real one names itself.
const attachDetachController = "attachdetach-controller"

// volumeManagerSimulator stands in for the kubelet's volume manager and for
// what the attach/detach controller reports: a pod that mounts a Longhorn
// claim starts only once the Longhorn simulator has the volume attached on
// the pod's node. Until then the pod stays Pending, its containers waiting
// in ContainerCreating, and, when the volume is attached to another node
// whose pods still hold it, it gets the attach/detach controller's
// FailedAttachVolume event (Multi-Attach error) naming those pods.
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
	// reported are the Multi-Attach events sent, by pod UID and volume:
	// the attach/detach controller reports each once per pod, not per pass.
	reported map[string]bool
}

func (s *volumeManagerSimulator) reconcile(ctx context.Context) time.Duration {
	ready := readyNodes(s.nodes)
	pods, _ := s.pods.List(labels.Everything())
	volumes, _ := s.volumes.List(labels.Everything())
	byName := map[string]*lhv1beta2.Volume{}
	for _, v := range volumes {
		byName[v.Name] = v
	}
	var again time.Duration
	live := map[string]bool{}
	for _, p := range pods {
		live[string(p.UID)] = true
	}
	// Bounded memory: a pod gone takes its reports with it.
	maps.DeleteFunc(s.reported, func(key string, _ bool) bool { uid, _, _ := strings.Cut(key, "/"); return !live[uid] })
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
		unattached := map[string]*lhv1beta2.Volume{} // PV name -> its Longhorn volume, when it has one
		for _, claim := range claims {
			pv, vol, ok := s.claimVolume(claim, byName)
			if !ok {
				unattached[claim] = nil
				continue
			}
			if vol == nil {
				continue // not a Longhorn volume: nothing sitebox attaches
			}
			if vol.Status.State != lhv1beta2.VolumeStateAttached || vol.Status.CurrentNodeID != p.Spec.NodeName {
				unattached[pv] = vol
			}
		}
		if len(unattached) == 0 {
			if err := s.markAttached(ctx, p); err != nil {
				again = time.Second
			}
			continue
		}
		if err := s.hold(ctx, p); err != nil {
			again = time.Second
		}
		for pv, vol := range unattached {
			if vol != nil && vol.Status.CurrentNodeID != "" && vol.Status.CurrentNodeID != p.Spec.NodeName {
				if err := s.reportMultiAttach(ctx, p, pv, vol.Status.CurrentNodeID, pods); err != nil {
					again = time.Second
				}
			}
		}
	}
	return again
}

// claimVolume follows a claim ("namespace/name") to its PV's name and, for
// a Longhorn PV, its Longhorn volume. ok is false while the claim is not
// bound (or its volume not known yet): the kubelet waits for it too.
func (s *volumeManagerSimulator) claimVolume(claim string, volumes map[string]*lhv1beta2.Volume) (pvName string, vol *lhv1beta2.Volume, ok bool) {
	ns, name, _ := strings.Cut(claim, "/")
	pvc, err := s.claims.PersistentVolumeClaims(ns).Get(name)
	if err != nil || pvc.Spec.VolumeName == "" {
		return "", nil, false
	}
	pv, err := s.pvs.Get(pvc.Spec.VolumeName)
	if err != nil {
		return "", nil, false
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != longhornProvisioner {
		return pv.Name, nil, true
	}
	vol, ok = volumes[pv.Spec.CSI.VolumeHandle]
	return pv.Name, vol, ok
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

// reportMultiAttach sends the attach/detach controller's event for a pod
// whose RWO volume is attached to another node, naming the pods there that
// hold it, in the controller's words.
func (s *volumeManagerSimulator) reportMultiAttach(ctx context.Context, p *corev1.Pod, pvName, attachedTo string, pods []*corev1.Pod) error {
	key := string(p.UID) + "/" + pvName
	if s.reported[key] {
		return nil
	}
	var local []string
	others := 0
	for _, o := range pods {
		if o.Spec.NodeName != attachedTo || o.Status.Phase == corev1.PodSucceeded || o.Status.Phase == corev1.PodFailed ||
			!slices.ContainsFunc(podClaimKeys(o), func(c string) bool { return slices.Contains(podClaimKeys(p), c) }) {
			continue
		}
		if o.Namespace == p.Namespace {
			local = append(local, o.Name)
		} else {
			others++
		}
	}
	slices.Sort(local)
	var msg string
	switch {
	case len(local) > 0 && others > 0:
		msg = fmt.Sprintf("Volume is already used by pod(s) %s and %d pod(s) in different namespaces", strings.Join(local, ", "), others)
	case len(local) > 0:
		msg = "Volume is already used by pod(s) " + strings.Join(local, ", ")
	case others > 0:
		msg = fmt.Sprintf("Volume is already used by %d pod(s) in different namespaces", others)
	default:
		msg = "Volume is already exclusively attached to one node and can't be attached to another"
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", p.Name, now.UnixNano()), Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name,
			UID: p.UID, ResourceVersion: p.ResourceVersion},
		Type: corev1.EventTypeWarning, Reason: "FailedAttachVolume",
		Message: fmt.Sprintf("Multi-Attach error for volume %q %s", pvName, msg),
		Source:  corev1.EventSource{Component: attachDetachController}, ReportingController: attachDetachController,
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := s.core.CoreV1().Events(p.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		s.log.Warn("report multi-attach", "pod", p.Namespace+"/"+p.Name, "err", err)
		return err
	}
	s.reported[key] = true
	s.log.Info("multi-attach", "pod", p.Namespace+"/"+p.Name, "volume", pvName, "attached", attachedTo)
	return nil
}
