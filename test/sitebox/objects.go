package sitebox

import (
	"context"
	"fmt"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	kvv1 "kubevirt.io/api/core/v1"

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

// DemoApp is one app of the demo site.
type DemoApp struct {
	Name, UUID, Kind, Node string
	Pinned                 bool
}

// DemoApps are the demo site's apps: two VMs and two containers, one pinned.
var DemoApps = []DemoApp{
	{Name: "hmi", UUID: "5b0f7c1e-2d3a-4b5c-8d9e-0f1a2b3c4d01", Kind: kube.AppKindVM, Node: "node-a"},
	{Name: "historian", UUID: "5b0f7c1e-2d3a-4b5c-8d9e-0f1a2b3c4d02", Kind: kube.AppKindVM, Node: "node-b", Pinned: true},
	{Name: "plc-gateway", UUID: "5b0f7c1e-2d3a-4b5c-8d9e-0f1a2b3c4d03", Kind: kube.AppKindContainer, Node: "node-b"},
	{Name: "mqtt-broker", UUID: "5b0f7c1e-2d3a-4b5c-8d9e-0f1a2b3c4d04", Kind: kube.AppKindContainer, Node: "node-c"},
}

// SeedDemo creates the demo site's workloads the way sitecon's agent lays
// them out: auto-migration apps prefer their designated node, the pinned one
// requires it; each app has a Longhorn volume with three replicas.
func SeedDemo(ctx context.Context, cfg *rest.Config) error {
	clients, err := kube.NewClients(cfg)
	if err != nil {
		return err
	}
	core, lh, kv := clients.Core, clients.Longhorn, clients.KubeVirt
	for i, app := range DemoApps {
		vol := LonghornVolume("vol-"+app.Name, int64(10*(i+1))<<30, 3)
		if _, err := lh.LonghornV1beta2().Volumes(kube.LonghornNamespace).Create(ctx, vol, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("volume for %s: %w", app.Name, err)
		}
		labels := map[string]string{kube.LabelAppName: app.Name, kube.LabelAppUUID: app.UUID}
		affinity := nodeAffinity(app.Node, app.Pinned)
		// Auto-migration apps leave a lost node quickly; pinned ones stay.
		var tolerations []corev1.Toleration
		if !app.Pinned {
			tolerations = []corev1.Toleration{
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](5)},
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](5)},
			}
		}
		meta := metav1.ObjectMeta{Name: app.Name, Namespace: kube.AppNamespace, Labels: labels}
		switch {
		case app.Kind == kube.AppKindContainer:
			_, err = core.AppsV1().Deployments(kube.AppNamespace).Create(ctx, &appsv1.Deployment{
				ObjectMeta: meta,
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To[int32](1),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{kube.LabelAppUUID: app.UUID}},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec: corev1.PodSpec{
							Affinity: affinity, Tolerations: tolerations,
							Containers: []corev1.Container{{Name: app.Name, Image: "registry.local/" + app.Name + ":1.0"}},
						},
					},
				},
			}, metav1.CreateOptions{})
		case app.Pinned:
			_, err = kv.KubevirtV1().VirtualMachineInstances(kube.AppNamespace).Create(ctx, &kvv1.VirtualMachineInstance{
				ObjectMeta: meta,
				Spec:       kvv1.VirtualMachineInstanceSpec{Affinity: affinity, Tolerations: tolerations},
			}, metav1.CreateOptions{})
		default:
			_, err = kv.KubevirtV1().VirtualMachineInstanceReplicaSets(kube.AppNamespace).Create(ctx, &kvv1.VirtualMachineInstanceReplicaSet{
				ObjectMeta: meta,
				Spec: kvv1.VirtualMachineInstanceReplicaSetSpec{
					Replicas: ptr.To[int32](1),
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{kube.LabelAppUUID: app.UUID}},
					Template: &kvv1.VirtualMachineInstanceTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec:       kvv1.VirtualMachineInstanceSpec{Affinity: affinity, Tolerations: tolerations},
					},
				},
			}, metav1.CreateOptions{})
		}
		if err != nil {
			return fmt.Errorf("app %s: %w", app.Name, err)
		}
	}
	return nil
}

func nodeAffinity(node string, required bool) *corev1.Affinity {
	term := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
		Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
	}}}
	if required {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}},
		}}
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: term}},
	}}
}
