package streams

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/kube"
)

// Containers of a VM app's virt-launcher pod that log: KubeVirt's
// guest-console-log container follows the guest's serial console; without
// it (serial console logging off) compute, where virt-launcher logs.
const (
	GuestConsoleLogContainer = "guest-console-log"
	ComputeContainer         = "compute"
	// LabelVMIName on a virt-launcher pod names its VMI.
	LabelVMIName = "vm.kubevirt.io/name"
	// defaultContainerAnnotation names the container kubectl reads by
	// default in a pod with several.
	defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"
)

// LogTarget is one container's log: what `sitecon logs` and the agent's
// collection read.
type LogTarget struct {
	Namespace string
	Pod       string
	Container string
	// Containers are all the pod's containers, for a reader to pick from.
	Containers []string
	// App is the app the pod runs, when there is one; AppUUID its EVE UUID.
	App     string
	AppUUID string
	// VM: the pod is a VM app's virt-launcher.
	VM bool
	// Why says how the container was chosen when nobody named it
	// ("the VM's console log"), empty when it was named or is the only one.
	Why string
}

// LogOptions are what to read of a log.
type LogOptions struct {
	Follow bool
	// Since: only lines newer than this long ago (0: all).
	Since time.Duration
	// SinceTime: only lines from this time on (whole seconds: the API
	// rounds it down). Wins over Since.
	SinceTime *time.Time
	// Tail: only the last *Tail lines (nil: all).
	Tail       *int64
	Timestamps bool
	// Previous: the log of the container's previous instance.
	Previous bool
}

// ResolveLogTarget finds what `sitecon logs NAME` reads in namespace: the
// pod named so, else the running pod of the app named so (its name or
// UUID). container picks one of the pod's containers; empty, the only
// one, a VM's console log, or the pod's default.
func ResolveLogTarget(ctx context.Context, cs kubernetes.Interface, namespace, name, container string) (LogTarget, error) {
	if name == "" {
		return LogTarget{}, fmt.Errorf("name an app or a pod")
	}
	pod, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return LogTarget{}, fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	if err != nil {
		pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return LogTarget{}, fmt.Errorf("pods in %s: %w", namespace, err)
		}
		pod, err = PickAppPod(pods.Items, name)
		if err != nil {
			return LogTarget{}, fmt.Errorf("%w in namespace %s", err, namespace)
		}
	}
	return LogTargetOf(pod, container)
}

// AppOfPod is the app a pod runs (its name and UUID) and whether it is a
// VM's virt-launcher; empty name for a pod that runs no app.
func AppOfPod(p *corev1.Pod) (name, uuid string, vm bool) {
	vm = IsVirtLauncher(p)
	if p.Namespace != kube.AppNamespace && p.Labels[kube.LabelAppName] == "" && p.Labels[kube.LabelAppUUID] == "" {
		return "", "", vm
	}
	fallback := p.Name
	if vm {
		fallback = cmp.Or(p.Labels[LabelVMIName], p.Name)
	}
	return kube.AppName(p.Labels, fallback), p.Labels[kube.LabelAppUUID], vm
}

// IsVirtLauncher: the pod is the one KubeVirt runs a VMI in.
func IsVirtLauncher(p *corev1.Pod) bool {
	return p.Labels["kubevirt.io"] == "virt-launcher" || strings.HasPrefix(p.Name, kube.VirtLauncherPrefix)
}

