package apps

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
)

// What sitecon writes on the objects it lays out.
const (
	// FieldManager is sitecon's server-side-apply field manager.
	FieldManager = "sitecon"
	// LabelManagedBy marks objects sitecon owns.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelVolumeUUID carries the EVE volume UUID on its PVC.
	LabelVolumeUUID = "sitecon.io/volume-uuid"
	// AnnotationSpecHash is the hash of what sitecon applied, so an unchanged
	// app is never written again.
	AnnotationSpecHash = "sitecon.io/spec-hash"
	// AnnotationDNId is the node UUID that laid the object out; only that
	// node removes it when its app goes away.
	AnnotationDNId = kube.AnnotationDNId
	// AnnotationConfigDNId is the app's designated_node_id in its config,
	// which an on-site override must name to hold (see PlacementOverride).
	AnnotationConfigDNId = kube.AnnotationConfigDNId
	// AnnotationConfigVersion is the version of the app config an object
	// was laid out from; a node holding an older one leaves it alone.
	AnnotationConfigVersion = kube.AnnotationConfigVersion
	// AnnotationConfigHash is the hash of the app config an object was
	// laid out from: two configs with one version number (or none) that
	// say different things tell apart by it.
	AnnotationConfigHash = kube.AnnotationConfigHash
	// AnnotationLaidOutBy is the name of the node whose agent last wrote
	// the object, and AnnotationLaidOutAt when, by that node's clock: for
	// people reading the object. No agent compares another node's clock
	// with its own.
	AnnotationLaidOutBy = "sitecon.io/laid-out-by"
	AnnotationLaidOutAt = "sitecon.io/laid-out-at"
	// AnnotationTakeover is written by a node taking a pinned VM over
	// just before it deletes the VM to make it again: the config stamps
	// of the layout coming, as JSON (takeoverMark). The node whose layout
	// it deletes may see only the delete, never the new layout, before it
	// would lay the app out itself in the gap.
	AnnotationTakeover = "sitecon.io/taken-over-for"
	// LonghornProvisioner is Longhorn's CSI driver.
	LonghornProvisioner = "driver.longhorn.io"
)

// Resources sitecon applies, for the dynamic client.
var (
	GVRDeployment   = appsv1.SchemeGroupVersion.WithResource("deployments")
	GVRVMI          = kvv1.SchemeGroupVersion.WithResource("virtualmachineinstances")
	GVRVMIRS        = kvv1.SchemeGroupVersion.WithResource("virtualmachineinstancereplicasets")
	GVRPVC          = corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims")
	GVRStorageClass = storagev1.SchemeGroupVersion.WithResource("storageclasses")
	// WorkloadGVRs are the kinds an app may be laid out as.
	WorkloadGVRs = []schema.GroupVersionResource{GVRDeployment, GVRVMIRS, GVRVMI}
)

// PlacementOptions tune the layout.
type PlacementOptions struct {
	// MoveAfter is how long an auto-migration app tolerates its node being
	// unreachable or not ready before Kubernetes moves it (default
	// DefaultMoveAfter).
	MoveAfter time.Duration
}

// DefaultMoveAfter is the tolerationSeconds of the unreachable and
// not-ready taints on auto-migration apps' pods, unless configured.
const DefaultMoveAfter = 20 * time.Second

// Layout is the desired object for one app or volume.
type Layout struct {
	GVR    schema.GroupVersionResource
	Object *unstructured.Unstructured
}

// Name and Namespace of the object.
func (l Layout) Name() string      { return l.Object.GetName() }
func (l Layout) Namespace() string { return l.Object.GetNamespace() }

// Hash is the spec hash stamped on the object.
func (l Layout) Hash() string { return l.Object.GetAnnotations()[AnnotationSpecHash] }

// ConfigVersion is the app config version obj was laid out from; 0 for an
// unversioned config or no object.
func ConfigVersion(obj metav1.Object) uint64 {
	if obj == nil {
		return 0
	}
	v, _ := strconv.ParseUint(obj.GetAnnotations()[AnnotationConfigVersion], 10, 64)
	return v
}

// StaleConfig says why this node must not apply want over live: live was
// laid out from a newer version of the app's config than this node holds
// (the controller's change reached another node first). Empty: apply.
func StaleConfig(live, want metav1.Object) string {
	have, laid := ConfigVersion(want), ConfigVersion(live)
	if laid <= have {
		return ""
	}
	return fmt.Sprintf("this node holds version %d of the app's config, version %d is laid out: waiting for the newer config", have, laid)
}

