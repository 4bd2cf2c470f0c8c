package sitebox

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	lhclientset "github.com/longhorn/longhorn-manager/k8s/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
)

// longhornSimulator stands in for longhorn-manager: it keeps each volume's
// replicas on distinct nodes, fails the replicas of a lost node, rebuilds them
// when the node returns, and sets the volume's state and robustness. It is
// also Longhorn's CSI controller with its external-attacher: a volume is
// attached where a VolumeAttachment for it asks, and detached when none does.
type longhornSimulator struct {
	lh      lhclientset.Interface
	core    kubernetes.Interface
	opts    SimulatorOptions
	log     *slog.Logger
	nodes   nodeLister
	volumes interface {
		List(labels.Selector) ([]*lhv1beta2.Volume, error)
	}
	replicas interface {
		List(labels.Selector) ([]*lhv1beta2.Replica, error)
	}
	engines interface {
		List(labels.Selector) ([]*lhv1beta2.Engine, error)
	}
	// rebuild records when each rebuilding replica started its rebuild.
	rebuild map[string]time.Time
	// seeded are the volumes (by UID) given their first replicas: the
	// informer may not show them yet on the next pass.
	seeded map[string]bool
	// added are the volumes (by UID) given one more replica, and when:
	// the informer may not show it yet on the next pass.
	added map[string]time.Time
	// engined are the volumes (by UID) given their engine.
	engined map[string]bool
	// attachments are the VolumeAttachments the attach/detach controller
	// makes: Longhorn's CSI driver attaches a volume where one asks.
	attachments interface {
		List(labels.Selector) ([]*storagev1.VolumeAttachment, error)
	}
	// pvs are read for the claim a volume serves, as Longhorn fills its
	// kubernetesStatus, and for the volume a VolumeAttachment's PV names.
	pvs interface {
		List(labels.Selector) ([]*corev1.PersistentVolume, error)
	}
}

// kubernetesStatus is what Longhorn records about the claim a volume
// serves: the claim of the Longhorn PV whose handle is the volume (one the
// provisioner simulator made, or one made by hand for a volume made by hand).
func (s *longhornSimulator) kubernetesStatus(v *lhv1beta2.Volume) lhv1beta2.KubernetesStatus {
	ks := v.Status.KubernetesStatus
	pvs, _ := s.pvs.List(labels.Everything())
	for _, pv := range pvs {
		if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != longhornProvisioner || pv.Spec.CSI.VolumeHandle != v.Name || pv.Spec.ClaimRef == nil {
			continue
		}
		ks.PVName, ks.PVStatus = pv.Name, string(pv.Status.Phase)
		ks.Namespace, ks.PVCName = pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name
		return ks
	}
	return kubernetesStatusFromAnnotation(v)
}

// csiAttacherFinalizer is the finalizer Longhorn's external-attacher puts
// on a VolumeAttachment it handles: the object stays until the volume is
// detached from its node.
const csiAttacherFinalizer = "external-attacher/driver-longhorn-io"

// volumeAttachments maps each Longhorn volume (by name) to the
// VolumeAttachments for it (those for driver.longhorn.io whose PV's handle
// is the volume); under "" are those whose PV or volume is not known.
func (s *longhornSimulator) volumeAttachments(volumes map[string]bool) map[string][]*storagev1.VolumeAttachment {
	pvs, _ := s.pvs.List(labels.Everything())
	handle := map[string]string{}
	for _, pv := range pvs {
		if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == longhornProvisioner {
			handle[pv.Name] = pv.Spec.CSI.VolumeHandle
		}
	}
	out := map[string][]*storagev1.VolumeAttachment{}
	vas, _ := s.attachments.List(labels.Everything())
	for _, va := range vas {
		if va.Spec.Attacher != longhornProvisioner {
			continue
		}
		vol := handle[ptr.Deref(va.Spec.Source.PersistentVolumeName, "")]
		if !volumes[vol] {
			vol = ""
		}
		out[vol] = append(out[vol], va)
	}
	return out
}

