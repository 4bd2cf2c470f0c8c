package kube

import (
	"maps"
	"strings"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	kvv1 "kubevirt.io/api/core/v1"
)

// trackRobustness remembers when each volume entered its robustness: Longhorn
// records only lastDegradedAt, and nothing for healthy or faulted.
func (s *Snapshot) trackRobustness(obj any) {
	v, ok := obj.(*lhv1beta2.Volume)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, seen := s.robustness[v.Name]
	if seen && prev.Robustness == v.Status.Robustness {
		return
	}
	s.writableRobustness()
	since := Since{Time: s.now(), Exact: seen}
	if v.Status.Robustness == lhv1beta2.VolumeRobustnessDegraded {
		if t, err := time.Parse(time.RFC3339, v.Status.LastDegradedAt); err == nil {
			since = Since{Time: t, Exact: true}
		}
	}
	s.robustness[v.Name] = RobustnessMark{Robustness: v.Status.Robustness, Since: since}
}

// trackPod notes where an app's container pod runs, to see it move. VM apps
// are followed through their VMI, not their launcher pod.
func (s *Snapshot) trackPod(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Namespace != AppNamespace || strings.HasPrefix(p.Name, VirtLauncherPrefix) {
		return
	}
	if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
		s.appRunsOn(AppKey(p.Labels, p.Name), p.Spec.NodeName)
	}
}

func (s *Snapshot) trackVMI(obj any) {
	vmi, ok := obj.(*kvv1.VirtualMachineInstance)
	if !ok || vmi.DeletionTimestamp != nil || vmi.Status.Phase != kvv1.Running || vmi.Status.NodeName == "" {
		return
	}
	s.appRunsOn(AppKey(vmi.Labels, vmi.Name), vmi.Status.NodeName)
}

func (s *Snapshot) appRunsOn(app, node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, seen := s.appNodes[app]; seen && prev != node {
		s.appMoves[app] = AppMove{At: s.now(), From: prev, To: node}
	}
	s.appNodes[app] = node
	delete(s.appGone, app)
	s.pruneApps()
}

// appMemory is how long the snapshot remembers where a deleted app ran:
// long enough for its replacement to start elsewhere and be seen as a move.
const appMemory = 10 * time.Minute

func (s *Snapshot) forgetPod(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok && p.Namespace == AppNamespace && !strings.HasPrefix(p.Name, VirtLauncherPrefix) {
		s.appObjectGone(AppKey(p.Labels, p.Name), p.Name, p.Spec.NodeName)
	}
}

func (s *Snapshot) forgetVMI(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if vmi, ok := obj.(*kvv1.VirtualMachineInstance); ok {
		s.appObjectGone(AppKey(vmi.Labels, vmi.Name), vmi.Name, vmi.Status.NodeName)
	}
}

// appObjectGone: an app's pod or VMI was deleted. An object without app
// labels is its own key, never seen again: forgotten at once. An app whose
// object on the node it was last seen on went is kept for appMemory, since
// its replacement may come up elsewhere; the old object of a move (on the
// node the app left) changes nothing.
func (s *Snapshot) appObjectGone(key, object, node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key == object {
		delete(s.appNodes, key)
		delete(s.appMoves, key)
		delete(s.appGone, key)
	} else if last, known := s.appNodes[key]; known && (last == node || node == "") {
		s.appGone[key] = s.now()
	}
	s.pruneApps()
}

// pruneApps drops the apps gone longer than appMemory. Called with mu held.
func (s *Snapshot) pruneApps() {
	now := s.now()
	for key, at := range s.appGone {
		if now.Sub(at) >= appMemory {
			delete(s.appNodes, key)
			delete(s.appMoves, key)
			delete(s.appGone, key)
		}
	}
}

func (s *Snapshot) forgetRobustness(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if v, ok := obj.(*lhv1beta2.Volume); ok {
		s.mu.Lock()
		if _, ok := s.robustness[v.Name]; ok {
			s.writableRobustness()
			delete(s.robustness, v.Name)
		}
		s.mu.Unlock()
	}
}

// writableRobustness makes s.robustness the snapshot's own before a
// write: a read (Data) shares the map it held, read only, rather than
// copying 2,000 marks for every frame. Called with s.mu held.
func (s *Snapshot) writableRobustness() {
	if s.robustnessShared {
		s.robustness = maps.Clone(s.robustness)
		s.robustnessShared = false
	}
}