// LayoutWrite is one node's verdict on writing its layout of an app over
// the live object.
type LayoutWrite struct {
	// Hold says why this node must not write; empty: write.
	Hold string
	// Conflict: held because another node laid the object out recently
	// from a config that disagrees with this node's and is not older.
	Conflict bool
	// Until is when a conflict hold lapses. Zero for a stale config, which
	// holds until this node's config catches up.
	Until time.Time
}

// DecideLayoutWrite says whether this node may write want over live at
// now. seen is when this node first saw live as it stands (its layout
// stamps, see LayoutSighting), on this node's own clock; window is how
// long another node's layout from a disagreeing config stands before this
// node writes over it.
//
// Two nodes whose configs disagree (another designated node or other
// content, with the same version or none) each think the app theirs: were
// both to write on every change, each write would wake the other and
// every round restart the app. Neither config is known to be the newer,
// so one wins by a rule every node applies alike (configWinsTie): the
// first layout stands while the other node holds and reports; a node whose
// config wins writes over the loser's layout once it has stood for the
// window, a node whose config loses never writes over the winner's (until
// it gets a newer version, or the configs agree). One takeover at most,
// not one per window for ever.
// Freshness is counted from this node's own sighting, never from the other
// node's clock in laid-out-at: a skewed clock there neither holds this
// node forever nor lets it write at once.
func DecideLayoutWrite(live, want metav1.Object, seen, now time.Time, window time.Duration) LayoutWrite {
	if live == nil {
		return LayoutWrite{}
	}
	if why := StaleConfig(live, want); why != "" {
		return LayoutWrite{Hold: why}
	}
	laid, mine := live.GetAnnotations(), want.GetAnnotations()
	switch {
	case strings.EqualFold(laid[AnnotationDNId], mine[AnnotationDNId]):
		return LayoutWrite{} // this node's own layout, from whatever config it held then
	case ConfigVersion(want) > ConfigVersion(live):
		return LayoutWrite{}
	case sameConfig(laid, mine):
		// One config on both nodes: the layout differs by an on-site
		// override, which both read from one ConfigMap. A move, not a
		// disagreement.
		return LayoutWrite{}
	}
	by := cmp.Or(laid[AnnotationLaidOutBy], "node "+laid[AnnotationDNId])
	differs := ""
	if strings.EqualFold(laid[AnnotationConfigDNId], mine[AnnotationConfigDNId]) {
		differs = ", other content"
	}
	if !configWinsTie(mine, laid) {
		return LayoutWrite{Conflict: true, Hold: fmt.Sprintf(
			"conflict: %s laid this app out from a config (%s) that disagrees with this node's (%s%s) and wins the tie (%s); not writing over it unless a newer config version arrives or the configs agree",
			by, describeConfig(laid), describeConfig(mine), differs, tieRule)}
	}
	until := seen.Add(window)
	if !now.Before(until) {
		return LayoutWrite{}
	}
	return LayoutWrite{Conflict: true, Until: until, Hold: fmt.Sprintf(
		"conflict: %s laid this app out from a config (%s) that disagrees with this node's (%s%s); this node's wins the tie (%s): not writing over it before %s unless a newer config version arrives",
		by, describeConfig(laid), describeConfig(mine), differs, tieRule, until.Format(time.TimeOnly))}
}

// tieRule says which of two disagreeing configs of one version wins.
const tieRule = "the config whose designated node UUID, then config hash, sorts first"

// configWinsTie: of two layouts' configs of one version that disagree,
// mine wins (tieRule). Every node judges a pair alike, from the configs
// alone: exactly one of the two wins, whoever asks and whenever, so the
// loser never writes over the winner and the two never take the app from
// each other in turn.
func configWinsTie(mine, theirs map[string]string) bool {
	a, b := strings.ToLower(mine[AnnotationConfigDNId]), strings.ToLower(theirs[AnnotationConfigDNId])
	if a != b {
		return a < b
	}
	return mine[AnnotationConfigHash] < theirs[AnnotationConfigHash]
}

// sameConfig: two layouts come from one app config. Layouts from before
// the config hash compare by version and designated node only.
func sameConfig(a, b map[string]string) bool {
	if !strings.EqualFold(a[AnnotationConfigDNId], b[AnnotationConfigDNId]) || a[AnnotationConfigVersion] != b[AnnotationConfigVersion] {
		return false
	}
	return a[AnnotationConfigHash] == "" || b[AnnotationConfigHash] == "" || a[AnnotationConfigHash] == b[AnnotationConfigHash]
}