// podClaimKeys are the claims ("namespace/name") a pod mounts.
func podClaimKeys(p *corev1.Pod) []string {
	var out []string
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && !slices.Contains(out, p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName) {
			out = append(out, p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

// attachNode is where a ReadWriteOnce volume is attached, given where it is
// attached now and the live (not deleting) VolumeAttachments for it. It
// stays on its node while that node's VolumeAttachment exists, reachable
// or not: the attach/detach controller removes it only once no pod there
// uses the volume and the node no longer reports it in use (from a lost
// node: after 6 min, or with the out-of-service taint), or someone deletes
// it. Otherwise it goes to the node of the oldest VolumeAttachment, if that
// node's Longhorn is up to attach it.
func attachNode(current string, attachments []*storagev1.VolumeAttachment, ready map[string]bool) string {
	if current != "" && slices.ContainsFunc(attachments, func(va *storagev1.VolumeAttachment) bool { return va.Spec.NodeName == current }) {
		return current
	}
	var first *storagev1.VolumeAttachment
	for _, va := range attachments {
		if !ready[va.Spec.NodeName] {
			continue
		}
		if first == nil || va.CreationTimestamp.Before(&first.CreationTimestamp) ||
			va.CreationTimestamp.Equal(&first.CreationTimestamp) && va.Name < first.Name {
			first = va
		}
	}
	if first == nil {
		return ""
	}
	return first.Spec.NodeName
}

// answerAttachments is Longhorn's external-attacher answering the
// VolumeAttachments of a volume whose attachment is now at node ("": none),
// attached there (up) or not (faulted, or still attaching): one for that
// node is marked attached once the volume is up there
// (ControllerPublishVolume returned) and stays so while the attachment
// stays, faulted or not, as the attacher re-checks nothing; others are not
// attached. A deleted one loses its finalizer once the volume is off its
// node (ControllerUnpublishVolume returned), and so goes.
func (s *longhornSimulator) answerAttachments(ctx context.Context, vas []*storagev1.VolumeAttachment, node string, up bool) (again time.Duration) {
	client := s.core.StorageV1().VolumeAttachments()
	for _, va := range vas {
		has := slices.Contains(va.Finalizers, csiAttacherFinalizer)
		if va.DeletionTimestamp != nil {
			if !has || va.Spec.NodeName == node {
				continue
			}
			nva := va.DeepCopy()
			nva.Finalizers = slices.DeleteFunc(nva.Finalizers, func(f string) bool { return f == csiAttacherFinalizer })
			if _, err := client.Update(ctx, nva, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
				s.log.Warn("release volume attachment", "attachment", va.Name, "err", err)
				again = time.Second
				continue
			}
			s.log.Info("volume detached, attachment released", "attachment", va.Name, "node", va.Spec.NodeName)
			continue
		}
		if !has {
			nva := va.DeepCopy()
			nva.Finalizers = append(nva.Finalizers, csiAttacherFinalizer)
			updated, err := client.Update(ctx, nva, metav1.UpdateOptions{})
			if err != nil {
				if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
					s.log.Warn("take volume attachment", "attachment", va.Name, "err", err)
				}
				again = time.Second
				continue
			}
			va = updated
		}
		attached := va.Spec.NodeName == node && (up || va.Status.Attached)
		if va.Status.Attached == attached {
			continue
		}
		nva := va.DeepCopy()
		nva.Status.Attached = attached
		if _, err := client.UpdateStatus(ctx, nva, metav1.UpdateOptions{}); err != nil {
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				s.log.Warn("answer volume attachment", "attachment", va.Name, "err", err)
			}
			again = time.Second
			continue
		}
		s.log.Info("volume attachment answered", "attachment", va.Name, "node", va.Spec.NodeName, "attached", attached)
	}
	return again
}

// reconcileEngine keeps one engine per volume whose status, as Longhorn's
// does, maps each replica to an address and reports rebuilds by address.
func (s *longhornSimulator) reconcileEngine(ctx context.Context, v *lhv1beta2.Volume, reps []*lhv1beta2.Replica, engineByName map[string]*lhv1beta2.Engine, now time.Time) {
	name := v.Name + "-e-0"
	engines := s.lh.LonghornV1beta2().Engines(kube.LonghornNamespace)
	engine := engineByName[name]
	if engine == nil {
		if s.engined[string(v.UID)] {
			return // created; the informer has not shown it yet
		}
		e := &lhv1beta2.Engine{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kube.LonghornNamespace, Labels: map[string]string{"longhornvolume": v.Name},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: lhv1beta2.SchemeGroupVersion.String(), Kind: "Volume", Name: v.Name, UID: v.UID}}},
			Spec: lhv1beta2.EngineSpec{
				InstanceSpec: lhv1beta2.InstanceSpec{VolumeName: v.Name, VolumeSize: v.Spec.Size, DesireState: lhv1beta2.InstanceStateRunning, DataEngine: lhv1beta2.DataEngineTypeV1},
				Frontend:     lhv1beta2.VolumeFrontendBlockDev,
			},
		}
		if _, err := engines.Create(ctx, e, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			s.log.Warn("create engine", "volume", v.Name, "err", err)
			return
		}
		s.engined[string(v.UID)] = true
		return
	}
	// The informer lists replicas in no fixed order: addresses are handed
	// out in name order, or every pass would shuffle them and rewrite the
	// engine (a write per volume every pass that real Longhorn does not
	// make, and that every watcher of the site paid for while idle).
	reps = slices.SortedFunc(slices.Values(reps), func(a, b *lhv1beta2.Replica) int { return strings.Compare(a.Name, b.Name) })
	addrs := map[string]string{}
	rebuilds := map[string]*lhv1beta2.RebuildStatus{}
	// As Longhorn's engine does: RW for a replica that takes every write,
	// WO while it is rebuilt, ERR once it failed.
	modes := map[string]lhv1beta2.ReplicaMode{}
	for i, r := range reps {
		addr := fmt.Sprintf("tcp://10.42.%d.%d:%d", i, 10+len(r.Spec.NodeID), 10000+i)
		addrs[r.Name] = addr
		switch kube.ReplicaState(r) {
		case kube.ReplicaHealthy:
			modes[r.Name] = lhv1beta2.ReplicaModeRW
		case kube.ReplicaRebuilding:
			modes[r.Name] = lhv1beta2.ReplicaModeWO
		case kube.ReplicaFailed:
			modes[r.Name] = lhv1beta2.ReplicaModeERR
		}
		if started, ok := s.rebuild[r.Name]; ok && kube.ReplicaState(r) == kube.ReplicaRebuilding {
			// Tens of percent: finer would rewrite the engine on every pass.
			pct := int(100*now.Sub(started)/max(s.opts.RebuildTime, time.Millisecond)) / 10 * 10
			rebuilds[addr] = &lhv1beta2.RebuildStatus{IsRebuilding: true, Progress: min(pct, 99), State: "in_progress"}
		}
	}
	if maps.EqualFunc(addrs, engine.Status.CurrentReplicaAddressMap, func(a, b string) bool { return a == b }) &&
		maps.EqualFunc(rebuilds, engine.Status.RebuildStatus, func(a, b *lhv1beta2.RebuildStatus) bool { return a != nil && b != nil && *a == *b }) &&
		maps.Equal(modes, engine.Status.ReplicaModeMap) {
		return
	}
	ne := engine.DeepCopy()
	ne.Status.CurrentReplicaAddressMap, ne.Status.RebuildStatus, ne.Status.ReplicaModeMap = addrs, rebuilds, modes
	if _, err := engines.UpdateStatus(ctx, ne, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		s.log.Warn("update engine status", "engine", name, "err", err)
	}
}

