package sitebox

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	lhclientset "github.com/longhorn/longhorn-manager/k8s/pkg/client/clientset/versioned"
	lhinformers "github.com/longhorn/longhorn-manager/k8s/pkg/client/informers/externalversions"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	kvv1 "kubevirt.io/api/core/v1"
	kvclientset "kubevirt.io/client-go/kubevirt"

	"github.com/sitecon/sitecon/kube"
)

// SimulatorOptions tune the simulators. Each is a speed-up the tests take
// over the field; the comment says what the real component does.
type SimulatorOptions struct {
	// RebuildTime is how long a simulated Longhorn replica rebuild takes.
	// Real Longhorn copies the volume's data: minutes for a few GiB over
	// the site's LAN, growing with the data (sitebox default 3s, tests 2s).
	RebuildTime time.Duration
	// VMBootTime is how long a VMI stays Scheduled after its virt-launcher
	// pod is Ready before it is Running: virt-handler defining and starting
	// the domain, seconds on a real device (a cold image pull more). Zero,
	// the test default, runs it the moment the launcher is Ready.
	VMBootTime time.Duration
}

// RunSimulators runs the node-component simulators until ctx ends:
//   - a Longhorn manager simulator (replicas follow node readiness; volume
//     robustness follows the replicas),
//   - a KubeVirt virt-controller simulator (a VMI gets a virt-launcher pod that
//     the real scheduler places; VMI status follows the pod; VMI replica sets
//     keep their count),
//   - a Longhorn CSI provisioner simulator (a PVC on a Longhorn class gets a
//     Longhorn volume and a bound PV),
//   - a kube-vip simulator (the plndr-cp-lock Lease moves off a lost node),
//   - Longhorn's CSI attacher, inside the Longhorn simulator (a volume is
//     attached where the real attach/detach controller's VolumeAttachment
//     asks, and the VolumeAttachment is marked attached once it is),
//   - a kubelet volume-manager simulator (the node reports the volumes its
//     pods use; a pod that mounts a claim starts only once its volume is
//     attached on the pod's node; see attach.go).
//
// They stand in for components that need real nodes; they never ship in sitecon.
func RunSimulators(ctx context.Context, cfg *rest.Config, opts SimulatorOptions, log *slog.Logger) error {
	if opts.RebuildTime <= 0 {
		opts.RebuildTime = 3 * time.Second
	}
	clients, err := kube.NewClients(cfg)
	if err != nil {
		return err
	}
	core, lh, kv := clients.Core, clients.Longhorn, clients.KubeVirt
	coreInf := informers.NewSharedInformerFactory(core, 0)
	lhInf := lhinformers.NewSharedInformerFactoryWithOptions(lh, 0, lhinformers.WithNamespace(kube.LonghornNamespace))
	vmiInf := listWatchInformer(
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kv.KubevirtV1().VirtualMachineInstances("").List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kv.KubevirtV1().VirtualMachineInstances("").Watch(ctx, o)
		}, &kvv1.VirtualMachineInstance{})
	rsInf := listWatchInformer(
		func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return kv.KubevirtV1().VirtualMachineInstanceReplicaSets("").List(ctx, o)
		},
		func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return kv.KubevirtV1().VirtualMachineInstanceReplicaSets("").Watch(ctx, o)
		}, &kvv1.VirtualMachineInstanceReplicaSet{})

	longhorn := &longhornSimulator{
		lh: lh, core: core, opts: opts, log: log.With("simulator", "longhorn"),
		nodes:       coreInf.Core().V1().Nodes().Lister(),
		volumes:     lhInf.Longhorn().V1beta2().Volumes().Lister(),
		replicas:    lhInf.Longhorn().V1beta2().Replicas().Lister(),
		engines:     lhInf.Longhorn().V1beta2().Engines().Lister(),
		rebuild:     map[string]time.Time{},
		engined:     map[string]bool{},
		seeded:      map[string]bool{},
		attachments: coreInf.Storage().V1().VolumeAttachments().Lister(),
		pvs:         coreInf.Core().V1().PersistentVolumes().Lister(),
	}
	kubevirt := &kubevirtSimulator{
		core: core, kv: kv, log: log.With("simulator", "kubevirt"),
		pods: coreInf.Core().V1().Pods().Lister(),
		vmis: vmiInf.GetStore(), replicaSets: rsInf.GetStore(), bootTime: opts.VMBootTime,
		created: map[types.UID]map[string]time.Time{},
	}
	vip := &vipSimulator{core: core, log: log.With("simulator", "kube-vip"), nodes: coreInf.Core().V1().Nodes().Lister()}
	provisioner := &provisionerSimulator{core: core, lh: lh, log: log.With("simulator", "longhorn-csi"),
		claims: coreInf.Core().V1().PersistentVolumeClaims().Lister(), volumes: coreInf.Core().V1().PersistentVolumes().Lister(),
		classes: coreInf.Storage().V1().StorageClasses().Lister(), made: map[string]bool{}}
	volumeManager := &volumeManagerSimulator{core: core, log: log.With("simulator", "volume-manager"),
		nodes: coreInf.Core().V1().Nodes().Lister(), pods: coreInf.Core().V1().Pods().Lister(),
		claims: coreInf.Core().V1().PersistentVolumeClaims().Lister(), pvs: coreInf.Core().V1().PersistentVolumes().Lister(),
		volumes: lhInf.Longhorn().V1beta2().Volumes().Lister()}
	kubelet := &kubeletReadinessSimulator{core: core, log: log.With("simulator", "kubelet-readiness"),
		nodes: coreInf.Core().V1().Nodes().Lister(), pods: coreInf.Core().V1().Pods().Lister()}

	lhTrigger, kvTrigger, vipTrigger, kubeletTrigger := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	csiTrigger, attachTrigger := make(chan struct{}, 1), make(chan struct{}, 1)
	on := func(inf cache.SharedIndexInformer, triggers ...chan struct{}) {
		poke := func() {
			for _, t := range triggers {
				select {
				case t <- struct{}{}:
				default:
				}
			}
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { poke() }, UpdateFunc: func(any, any) { poke() }, DeleteFunc: func(any) { poke() },
		})
	}
	on(coreInf.Core().V1().Nodes().Informer(), lhTrigger, vipTrigger, kubeletTrigger, attachTrigger)
	on(coreInf.Core().V1().Pods().Informer(), kvTrigger, kubeletTrigger, attachTrigger)
	on(coreInf.Storage().V1().VolumeAttachments().Informer(), lhTrigger)
	on(lhInf.Longhorn().V1beta2().Volumes().Informer(), lhTrigger, attachTrigger)
	on(lhInf.Longhorn().V1beta2().Replicas().Informer(), lhTrigger)
	on(lhInf.Longhorn().V1beta2().Engines().Informer(), lhTrigger)
	on(vmiInf, kvTrigger)
	on(coreInf.Core().V1().PersistentVolumeClaims().Informer(), csiTrigger, attachTrigger)
	on(coreInf.Core().V1().PersistentVolumes().Informer(), csiTrigger, lhTrigger, attachTrigger)
	on(coreInf.Storage().V1().StorageClasses().Informer(), csiTrigger)
	on(rsInf, kvTrigger)

	coreInf.Start(ctx.Done())
	lhInf.Start(ctx.Done())
	go vmiInf.Run(ctx.Done())
	go rsInf.Run(ctx.Done())
	coreInf.WaitForCacheSync(ctx.Done())
	lhInf.WaitForCacheSync(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), vmiInf.HasSynced, rsInf.HasSynced) {
		return ctx.Err()
	}
	log.Info("simulators running")

	var wg sync.WaitGroup
	loop := func(trigger chan struct{}, reconcile func(context.Context) time.Duration) {
		defer wg.Done()
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-trigger:
			case <-timer.C:
			}
			// A reconcile may ask to run again after a delay (a rebuild in
			// progress); otherwise it waits for the next watch event.
			if again := reconcile(ctx); again > 0 {
				timer.Reset(again)
			}
		}
	}
	wg.Add(6)
	go loop(csiTrigger, provisioner.reconcile)
	go loop(lhTrigger, longhorn.reconcile)
	go loop(kvTrigger, kubevirt.reconcile)
	go loop(vipTrigger, vip.reconcile)
	go loop(kubeletTrigger, kubelet.reconcile)
	go loop(attachTrigger, volumeManager.reconcile)
	wg.Wait()
	return nil
}