func describeConfig(ann map[string]string) string {
	version := "unversioned"
	if v := ann[AnnotationConfigVersion]; v != "" {
		version = "version " + v
	}
	return version + ", designated node " + cmp.Or(ann[AnnotationConfigDNId], "unknown")
}

// LayoutSighting identifies one write of a layout: the object, the node
// that wrote it, what it wrote and the writer's stamp. A node records when
// it first saw each; a new write by anyone is a new sighting. Status
// updates by Kubernetes leave it as it is.
func LayoutSighting(obj metav1.Object) string {
	ann := obj.GetAnnotations()
	return strings.Join([]string{string(obj.GetUID()), ann[AnnotationDNId], ann[AnnotationSpecHash], ann[AnnotationLaidOutBy], ann[AnnotationLaidOutAt]}, "|")
}

// StampLayout records on obj, just before it is written, which node lays
// it out and when by its clock. The stamps are not part of the spec hash:
// an unchanged app is still never written again.
func StampLayout(obj metav1.Object, node string, at time.Time) {
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationLaidOutBy] = node
	ann[AnnotationLaidOutAt] = at.UTC().Format(time.RFC3339)
	obj.SetAnnotations(ann)
}

// StorageClassName is the Longhorn storage class for a replica count.
func StorageClassName(replicas int) string { return "sitecon-longhorn-r" + strconv.Itoa(replicas) }

// LayoutStorageClass is the Longhorn storage class with that replica count.
func LayoutStorageClass(replicas int) (Layout, error) {
	sc := &storagev1.StorageClass{
		TypeMeta:    metav1.TypeMeta{APIVersion: "storage.k8s.io/v1", Kind: "StorageClass"},
		ObjectMeta:  metav1.ObjectMeta{Name: StorageClassName(replicas), Labels: map[string]string{LabelManagedBy: FieldManager}},
		Provisioner: LonghornProvisioner,
		Parameters: map[string]string{
			"numberOfReplicas":    strconv.Itoa(replicas),
			"staleReplicaTimeout": "30",
		},
		ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimRetain),
		AllowVolumeExpansion: ptr.To(true),
		VolumeBindingMode:    ptr.To(storagev1.VolumeBindingImmediate),
	}
	return finish(GVRStorageClass, sc, nil)
}