func (s *longhornSimulator) reconcile(ctx context.Context) time.Duration {
	ready := readyNodes(s.nodes)
	volumes, _ := s.volumes.List(labels.Everything())
	all, _ := s.replicas.List(labels.Everything())
	byVolume := map[string][]*lhv1beta2.Replica{}
	for _, r := range all {
		byVolume[r.Spec.VolumeName] = append(byVolume[r.Spec.VolumeName], r)
	}
	known := map[string]bool{}
	for _, v := range volumes {
		known[v.Name] = true
	}
	attachments := s.volumeAttachments(known)
	// Each volume's engine by name, from one list a pass: a list per
	// volume made a pass over 2,000 volumes walk 4 million engines, and
	// the simulator took minutes to stop a new site's replicas.
	engines, _ := s.engines.List(labels.Everything())
	engineByName := make(map[string]*lhv1beta2.Engine, len(engines))
	for _, e := range engines {
		engineByName[e.Name] = e
	}
	var again time.Duration
	for _, v := range volumes {
		if d := s.reconcileVolume(ctx, v, byVolume[v.Name], ready, attachments[v.Name], engineByName); d > 0 && (again == 0 || d < again) {
			again = d
		}
	}
	// A VolumeAttachment for no known volume is answered as Longhorn's
	// driver answers one for a volume it does not have: not attached, and
	// a deleted one goes.
	if d := s.answerAttachments(ctx, attachments[""], "", false); d > 0 && (again == 0 || d < again) {
		again = d
	}
	return again
}

