package kube

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// NodePodCount is what pods add to one node's figures: the pods placed
// there and not finished, those of them terminating, and the CPU
// (millicores) and memory (bytes) they request.
type NodePodCount struct {
	Pods, Leaving int
	CPU, Memory   int64
}

func (c NodePodCount) plus(o NodePodCount) NodePodCount {
	return NodePodCount{Pods: c.Pods + o.Pods, Leaving: c.Leaving + o.Leaving, CPU: c.CPU + o.CPU, Memory: c.Memory + o.Memory}
}

func (c NodePodCount) minus(o NodePodCount) NodePodCount {
	return NodePodCount{Pods: c.Pods - o.Pods, Leaving: c.Leaving - o.Leaving, CPU: c.CPU - o.CPU, Memory: c.Memory - o.Memory}
}

// podCount is what one pod adds to its node's figures; false for a pod
// that counts for no node (not placed, or finished).
func podCount(p *corev1.Pod) (string, NodePodCount, bool) {
	if p.Spec.NodeName == "" || podFinished(p) {
		return "", NodePodCount{}, false
	}
	cpu, mem := podRequests(p)
	c := NodePodCount{Pods: 1, CPU: cpu, Memory: mem}
	if p.DeletionTimestamp != nil {
		c.Leaving = 1
	}
	return p.Spec.NodeName, c, true
}

// NodePodCounts is what every pod of d adds to each node: the pods d lists
// and the counts the snapshot keeps for the pods it does not list
// (Data.CountedPods).
func NodePodCounts(d Data) map[string]NodePodCount {
	out := make(map[string]NodePodCount, len(d.Nodes))
	maps.Copy(out, d.CountedPods)
	for _, p := range d.Pods {
		if node, c, ok := podCount(p); ok {
			out[node] = out[node].plus(c)
		}
	}
	return out
}

// podCounts keeps, per node, what the pods outside the shown namespaces
// add to its figures, from the pod informer's events: the snapshot lists
// only the shown namespaces' pods (a frame then walks hundreds of pods,
// not every pod of the site) and reads the rest as these sums. Each pod's
// own share is kept by its key, and a change replaces it: a delete takes
// out what was counted for that key whatever object it carries (a relist
// may report a deletion with no object at all), so the sums cannot drift
// from the pods the informer holds. Not safe for concurrent use: the
// snapshot holds its lock.
type podCounts struct {
	byNode map[string]NodePodCount
	byPod  map[string]podShare
}

// podShare is what one pod adds to one node.
type podShare struct {
	node  string
	count NodePodCount
}

func newPodCounts() *podCounts {
	return &podCounts{byNode: map[string]NodePodCount{}, byPod: map[string]podShare{}}
}

// set counts obj, a pod as the informer now holds it (TrimForCache keeps a
// pod outside the shown namespaces as a *CountedPod), in place of what
// was counted for its key; a pod of a shown namespace is not counted
// here.
func (pc *podCounts) set(obj any) {
	p, ok := obj.(*CountedPod)
	if !ok || ShownNamespace(p.Namespace) {
		return
	}
	key := p.Namespace + "/" + p.Name
	pc.remove(key)
	if p.Node != "" {
		pc.byPod[key] = podShare{p.Node, p.Count}
		pc.byNode[p.Node] = pc.byNode[p.Node].plus(p.Count)
	}
}

// gone takes out what was counted for a deleted pod (the object, or the
// informer's DeletedFinalStateUnknown with or without one).
func (pc *podCounts) gone(obj any) {
	switch o := obj.(type) {
	case cache.DeletedFinalStateUnknown:
		pc.remove(o.Key)
	case *CountedPod:
		pc.remove(o.Namespace + "/" + o.Name)
	}
}

func (pc *podCounts) remove(key string) {
	share, ok := pc.byPod[key]
	if !ok {
		return
	}
	delete(pc.byPod, key)
	left := pc.byNode[share.node].minus(share.count)
	if left == (NodePodCount{}) {
		delete(pc.byNode, share.node)
		return
	}
	pc.byNode[share.node] = left
}
