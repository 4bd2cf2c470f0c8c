package change

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/safety"
)

// DrainStoppedError is a drain stopped while it ran: a volume whose data is
// on the node lost an up-to-date copy elsewhere (or turned faulted), so
// evicting on could leave it with no copy in service. The node stays
// cordoned; the pods already evicted stay evicted.
type DrainStoppedError struct {
	Node    string
	Reasons []string
}

func (e *DrainStoppedError) Error() string {
	return fmt.Sprintf("the drain of %s stopped: %s; %s stays cordoned (sitecon uncordon %s takes it back into service)",
		e.Node, strings.Join(e.Reasons, "; "), e.Node, e.Node)
}

// CopiesElsewhere counts, for each volume with an up-to-date copy on node,
// its up-to-date copies on other nodes: what the drain relies on.
func CopiesElsewhere(node string, volumes []*lhv1beta2.Volume, replicas []*lhv1beta2.Replica) map[string]int {
	byVolume := map[string][]*lhv1beta2.Replica{}
	for _, r := range replicas {
		byVolume[r.Spec.VolumeName] = append(byVolume[r.Spec.VolumeName], r)
	}
	out := map[string]int{}
	for _, v := range volumes {
		here, elsewhere := false, 0
		for _, r := range safety.UpToDate(byVolume[v.Name]) {
			if r.Spec.NodeID == node {
				here = true
			} else {
				elsewhere++
			}
		}
		if here {
			out[v.Name] = elsewhere
		}
	}
	return out
}

// DrainHazards judges the volumes a running drain relies on (before: their
// copies elsewhere when it began) as they are now. A volume that turned
// degraded because the node's own replica went is what a drain does; one
// that lost a copy on another node, or is faulted, is a reason to stop.
func DrainHazards(node string, before map[string]int, volumes []*lhv1beta2.Volume, replicas []*lhv1beta2.Replica) []string {
	var relied []*lhv1beta2.Volume
	for _, v := range volumes {
		if _, ok := before[v.Name]; ok {
			relied = append(relied, v)
		}
	}
	// Counted over every replica of the volume, whether or not the node
	// still holds one: Longhorn may have copied it off meanwhile.
	now := map[string]int{}
	byVolume := map[string][]*lhv1beta2.Replica{}
	for _, r := range replicas {
		byVolume[r.Spec.VolumeName] = append(byVolume[r.Spec.VolumeName], r)
	}
	for _, v := range relied {
		for _, r := range safety.UpToDate(byVolume[v.Name]) {
			if r.Spec.NodeID != node {
				now[v.Name]++
			}
		}
	}
	var reasons []string
	for _, v := range relied {
		switch {
		case v.Status.Robustness == lhv1beta2.VolumeRobustnessFaulted:
			reasons = append(reasons, fmt.Sprintf("%s turned faulted", safety.VolumeLabel(v)))
		case now[v.Name] < before[v.Name]:
			reasons = append(reasons, fmt.Sprintf("%s lost an up-to-date copy on another node (%d left besides %s's, %d when the drain began; robustness %s)",
				safety.VolumeLabel(v), now[v.Name], node, before[v.Name], v.Status.Robustness))
		}
	}
	slices.Sort(reasons)
	return reasons
}

// watchCopies watches Longhorn's volumes and replicas for as long as the
// drain runs and calls hazard once if DrainHazards finds a reason to stop.
// It returns once its caches have synced (a change before then is still
// judged: the first look compares with d). Call the returned func to stop
// watching.
func watchCopies(ctx context.Context, clients *kube.Clients, node string, d kube.Data, hazard func([]string)) (func(), error) {
	before := CopiesElsewhere(node, d.Volumes, d.Replicas)
	if len(before) == 0 {
		return func() {}, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	factory := kube.NewLonghornInformers(clients.Longhorn, &lhv1beta2.Volume{}, &lhv1beta2.Replica{})
	volumes := factory.Longhorn().V1beta2().Volumes()
	replicas := factory.Longhorn().V1beta2().Replicas()
	var once sync.Once
	// The first list delivers its objects as events while the other
	// cache may still be empty: judging then would see every copy
	// elsewhere gone and stop the drain before it began. Judge only once
	// both caches hold the whole picture.
	var synced atomic.Bool
	check := func() {
		if !synced.Load() {
			return
		}
		vs, _ := volumes.Lister().List(labels.Everything())
		rs, _ := replicas.Lister().List(labels.Everything())
		if reasons := DrainHazards(node, before, vs, rs); len(reasons) > 0 {
			once.Do(func() { hazard(reasons) })
		}
	}
	judge := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { check() },
		UpdateFunc: func(any, any) { check() },
		DeleteFunc: func(any) { check() },
	}
	if _, err := volumes.Informer().AddEventHandler(judge); err != nil {
		cancel()
		return nil, err
	}
	if _, err := replicas.Informer().AddEventHandler(judge); err != nil {
		cancel()
		return nil, err
	}
	stop := func() {
		cancel()
		factory.Shutdown()
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			stop()
			return nil, fmt.Errorf("the watch of %v did not sync before the drain's deadline: %w", typ, context.Cause(ctx))
		}
	}
	synced.Store(true)
	check()
	return stop, nil
}