// LayoutVolume is a volume's PVC on the Longhorn class for its replica count.
func LayoutVolume(v VolumeConfig) (Layout, error) {
	size, err := resource.ParseQuantity(v.Size)
	if err != nil {
		return Layout{}, err
	}
	pvc := &corev1.PersistentVolumeClaim{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{
			Name: ClaimName(v), Namespace: kube.AppNamespace,
			Labels: map[string]string{LabelManagedBy: FieldManager, LabelVolumeUUID: v.UUID, kube.LabelAppName: v.Name},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(StorageClassName(v.ReplicaCount)),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	// The designated node lays a claim out, or for a worker (which
	// NodeRestriction does not let) the stats leader, stamped as the
	// designated node's all the same: the config it came from tells two
	// nodes' disagreeing volume configs apart (DecideLayoutWrite).
	stamps := volumeStamps(v)
	stamps[AnnotationDNId] = v.DesignatedNodeID
	return finish(GVRPVC, pvc, stamps)
}

// volumeStamps are the annotations that record the volume config a claim
// came from (volume configs carry no version).
func volumeStamps(v VolumeConfig) map[string]string {
	return map[string]string{AnnotationConfigDNId: v.DesignatedNodeID, AnnotationConfigHash: configHash(v)}
}

// LayoutApp is the workload for an app whose effective DNId node is
// dnidNode: a Deployment (container) or VMIRS (VM) preferring that node for
// auto-migration apps, a Deployment or VMI requiring it for pinned ones.
func LayoutApp(app AppConfig, dnid, dnidNode string, volumes map[string]VolumeConfig, opts PlacementOptions) (Layout, error) {
	if opts.MoveAfter == 0 {
		opts.MoveAfter = DefaultMoveAfter
	}
	labels := map[string]string{LabelManagedBy: FieldManager, kube.LabelAppUUID: app.UUID, kube.LabelAppName: app.DisplayName}
	meta := metav1.ObjectMeta{Name: WorkloadName(app), Namespace: kube.AppNamespace, Labels: labels}
	podLabels := map[string]string{kube.LabelAppUUID: app.UUID, kube.LabelAppName: app.DisplayName}
	affinity := appAffinity(app, dnidNode)
	var tolerations []corev1.Toleration
	if !app.Pinned() {
		// Evicted after --move-after, or never (the failover guard moves
		// an app that no volume holds: MovedByTheFailoverAlone).
		secs := ptr.To(int64(opts.MoveAfter / time.Second))
		if app.MovedByTheFailoverAlone() {
			secs = nil
		}
		for _, taint := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
			tolerations = append(tolerations, corev1.Toleration{Key: taint, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: secs})
		}
	}
	requests := corev1.ResourceList{}
	if app.Resources.CPU != "" {
		requests[corev1.ResourceCPU] = resource.MustParse(app.Resources.CPU)
	}
	if app.Resources.Memory != "" {
		requests[corev1.ResourceMemory] = resource.MustParse(app.Resources.Memory)
	}
	var claims []VolumeConfig
	for _, ref := range app.VolumeRefs {
		v, ok := volumes[ref]
		if !ok {
			return Layout{}, fmt.Errorf("app %s refers to volume %s, which has no config", app.DisplayName, ref)
		}
		claims = append(claims, v)
	}
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{kube.LabelAppUUID: app.UUID}}
	annotations := configStamps(app)
	annotations[AnnotationDNId] = dnid
	var vmAnnotations map[string]string
	if port := app.VNCPort(); port > 0 {
		vmAnnotations = map[string]string{kube.AnnotationVNCPort: strconv.Itoa(port)}
	}
	// Passed-through ports: the pod asks Multus for their attachments (a
	// VM's through its VMI, whose annotations KubeVirt carries to the
	// virt-launcher pod); the workload says which ports it holds.
	podAnnotations, portStamps := passthroughAnnotations(app)
	maps.Copy(annotations, portStamps)
	if len(podAnnotations) > 0 {
		if vmAnnotations == nil {
			vmAnnotations = map[string]string{}
		}
		maps.Copy(vmAnnotations, podAnnotations)
	}

	if app.Kind == KindContainer {
		pod := corev1.PodSpec{
			Affinity: affinity, Tolerations: tolerations,
			Containers: []corev1.Container{{Name: dnsName(app.DisplayName, 63), Image: app.Image,
				Resources: corev1.ResourceRequirements{Requests: requests}}},
		}
		for _, v := range claims {
			pod.Volumes = append(pod.Volumes, corev1.Volume{Name: dnsName(v.Name, 63),
				VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ClaimName(v)}}})
			pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts,
				corev1.VolumeMount{Name: dnsName(v.Name, 63), MountPath: "/data/" + dnsName(v.Name, 63)})
		}
		dep := &appsv1.Deployment{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: meta,
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](1),
				Selector: selector,
				// A ReadWriteOnce volume cannot be held by two pods at once.
				Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnnotations}, Spec: pod},
			},
		}
		return finish(GVRDeployment, dep, annotations)
	}

	vmSpec := kvv1.VirtualMachineInstanceSpec{
		Affinity: affinity, Tolerations: tolerations,
		Domain: kvv1.DomainSpec{
			Resources: kvv1.ResourceRequirements{Requests: requests},
			Devices: kvv1.Devices{Disks: []kvv1.Disk{{Name: "rootdisk",
				DiskDevice: kvv1.DiskDevice{Disk: &kvv1.DiskTarget{Bus: kvv1.DiskBusVirtio}}}}},
		},
		Volumes: []kvv1.Volume{{Name: "rootdisk", VolumeSource: kvv1.VolumeSource{ContainerDisk: &kvv1.ContainerDiskSource{Image: app.Image}}}},
	}
	for _, v := range claims {
		name := dnsName(v.Name, 63)
		vmSpec.Domain.Devices.Disks = append(vmSpec.Domain.Devices.Disks, kvv1.Disk{Name: name,
			DiskDevice: kvv1.DiskDevice{Disk: &kvv1.DiskTarget{Bus: kvv1.DiskBusVirtio}}})
		vmSpec.Volumes = append(vmSpec.Volumes, kvv1.Volume{Name: name, VolumeSource: kvv1.VolumeSource{
			PersistentVolumeClaim: &kvv1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: corev1.PersistentVolumeClaimVolumeSource{ClaimName: ClaimName(v)}}}})
	}
	if app.Pinned() {
		meta.Annotations = vmAnnotations
		vmi := &kvv1.VirtualMachineInstance{
			TypeMeta:   metav1.TypeMeta{APIVersion: kvv1.SchemeGroupVersion.String(), Kind: "VirtualMachineInstance"},
			ObjectMeta: meta, Spec: vmSpec,
		}
		return finish(GVRVMI, vmi, annotations)
	}
	rs := &kvv1.VirtualMachineInstanceReplicaSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: kvv1.SchemeGroupVersion.String(), Kind: "VirtualMachineInstanceReplicaSet"},
		ObjectMeta: meta,
		Spec: kvv1.VirtualMachineInstanceReplicaSetSpec{
			Replicas: ptr.To[int32](1), Selector: selector,
			Template: &kvv1.VirtualMachineInstanceTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: vmAnnotations}, Spec: vmSpec},
		},
	}
	return finish(GVRVMIRS, rs, annotations)
}