func listWatchInformer(list cache.ListWithContextFunc, watchFn cache.WatchFuncWithContext, obj runtime.Object) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(&cache.ListWatch{ListWithContextFunc: list, WatchFuncWithContext: watchFn}, obj, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

type nodeLister interface {
	List(labels.Selector) ([]*corev1.Node, error)
}

func readyNodes(l nodeLister) map[string]bool {
	nodes, _ := l.List(labels.Everything())
	ready := map[string]bool{}
	for _, n := range nodes {
		ready[n.Name] = kube.NodeIsReady(n) && !hasUnreachableTaint(n)
	}
	return ready
}

func hasUnreachableTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady {
			return true
		}
	}
	return false
}

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
func (s *longhornSimulator) reconcileEngine(ctx context.Context, v *lhv1beta2.Volume, reps []*lhv1beta2.Replica, now time.Time) {
	name := v.Name + "-e-0"
	engines := s.lh.LonghornV1beta2().Engines(kube.LonghornNamespace)
	var engine *lhv1beta2.Engine
	all, _ := s.engines.List(labels.Everything())
	for _, e := range all {
		if e.Name == name {
			engine = e
		}
	}
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
	var again time.Duration
	for _, v := range volumes {
		if d := s.reconcileVolume(ctx, v, byVolume[v.Name], ready, attachments[v.Name]); d > 0 && (again == 0 || d < again) {
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

func (s *longhornSimulator) reconcileVolume(ctx context.Context, v *lhv1beta2.Volume, reps []*lhv1beta2.Replica, ready map[string]bool, attachments []*storagev1.VolumeAttachment) time.Duration {
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
	s.reconcileEngine(ctx, v, reps, now)
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
	stamp := now.UTC().Format(time.RFC3339)
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

// vipSimulator stands in for kube-vip's leader election: when the node holding
// the plndr-cp-lock Lease is lost, the first Ready server takes it.
type vipSimulator struct {
	core  kubernetes.Interface
	log   *slog.Logger
	nodes nodeLister
}

func (s *vipSimulator) reconcile(ctx context.Context) time.Duration {
	leases := s.core.CoordinationV1().Leases(kube.VIPLeaseNamespace)
	lease, err := leases.Get(ctx, kube.VIPLeaseName, metav1.GetOptions{})
	if err != nil {
		return 0
	}
	ready := readyNodes(s.nodes)
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if ready[holder] {
		return 0
	}
	candidates := sortedReady(ready)
	if len(candidates) == 0 {
		return 0
	}
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.HolderIdentity = ptr.To(candidates[0])
	lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
	lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		s.log.Warn("move VIP", "err", err)
		return time.Second
	}
	s.log.Info("VIP moved", "from", holder, "to", candidates[0])
	return 0
}

// kubeletReadinessSimulator does what a kubelet does when its node comes back
// and kwok does not: pods the node-lifecycle controller marked not ready while
// the node (or the API server) was away are ready again once the node is.
type kubeletReadinessSimulator struct {
	core  kubernetes.Interface
	log   *slog.Logger
	nodes nodeLister
	pods  interface {
		List(labels.Selector) ([]*corev1.Pod, error)
	}
}

func (s *kubeletReadinessSimulator) reconcile(ctx context.Context) time.Duration {
	ready := readyNodes(s.nodes)
	pods, _ := s.pods.List(labels.Everything())
	var again time.Duration
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !ready[p.Spec.NodeName] || podReady(p) {
			continue
		}
		// Only pods the node controller flipped: kwok has started them.
		if len(p.Status.ContainerStatuses) == 0 {
			continue
		}
		np := p.DeepCopy()
		now := metav1.Now()
		for i, c := range np.Status.Conditions {
			if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
				np.Status.Conditions[i].Status, np.Status.Conditions[i].LastTransitionTime = corev1.ConditionTrue, now
				np.Status.Conditions[i].Reason, np.Status.Conditions[i].Message = "", ""
			}
		}
		for i := range np.Status.ContainerStatuses {
			np.Status.ContainerStatuses[i].Ready = true
		}
		if _, err := s.core.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, np, metav1.UpdateOptions{}); err != nil {
			if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				s.log.Warn("re-ready pod", "pod", p.Namespace+"/"+p.Name, "err", err)
			}
			again = time.Second
			continue
		}
		s.log.Info("pod ready again", "pod", p.Namespace+"/"+p.Name, "node", p.Spec.NodeName)
	}
	return again
}