func (s *longhornSimulator) reconcileVolume(ctx context.Context, v *lhv1beta2.Volume, reps []*lhv1beta2.Replica, ready map[string]bool, attachments []*storagev1.VolumeAttachment, engineByName map[string]*lhv1beta2.Engine) time.Duration {
	now := time.Now()
	want := v.Spec.NumberOfReplicas
	if want <= 0 {
		want = 3
	}
	var again time.Duration
	// Longhorn attaches a volume where a live VolumeAttachment asks for
	// it, and detaches it when none does (the deleted ones are being
	// detached).
	ks := s.kubernetesStatus(v)
	var live []*storagev1.VolumeAttachment
	for _, va := range attachments {
		if va.DeletionTimestamp == nil {
			live = append(live, va)
		}
	}
	inUse := len(live) > 0
	replicas := s.lh.LonghornV1beta2().Replicas(kube.LonghornNamespace)
	hasReplica := map[string]bool{}
	healthy, usable := 0, 0
	for _, r := range reps {
		hasReplica[r.Spec.NodeID] = true
		state := kube.ReplicaState(r)
		switch {
		case !inUse && state == kube.ReplicaHealthy:
			// Nothing uses the volume: Longhorn detaches it and stops its
			// replicas, which keep their data.
			r = r.DeepCopy()
			r.Spec.DesireState = lhv1beta2.InstanceStateStopped
			s.updateReplica(ctx, replicas, r, lhv1beta2.InstanceStateStopped)
			s.log.Info("replica stopped", "volume", v.Name, "replica", r.Name, "node", r.Spec.NodeID)
		case !inUse && state == kube.ReplicaStopped:
			// Detached: a stopped replica is neither failed by its node's
			// loss nor started.
		case inUse && state == kube.ReplicaStopped && r.Spec.HealthyAt != "" && ready[r.Spec.NodeID]:
			// Attached again: the stopped replica starts with its data.
			r = r.DeepCopy()
			r.Spec.DesireState = lhv1beta2.InstanceStateRunning
			s.updateReplica(ctx, replicas, r, lhv1beta2.InstanceStateRunning)
			s.log.Info("replica started", "volume", v.Name, "replica", r.Name, "node", r.Spec.NodeID)
			healthy++
			usable++
		case !ready[r.Spec.NodeID] && state != kube.ReplicaFailed:
			// The node is gone: Longhorn marks its replica failed.
			r = r.DeepCopy()
			r.Spec.FailedAt = now.UTC().Format(time.RFC3339)
			r.Spec.LastFailedAt = r.Spec.FailedAt
			s.updateReplica(ctx, replicas, r, lhv1beta2.InstanceStateError)
			s.log.Info("replica failed", "volume", v.Name, "replica", r.Name, "node", r.Spec.NodeID)
		case inUse && ready[r.Spec.NodeID] && state == kube.ReplicaFailed:
			// The node is back: the replica is rebuilt from a healthy one.
			r = r.DeepCopy()
			r.Spec.FailedAt, r.Spec.HealthyAt = "", ""
			r.Spec.RebuildRetryCount++
			s.rebuild[r.Name] = now
			s.updateReplica(ctx, replicas, r, lhv1beta2.InstanceStateRunning)
			s.log.Info("replica rebuilding", "volume", v.Name, "replica", r.Name, "node", r.Spec.NodeID)
			usable++
			again = s.opts.RebuildTime
		case state == kube.ReplicaRebuilding:
			started, ok := s.rebuild[r.Name]
			if !ok {
				started, s.rebuild[r.Name] = now, now
			}
			if left := s.opts.RebuildTime - now.Sub(started); left > 0 {
				usable++
				// Come back soon: the engine reports the progress as it goes.
				again = min(left, 500*time.Millisecond)
				continue
			}
			r = r.DeepCopy()
			r.Spec.HealthyAt = now.UTC().Format(time.RFC3339)
			r.Spec.LastHealthyAt = r.Spec.HealthyAt
			delete(s.rebuild, r.Name)
			s.updateReplica(ctx, replicas, r, lhv1beta2.InstanceStateRunning)
			s.log.Info("replica rebuilt", "volume", v.Name, "replica", r.Name)
			healthy++
			usable++
		case state == kube.ReplicaHealthy:
			healthy++
			usable++
		}
	}
	// A new volume gets its replicas on distinct ready nodes, healthy at once
	// (nothing to rebuild from yet).
	if len(reps) == 0 && s.seeded[string(v.UID)] {
		// Replicas were created but the informer does not show them yet:
		// judge the volume once it does.
		return 200 * time.Millisecond
	}
	if len(reps) == 0 {
		s.seeded[string(v.UID)] = true
		nodes := sortedReady(ready)
		// Data locality: the node that wrote the claim holds the first replica.
		if first := v.Annotations[AnnotationFirstReplica]; ready[first] {
			nodes = append([]string{first}, slices.DeleteFunc(nodes, func(n string) bool { return n == first })...)
		}
		for _, node := range nodes[:min(want, len(nodes))] {
			if err := s.createReplica(ctx, v, node, now); err != nil {
				s.log.Warn("create replica", "volume", v.Name, "node", node, "err", err)
				continue
			}
			healthy++
		}
	}
	// Fewer replicas than the volume wants (its count raised, one lost
	// for good): Longhorn schedules one more on a ready node that has
	// none and rebuilds it from a healthy one, one at a time.
	if inUse && len(reps) > 0 && healthy > 0 && len(reps) < want && now.Sub(s.added[string(v.UID)]) > 2*time.Second {
		for _, node := range sortedReady(ready) {
			if hasReplica[node] {
				continue
			}
			if err := s.createRebuildingReplica(ctx, v, node); err != nil {
				s.log.Warn("create replica", "volume", v.Name, "node", node, "err", err)
			} else {
				s.added[string(v.UID)] = now
				s.log.Info("replica scheduled, rebuilding", "volume", v.Name, "node", node)
			}
			again = 200 * time.Millisecond
			break
		}
	}
	robustness := lhv1beta2.VolumeRobustnessFaulted
	switch {
	case !inUse:
		// A detached volume's robustness is unknown: no engine judges it.
		robustness = lhv1beta2.VolumeRobustnessUnknown
	case healthy >= want:
		robustness = lhv1beta2.VolumeRobustnessHealthy
	case healthy > 0:
		robustness = lhv1beta2.VolumeRobustnessDegraded
	}
	st := v.Status.DeepCopy()
	st.Robustness = robustness
	st.CurrentNodeID = ""
	if inUse {
		st.CurrentNodeID = attachNode(v.Status.CurrentNodeID, live, ready)
	}
	st.State = lhv1beta2.VolumeStateAttached
	if robustness == lhv1beta2.VolumeRobustnessFaulted || st.CurrentNodeID == "" {
		st.State = lhv1beta2.VolumeStateDetached
	}
	if robustness == lhv1beta2.VolumeRobustnessDegraded {
		if v.Status.Robustness != lhv1beta2.VolumeRobustnessDegraded || st.LastDegradedAt == "" {
			st.LastDegradedAt = now.UTC().Format(time.RFC3339)
		}
	} else {
		st.LastDegradedAt = ""
	}
	if st.ActualSize == 0 {
		st.ActualSize = v.Spec.Size / 4
	}
	s.reconcileEngine(ctx, v, reps, engineByName, now)
	st.KubernetesStatus = ks
	if !statusEqual(&v.Status, st) {
		nv := v.DeepCopy()
		nv.Status = *st
		if _, err := s.lh.LonghornV1beta2().Volumes(kube.LonghornNamespace).UpdateStatus(ctx, nv, metav1.UpdateOptions{}); err != nil {
			if !apierrors.IsConflict(err) {
				s.log.Warn("update volume status", "volume", v.Name, "err", err)
			}
			// Not attached or detached yet: the attacher answers nothing.
			return time.Second
		}
		if v.Status.Robustness != robustness {
			s.log.Info("volume robustness", "volume", v.Name, "robustness", robustness, "healthy", healthy, "want", want)
		}
		if v.Status.CurrentNodeID != st.CurrentNodeID {
			s.log.Info("volume attachment", "volume", v.Name, "from", v.Status.CurrentNodeID, "to", st.CurrentNodeID, "state", st.State)
		}
	}
	if d := s.answerAttachments(ctx, attachments, st.CurrentNodeID, st.State == lhv1beta2.VolumeStateAttached); d > 0 && (again == 0 || d < again) {
		again = d
	}
	_ = usable
	return again
}

