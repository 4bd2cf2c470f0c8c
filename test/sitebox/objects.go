package sitebox

import (
	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
)

// LonghornVolume is a Volume as Longhorn's mutating webhook leaves it: the
// real CRD's schema rejects the empty enums a bare typed object carries, and
// sitebox runs no webhook.
func LonghornVolume(name string, sizeBytes int64, replicas int) *lhv1beta2.Volume {
	return &lhv1beta2.Volume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kube.LonghornNamespace},
		Spec: lhv1beta2.VolumeSpec{
			Size:                        sizeBytes,
			NumberOfReplicas:            replicas,
			Frontend:                    lhv1beta2.VolumeFrontendBlockDev,
			DataEngine:                  lhv1beta2.DataEngineTypeV1,
			AccessMode:                  lhv1beta2.AccessModeReadWriteOnce,
			DataLocality:                lhv1beta2.DataLocalityDisabled,
			ReplicaAutoBalance:          lhv1beta2.ReplicaAutoBalanceIgnored,
			ReplicaSoftAntiAffinity:     lhv1beta2.ReplicaSoftAntiAffinityDefault,
			ReplicaZoneSoftAntiAffinity: lhv1beta2.ReplicaZoneSoftAntiAffinityDefault,
			ReplicaDiskSoftAntiAffinity: lhv1beta2.ReplicaDiskSoftAntiAffinityDefault,
			UnmapMarkSnapChainRemoved:   lhv1beta2.UnmapMarkSnapChainRemovedIgnored,
			SnapshotDataIntegrity:       lhv1beta2.SnapshotDataIntegrityIgnored,
			RestoreVolumeRecurringJob:   lhv1beta2.RestoreVolumeRecurringJobDefault,
			FreezeFilesystemForSnapshot: lhv1beta2.FreezeFilesystemForSnapshotDefault,
			OfflineRebuilding:           lhv1beta2.VolumeOfflineRebuildingIgnored,
			BackupCompressionMethod:     lhv1beta2.BackupCompressionMethodLz4,
			BackupBlockSize:             2 << 20,
		},
	}
}
