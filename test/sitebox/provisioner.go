package sitebox

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	lhclientset "github.com/longhorn/longhorn-manager/k8s/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
)

// Annotations the provisioner simulator leaves on a Longhorn volume for the
// Longhorn simulator: the claim it serves (Longhorn's kubernetesStatus) and
// the node its first replica goes to.
//
// Real Longhorn places replicas by its own scheduler and ignores anything
// sitecon writes (sitecon's storage class asks for no data locality), so the
// simulator places them on the ready nodes in name order. A test that needs
// a replica on a given node says so itself, on the claim, with
// AnnotationReplicaNode: the simulator's knob, standing for what an
// administrator would do with Longhorn node tags. The product never sets it.
const (
	annotationClaim        = "sitebox.sitecon.io/claim"
	AnnotationFirstReplica = "sitebox.sitecon.io/first-replica-node" // on a Longhorn volume made by hand
	AnnotationReplicaNode  = "sitebox.sitecon.io/replica-node"       // on a claim, set by a test
	longhornProvisioner    = "driver.longhorn.io"
)

// provisionerSimulator stands in for Longhorn's CSI provisioner: a PVC on a
// storage class of driver.longhorn.io gets a Longhorn volume with the class's
// replica count and a PV bound to the claim.
type provisionerSimulator struct {
	core    kubernetes.Interface
	lh      lhclientset.Interface
	log     *slog.Logger
	claims  corelisters.PersistentVolumeClaimLister
	volumes corelisters.PersistentVolumeLister
	classes storagelisters.StorageClassLister
	// made are the claims (by UID) already provisioned: the informers may
	// lag behind the objects this simulator created.
	made map[string]bool
}

func (s *provisionerSimulator) reconcile(ctx context.Context) time.Duration {
	claims, _ := s.claims.List(labels.Everything())
	for _, pvc := range claims {
		if pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil || pvc.Spec.StorageClassName == nil || s.made[string(pvc.UID)] {
			continue
		}
		class, err := s.classes.Get(*pvc.Spec.StorageClassName)
		if err != nil || class.Provisioner != longhornProvisioner {
			continue
		}
		name := "pvc-" + string(pvc.UID)
		if _, err := s.volumes.Get(name); err == nil {
			continue
		}
		replicas, _ := strconv.Atoi(class.Parameters["numberOfReplicas"])
		size := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
		vol := LonghornVolume(name, size.Value(), max(replicas, 1))
		vol.Annotations = map[string]string{annotationClaim: pvc.Namespace + "/" + pvc.Name}
		if node := pvc.Annotations[AnnotationReplicaNode]; node != "" {
			vol.Annotations[AnnotationFirstReplica] = node
		}
		if _, err := s.lh.LonghornV1beta2().Volumes(kube.LonghornNamespace).Create(ctx, vol, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			s.log.Warn("create longhorn volume", "claim", pvc.Name, "err", err)
			continue
		}
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": longhornProvisioner}},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
				AccessModes:                   pvc.Spec.AccessModes,
				StorageClassName:              class.Name,
				PersistentVolumeReclaimPolicy: ptr.Deref(class.ReclaimPolicy, corev1.PersistentVolumeReclaimDelete),
				ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
					Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
					Driver: longhornProvisioner, VolumeHandle: name, FSType: "ext4"}},
			},
		}
		if _, err := s.core.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			s.log.Warn("create pv", "claim", pvc.Name, "err", err)
			continue
		}
		s.made[string(pvc.UID)] = true
		s.log.Info("provisioned", "claim", pvc.Namespace+"/"+pvc.Name, "volume", name, "replicas", replicas)
	}
	return 0
}

// kubernetesStatusFromAnnotation is the claim the provisioner simulator
// recorded on a volume it made, before the PV exists.
func kubernetesStatusFromAnnotation(v *lhv1beta2.Volume) lhv1beta2.KubernetesStatus {
	ks := v.Status.KubernetesStatus
	if claim := v.Annotations[annotationClaim]; claim != "" {
		for i := range len(claim) {
			if claim[i] == '/' {
				ks.Namespace, ks.PVCName, ks.PVName = claim[:i], claim[i+1:], v.Name
				ks.PVStatus = string(corev1.VolumeBound)
				break
			}
		}
	}
	return ks
}