// configStamps are the annotations that record the app config a layout
// came from: its designated node, its version (none when unversioned) and
// its hash.
func configStamps(app AppConfig) map[string]string {
	out := map[string]string{AnnotationConfigDNId: app.DesignatedNodeID, AnnotationConfigHash: configHash(app)}
	if app.Version > 0 {
		out[AnnotationConfigVersion] = strconv.FormatUint(app.Version, 10)
	}
	return out
}

// configHash is a short hash of an app's or volume's config as this node
// holds it.
func configHash(config any) string {
	data, _ := json.Marshal(config)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// appAffinity: the DNId node preferred (auto-migration) or required (pinned);
// node-select labels are always required.
func appAffinity(app AppConfig, node string) *corev1.Affinity {
	var selectTerms []corev1.NodeSelectorRequirement
	for _, k := range slices.Sorted(maps.Keys(app.NodeSelectLabels)) {
		selectTerms = append(selectTerms, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{app.NodeSelectLabels[k]}})
	}
	host := corev1.NodeSelectorRequirement{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
	na := &corev1.NodeAffinity{}
	if app.Pinned() {
		selectTerms = append([]corev1.NodeSelectorRequirement{host}, selectTerms...)
	} else {
		na.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{{
			Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{host}}}}
	}
	if len(selectTerms) > 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: selectTerms}}}
	}
	return &corev1.Affinity{NodeAffinity: na}
}

// finish turns a typed object into what server-side apply sends: no status,
// no empty creationTimestamp, the annotations and the hash of the rest
// stamped on.
func finish(gvr schema.GroupVersionResource, obj runtime.Object, annotations map[string]string) (Layout, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return Layout{}, err
	}
	u := &unstructured.Unstructured{Object: m}
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "creationTimestamp")
	ann := u.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	maps.Copy(ann, annotations)
	u.SetAnnotations(ann)
	data, err := json.Marshal(u.Object)
	if err != nil {
		return Layout{}, err
	}
	sum := sha256.Sum256(data)
	ann[AnnotationSpecHash] = hex.EncodeToString(sum[:8])
	u.SetAnnotations(ann)
	return Layout{GVR: gvr, Object: u}, nil
}

// takeoverMark is the AnnotationTakeover value node writes on the object
// it deletes to lay want out in its place: want's config stamps and node.
func takeoverMark(want metav1.Object, node string) string {
	ann := want.GetAnnotations()
	mark := map[string]string{AnnotationLaidOutBy: node}
	for _, k := range []string{AnnotationDNId, AnnotationConfigDNId, AnnotationConfigVersion, AnnotationConfigHash} {
		if v, ok := ann[k]; ok {
			mark[k] = v
		}
	}
	b, _ := json.Marshal(mark) // a map of strings always marshals
	return string(b)
}

// takeoverWinsTie says whether deleted carries the takeover mark
// (AnnotationTakeover) of a layout from a config that wins the tie over
// want's (configWinsTie, as DecideLayoutWrite judges it live), and by
// which node. No mark, a mark that does not read, or a config that does
// not win: false.
func takeoverWinsTie(deleted, want metav1.Object) (string, bool) {
	raw, ok := deleted.GetAnnotations()[AnnotationTakeover]
	if !ok {
		return "", false
	}
	var mark map[string]string
	if err := json.Unmarshal([]byte(raw), &mark); err != nil {
		return "", false
	}
	v := DecideLayoutWrite(&metav1.ObjectMeta{Annotations: mark}, want, time.Time{}, time.Time{}, 0)
	return cmp.Or(mark[AnnotationLaidOutBy], "another node"), v.Conflict && v.Until.IsZero()
}
