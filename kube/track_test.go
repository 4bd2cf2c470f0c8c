package kube

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube/kubetest"
)

func TestAppMovesAreTrackedFromWatchEvents(t *testing.T) {
	clock := kubetest.T0
	s := &Snapshot{now: func() time.Time { return clock }, appNodes: map[string]string{}, appMoves: map[string]AppMove{}, robustness: map[string]RobustnessMark{}}
	running := func(name, node string) *corev1.Pod {
		p := kubetest.Pod(AppNamespace, name, node, corev1.PodRunning, true)
		p.Labels = map[string]string{LabelAppUUID: "5b0f", LabelAppName: "plc-gateway"}
		return p
	}
	s.trackPod(running("plc-gateway-1", "node-b"))
	if len(s.appMoves) != 0 {
		t.Fatal("first sighting is not a move")
	}
	// The old pod terminating on the lost node is not a sighting.
	old := running("plc-gateway-1", "node-b")
	old.DeletionTimestamp = &metav1.Time{Time: kubetest.T0}
	s.trackPod(old)
	pending := running("plc-gateway-2", "node-a")
	pending.Status.Phase = corev1.PodPending
	s.trackPod(pending)
	if len(s.appMoves) != 0 {
		t.Fatal("a pending or terminating pod is not a move")
	}
	clock = kubetest.T0.Add(time.Minute)
	s.trackPod(running("plc-gateway-2", "node-a"))
	if m := s.appMoves["5b0f"]; m != (AppMove{At: clock, From: "node-b", To: "node-a"}) {
		t.Errorf("move = %+v", m)
	}
	// VM apps move through their VMI; launcher pods are ignored.
	s.trackPod(kubetest.Pod(AppNamespace, "virt-launcher-hmi-x", "node-c", corev1.PodRunning, true))
	vmi := &kvv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "hmi-a", Labels: map[string]string{LabelAppName: "hmi"}}}
	vmi.Status.Phase, vmi.Status.NodeName = kvv1.Running, "node-a"
	s.trackVMI(vmi)
	vmi2 := vmi.DeepCopy()
	vmi2.Name, vmi2.Status.NodeName = "hmi-b", "node-c"
	s.trackVMI(vmi2)
	d := Data{AppMoves: s.appMoves, VMIs: []*kvv1.VirtualMachineInstance{vmi2}}
	apps := Derive(d, clock).Apps
	if len(apps) != 1 || apps[0].LastMove == nil || apps[0].LastMove.From != "node-a" || apps[0].LastMove.To != "node-c" {
		t.Errorf("apps = %+v", apps)
	}
}

func TestNodeRequests(t *testing.T) {
	n := kubetest.Node("node-a", "10.0.0.1", corev1.ConditionTrue, kubetest.T0, nil)
	n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("4")
	p := kubetest.Pod("kube-system", "a", "node-a", corev1.PodRunning, true)
	p.Spec.Containers = []corev1.Container{
		{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}},
		{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}},
	}
	p.Spec.InitContainers = []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}}
	done := kubetest.Pod("kube-system", "job", "node-a", corev1.PodSucceeded, false)
	done.Spec.Containers = []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}
	ns := Derive(Data{Nodes: []*corev1.Node{n}, Pods: []*corev1.Pod{p, done}}, kubetest.T0).Nodes[0]
	if ns.CPURequested != 500 || ns.CPUAllocatable != 4000 || ns.MemoryRequested != 1<<30 || ns.MemoryAllocatable != 7<<30 {
		t.Errorf("requests: cpu %d/%d mem %d/%d", ns.CPURequested, ns.CPUAllocatable, ns.MemoryRequested, ns.MemoryAllocatable)
	}
}

// The snapshot's memory of where apps ran follows the cluster's apps, not
// every pod that ever ran: 2,000 pods churned through leave the maps as they
// were, while a move (old pod gone after the new one runs) is still seen.
func TestAppMemoryIsBoundedUnderChurn(t *testing.T) {
	clock := kubetest.T0
	s := &Snapshot{now: func() time.Time { return clock }, appNodes: map[string]string{}, appMoves: map[string]AppMove{},
		appGone: map[string]time.Time{}, robustness: map[string]RobustnessMark{}}
	app := func(name, node string) *corev1.Pod {
		p := kubetest.Pod(AppNamespace, name, node, corev1.PodRunning, true)
		p.Labels = map[string]string{LabelAppUUID: "5b0f", LabelAppName: "plc-gateway"}
		return p
	}
	s.trackPod(app("plc-gateway-1", "node-b"))
	base := len(s.appNodes) + len(s.appMoves) + len(s.appGone)
	for i := range 2000 {
		// Unlabelled pods (a job, a debug pod) and labelled apps created
		// and removed for good.
		p := kubetest.Pod(AppNamespace, fmt.Sprintf("churn-%d", i), "node-a", corev1.PodRunning, true)
		if i%2 == 1 {
			p.Labels = map[string]string{LabelAppUUID: fmt.Sprintf("gone-%d", i)}
		}
		s.trackPod(p)
		other := p.DeepCopy()
		other.Spec.NodeName = "node-c"
		if i%4 == 1 {
			s.trackPod(other) // a move before it goes
		}
		s.forgetPod(p)
		if i%4 == 1 {
			s.forgetPod(other)
		}
		clock = clock.Add(time.Second)
	}
	clock = clock.Add(appMemory)
	s.trackPod(app("plc-gateway-1", "node-b"))
	if got := len(s.appNodes) + len(s.appMoves) + len(s.appGone); got != base {
		t.Fatalf("after 2,000 pods churned, the snapshot holds %d app entries (appNodes %d, appMoves %d, appGone %d), want %d",
			got, len(s.appNodes), len(s.appMoves), len(s.appGone), base)
	}
	// A move: the new pod runs, then the old one on the lost node goes.
	s.trackPod(app("plc-gateway-2", "node-a"))
	s.forgetPod(app("plc-gateway-1", "node-b"))
	clock = clock.Add(2 * appMemory)
	s.trackPod(app("plc-gateway-2", "node-a"))
	if m := s.appMoves["5b0f"]; m.From != "node-b" || m.To != "node-a" {
		t.Fatalf("the move was forgotten when the old pod went: %+v", m)
	}
}