// PickAppPod picks the pod of the app named name (its name or UUID, or for
// a VM app its VMI's name, as the apps screen names it) among pods: a live
// one before one going away, running before not, newest first. An error
// names the apps there are.
func PickAppPod(pods []corev1.Pod, name string) (*corev1.Pod, error) {
	var matches []*corev1.Pod
	apps := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		app, uuid, vm := AppOfPod(p)
		if app == "" {
			continue
		}
		apps[app] = true
		if app == name || uuid == name || vm && p.Labels[LabelVMIName] == name {
			matches = append(matches, p)
		}
	}
	if len(matches) == 0 {
		known := slices.Sorted(func(yield func(string) bool) {
			for a := range apps {
				if !yield(a) {
					return
				}
			}
		})
		if len(known) == 0 {
			return nil, fmt.Errorf("no pod or app named %q", name)
		}
		return nil, fmt.Errorf("no pod or app named %q (apps: %s)", name, strings.Join(known, ", "))
	}
	slices.SortFunc(matches, func(a, b *corev1.Pod) int {
		return cmp.Or(
			kube.FalseFirst(a.DeletionTimestamp != nil, b.DeletionTimestamp != nil),
			kube.FalseFirst(a.Status.Phase != corev1.PodRunning, b.Status.Phase != corev1.PodRunning),
			b.CreationTimestamp.Compare(a.CreationTimestamp.Time),
			strings.Compare(a.Name, b.Name))
	})
	return matches[0], nil
}

// LogTargetOf is the log of one container of pod: the one named, else the
// one a reader means (see ResolveLogTarget).
func LogTargetOf(pod *corev1.Pod, container string) (LogTarget, error) {
	app, uuid, vm := AppOfPod(pod)
	t := LogTarget{Namespace: pod.Namespace, Pod: pod.Name, App: app, AppUUID: uuid, VM: vm}
	var names []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	t.Containers = names
	if container != "" {
		if !slices.Contains(names, container) && !slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == container }) {
			return LogTarget{}, fmt.Errorf("pod %s/%s has no container %q (it has %s)", pod.Namespace, pod.Name, container, strings.Join(names, ", "))
		}
		t.Container = container
		return t, nil
	}
	switch {
	case len(names) == 0:
		return LogTarget{}, fmt.Errorf("pod %s/%s has no containers", pod.Namespace, pod.Name)
	case vm && slices.Contains(names, GuestConsoleLogContainer):
		t.Container, t.Why = GuestConsoleLogContainer, "the VM's serial console log"
	case vm && slices.Contains(names, ComputeContainer):
		t.Container, t.Why = ComputeContainer, "virt-launcher's log: the VM has no "+GuestConsoleLogContainer+" container (serial console logging is off)"
	case len(names) == 1:
		t.Container = names[0]
	case slices.Contains(names, pod.Annotations[defaultContainerAnnotation]):
		t.Container = pod.Annotations[defaultContainerAnnotation]
		t.Why = fmt.Sprintf("the pod's default of %s", strings.Join(names, ", "))
	default:
		t.Container = names[0]
		t.Why = fmt.Sprintf("the first of %s; --container picks another", strings.Join(names, ", "))
	}
	return t, nil
}

// PodLogOptions turns the options into the API's.
func (o LogOptions) PodLogOptions(container string) *corev1.PodLogOptions {
	opts := &corev1.PodLogOptions{Container: container, Follow: o.Follow, Timestamps: o.Timestamps, Previous: o.Previous}
	switch {
	case o.SinceTime != nil:
		t := metav1.NewTime(*o.SinceTime)
		opts.SinceTime = &t
	case o.Since > 0:
		// Whole seconds, rounded up: never less than asked for.
		secs := int64((o.Since + time.Second - 1) / time.Second)
		opts.SinceSeconds = &secs
	}
	if o.Tail != nil {
		tail := *o.Tail
		opts.TailLines = &tail
	}
	return opts
}

// OpenLogStream opens the target container's log through the API server
// (which reads it from the pod's kubelet).
func OpenLogStream(ctx context.Context, cs kubernetes.Interface, t LogTarget, o LogOptions) (io.ReadCloser, error) {
	stream, err := cs.CoreV1().Pods(t.Namespace).GetLogs(t.Pod, o.PodLogOptions(t.Container)).Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("log of %s/%s container %s: %w", t.Namespace, t.Pod, t.Container, err)
	}
	return stream, nil
}
