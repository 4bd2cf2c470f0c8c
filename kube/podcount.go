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
// not every pod of the site) and reads the rest as these sums. Not safe
// for concurrent use: the snapshot holds its lock.
type podCounts map[string]NodePodCount

// add counts obj (a pod, or the last state of a deleted one) in with sign
// +1 or out with -1; a pod in a shown namespace is not counted here.
func (pc podCounts) add(obj any, sign int) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok || ShownNamespace(p.Namespace) {
		return
	}
	node, c, ok := podCount(p)
	if !ok {
		return
	}
	if sign > 0 {
		pc[node] = pc[node].plus(c)
	} else {
		pc[node] = pc[node].minus(c)
	}
	if pc[node] == (NodePodCount{}) {
		delete(pc, node)
	}
}
