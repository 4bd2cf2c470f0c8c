package views

// The console's way to a pod's log through the API server. This file is
// the one seam between the logs view and the cluster: the view takes a
// LogSource and knows nothing else of how the lines are fetched, so a
// shared implementation (a kube package that also serves `sitecon logs`)
// replaces the two functions below without touching the view.

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/kube"
)

// LogOptions are the options of one log request.
type LogOptions struct {
	Follow     bool
	Timestamps bool
	// TailLines, when > 0, starts with the last lines only.
	TailLines int64
	// SinceTime, when set, starts at that time (the API server reads it to
	// the second: lines of that second already seen come again).
	SinceTime time.Time
}

// LogOpener opens a container's log: the reader is the API server's
// response body, closed by the caller.
type LogOpener func(ctx context.Context, namespace, pod, container string, opts LogOptions) (io.ReadCloser, error)

// LogTarget is the pod whose log is shown and its containers.
type LogTarget struct {
	Namespace, Pod string
	Containers     []string
	// Container is the one shown first.
	Container string
}

// LogSource is what the logs view reads with.
type LogSource struct {
	// Resolve finds the pod of an app (app true: name is the app's object,
	// the pod or the VMI) or a pod by name, and its containers.
	Resolve func(ctx context.Context, namespace, name string, app bool) (LogTarget, error)
	Open    LogOpener
}

// PodLogSource reads logs through clients.
func PodLogSource(clients *kube.Clients) *LogSource {
	cs := clients.Core
	return &LogSource{
		Resolve: func(ctx context.Context, namespace, name string, app bool) (LogTarget, error) {
			return resolveLogTarget(ctx, cs, namespace, name, app)
		},
		Open: func(ctx context.Context, namespace, pod, container string, opts LogOptions) (io.ReadCloser, error) {
			o := &corev1.PodLogOptions{Container: container, Follow: opts.Follow, Timestamps: opts.Timestamps}
			if opts.TailLines > 0 {
				o.TailLines = &opts.TailLines
			}
			if !opts.SinceTime.IsZero() {
				o.SinceTime = &metav1.Time{Time: opts.SinceTime}
			}
			return cs.CoreV1().Pods(namespace).GetLogs(pod, o).Stream(ctx)
		},
	}
}

// virtLauncherPrefix starts the name of the pod KubeVirt runs a VM in.
const virtLauncherPrefix = "virt-launcher-"

func resolveLogTarget(ctx context.Context, cs kubernetes.Interface, namespace, name string, app bool) (LogTarget, error) {
	pod, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil && app {
		// A VM app's object is its VMI: the log is its virt-launcher pod's.
		pods, lerr := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "vm.kubevirt.io/name=" + name})
		if lerr != nil {
			return LogTarget{}, fmt.Errorf("find the pod of %s/%s: %w", namespace, name, lerr)
		}
		pod = pickLauncher(pods.Items, name)
		if pod == nil {
			return LogTarget{}, fmt.Errorf("%s/%s has no pod (neither a pod of that name nor a virt-launcher pod)", namespace, name)
		}
		err = nil
	}
	if err != nil {
		return LogTarget{}, fmt.Errorf("find pod %s/%s: %w", namespace, name, err)
	}
	t := LogTarget{Namespace: pod.Namespace, Pod: pod.Name}
	for _, c := range pod.Spec.Containers {
		t.Containers = append(t.Containers, c.Name)
	}
	t.Container = defaultLogContainer(t.Containers, pod.Annotations[defaultContainerAnnotation], strings.HasPrefix(pod.Name, virtLauncherPrefix))
	return t, nil
}

// pickLauncher is the VM's virt-launcher pod to read: a running one that is
// not going away (during a migration there are two), else the newest.
func pickLauncher(pods []corev1.Pod, vm string) *corev1.Pod {
	var best *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if !strings.HasPrefix(p.Name, virtLauncherPrefix+vm+"-") {
			continue
		}
		live := p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning
		bestLive := best != nil && best.DeletionTimestamp == nil && best.Status.Phase == corev1.PodRunning
		if best == nil || live && !bestLive || live == bestLive && p.CreationTimestamp.After(best.CreationTimestamp.Time) {
			best = p
		}
	}
	return best
}

// defaultContainerAnnotation names a pod's main container (kubectl reads it too).
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// guestConsoleLog is the container of a virt-launcher pod that carries the
// VM's serial console (lf-edge/eve's zedkube reads it for a VM app's log).
const guestConsoleLog = "guest-console-log"

// defaultLogContainer is the container a logs view opens on: the one the
// pod names as its default, a VM's console log, else the first.
func defaultLogContainer(containers []string, annotated string, launcher bool) string {
	switch {
	case len(containers) == 0:
		return ""
	case annotated != "" && slices.Contains(containers, annotated):
		return annotated
	case launcher && slices.Contains(containers, guestConsoleLog):
		return guestConsoleLog
	}
	return containers[0]
}
