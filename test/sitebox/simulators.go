package sitebox

import (
	"context"
	"log/slog"
	"sync"
	"time"

	lhinformers "github.com/longhorn/longhorn-manager/k8s/pkg/client/informers/externalversions"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	kvv1 "kubevirt.io/api/core/v1"

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
	// PKIDir holds the site's certificates; set, the virt-api simulator
	// runs (virtapisim.go), serving with them.
	PKIDir string
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
//     attached on the pod's node; see attach.go),
//   - a virt-api simulator, with opts.PKIDir: KubeVirt's aggregated
//     subresources API, its VNC console (virtapisim.go).
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
		added:       map[string]time.Time{},
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
	if opts.PKIDir != "" {
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := runVirtAPISimulator(ctx, core, dyn, opts.PKIDir, vmiInf, log.With("simulator", "virt-api")); err != nil {
				log.Error("virt-api simulator stopped", "err", err)
			}
		}()
	}
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