func statusEqual(a, b *lhv1beta2.VolumeStatus) bool {
	return a.Robustness == b.Robustness && a.State == b.State && a.CurrentNodeID == b.CurrentNodeID &&
		a.LastDegradedAt == b.LastDegradedAt && a.ActualSize == b.ActualSize &&
		a.KubernetesStatus.PVCName == b.KubernetesStatus.PVCName && a.KubernetesStatus.Namespace == b.KubernetesStatus.Namespace
}

func sortedReady(ready map[string]bool) []string {
	var nodes []string
	for n, ok := range ready {
		if ok {
			nodes = append(nodes, n)
		}
	}
	slices.Sort(nodes)
	return nodes
}

func (s *longhornSimulator) createReplica(ctx context.Context, v *lhv1beta2.Volume, node string, now time.Time) error {
	return s.newReplica(ctx, v, node, now.UTC().Format(time.RFC3339))
}

// createRebuildingReplica adds a replica that holds nothing yet: it
// rebuilds (RebuildTime) before it counts.
func (s *longhornSimulator) createRebuildingReplica(ctx context.Context, v *lhv1beta2.Volume, node string) error {
	return s.newReplica(ctx, v, node, "")
}

// newReplica creates a running replica of v on node, healthy since stamp
// ("": never yet, rebuilding).
func (s *longhornSimulator) newReplica(ctx context.Context, v *lhv1beta2.Volume, node, stamp string) error {
	r := &lhv1beta2.Replica{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-r-%s", v.Name, rand.String(8)),
			Namespace: kube.LonghornNamespace,
			Labels:    map[string]string{"longhornvolume": v.Name, "longhornnode": node},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: lhv1beta2.SchemeGroupVersion.String(), Kind: "Volume", Name: v.Name, UID: v.UID,
			}},
		},
		Spec: lhv1beta2.ReplicaSpec{
			InstanceSpec: lhv1beta2.InstanceSpec{
				VolumeName: v.Name, VolumeSize: v.Spec.Size, NodeID: node,
				DesireState: lhv1beta2.InstanceStateRunning, DataEngine: lhv1beta2.DataEngineTypeV1,
			},
			HealthyAt: stamp, LastHealthyAt: stamp, Active: true,
		},
	}
	created, err := s.lh.LonghornV1beta2().Replicas(kube.LonghornNamespace).Create(ctx, r, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	created.Status.CurrentState = lhv1beta2.InstanceStateRunning
	created.Status.OwnerID = node
	_, err = s.lh.LonghornV1beta2().Replicas(kube.LonghornNamespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

type replicaClient interface {
	Update(context.Context, *lhv1beta2.Replica, metav1.UpdateOptions) (*lhv1beta2.Replica, error)
	UpdateStatus(context.Context, *lhv1beta2.Replica, metav1.UpdateOptions) (*lhv1beta2.Replica, error)
}

func (s *longhornSimulator) updateReplica(ctx context.Context, c replicaClient, r *lhv1beta2.Replica, state lhv1beta2.InstanceState) {
	updated, err := c.Update(ctx, r, metav1.UpdateOptions{})
	if err != nil {
		if !apierrors.IsConflict(err) {
			s.log.Warn("update replica", "replica", r.Name, "err", err)
		}
		return
	}
	if updated.Status.CurrentState == state {
		return
	}
	updated.Status.CurrentState = state
	if _, err := c.UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		s.log.Warn("update replica status", "replica", r.Name, "err", err)
	}
}
