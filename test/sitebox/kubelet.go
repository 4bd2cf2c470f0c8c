package sitebox

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/streams"
)

// Each node's kwok serves the kubelet API (container logs; exec, attach
// and port-forward answer too, with nothing configured behind them) on
// the node's own address, behind a TLS front on the kubelet port
// (kubeletfront.go) with a serving certificate the site's CA signed for
// that address. The API server dials it as it dials a kubelet: at the
// node's address, checking the serving certificate against
// --kubelet-certificate-authority and presenting its own client
// certificate (--kubelet-client-certificate), which the front checks
// against the site's CA, as a kubelet's --client-ca-file does.
//
// What a container logs is a file in CRI format under DIR/podlogs, named
// to kwok by a Logs object (kwok.x-k8s.io/v1alpha1) per pod; a test
// writes lines with AppendContainerLog. A pod without one logs nothing
// (the site's default ClusterLogs names an empty file). RestartContainer
// restarts a container: its file becomes the previous instance's log.

// KubeletPort is the port a node's kubelet serves on, as on a device.
const KubeletPort = 10250

//go:embed crds/kwok-logs.yaml
var kwokLogsCRD []byte

var kwokLogsResource = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "logs"}

// kubeletAddr is the address the API server dials a node's kubelet at:
// on a bootstrap-mode site its loopback address (its Node's ExternalIP),
// else its cluster address, which is on this machine's loopback.
func kubeletAddr(n Node) string {
	if n.LoopbackIP != "" {
		return n.LoopbackIP
	}
	return n.IP
}

// kubeletArgs are the kwok flags that make it serve the kubelet API.
func (s *Site) kubeletArgs(n Node) []string {
	return []string{
		// Behind the node's kubelet front (kubeletfront.go).
		"--server-address=" + net.JoinHostPort(kubeletAddr(n), strconv.Itoa(kubeletBackendPort)),
		// The port the node's status.daemonEndpoints names: the front's.
		"--node-port=" + strconv.Itoa(KubeletPort),
		"--tls-cert-file=" + s.pki("kubelet-"+n.Name+".crt"),
		"--tls-private-key-file=" + s.pki("kubelet-"+n.Name+".key"),
		// Logs objects come and go with the pods: watched, not read once.
		"--enable-crds=Logs",
	}
}

// apiServerKubeletArgs are the API server's flags for reaching kubelets.
func (s *Site) apiServerKubeletArgs() []string {
	args := []string{
		"--kubelet-certificate-authority=" + s.pki("ca.crt"),
		"--kubelet-client-certificate=" + s.pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + s.pki("apiserver-kubelet-client.key"),
	}
	if !s.Bootstrap {
		// The default order begins with Hostname, which nothing here
		// resolves: a node's cluster address is its kubelet's.
		args = append(args, "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname")
	}
	return args
}

// podLogsDir holds the containers' log files.
func (s *Site) podLogsDir() string { return filepath.Join(s.Dir, "podlogs") }

// kwokLogsConfig is the part of kwok's configuration that answers for a
// pod without a Logs object: an empty log, as a container that printed
// nothing has.
func (s *Site) kwokLogsConfig() (string, error) {
	empty := filepath.Join(s.podLogsDir(), "empty.log")
	if err := os.MkdirAll(s.podLogsDir(), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		return "", err
	}
	return fmt.Sprintf(`apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: sitebox-empty
spec:
  logs:
  - logsFile: %q
`, empty), nil
}

// logWriteMu keeps two writers from interleaving within one file.
var logWriteMu sync.Mutex

// AppendContainerLog appends lines to what a container of a pod has
// logged, as its runtime would (CRI log format, stdout, each line stamped
// with the time of the call), and makes sure the pod's kubelet serves it.
// The first write for a pod waits until the kubelet does.
func (s *Site) AppendContainerLog(ctx context.Context, namespace, pod, container string, lines ...string) error {
	return s.appendContainerLog(ctx, namespace, pod, container, func() time.Time { return time.Now().UTC() }, lines...)
}

// AppendContainerLogAt is AppendContainerLog with every line stamped at
// one time: lines a container writes within the same instant, which a
// reader that resumes by timestamp must still tell apart.
func (s *Site) AppendContainerLogAt(ctx context.Context, namespace, pod, container string, at time.Time, lines ...string) error {
	return s.appendContainerLog(ctx, namespace, pod, container, func() time.Time { return at.UTC() }, lines...)
}

func (s *Site) appendContainerLog(ctx context.Context, namespace, podName, container string, stamp func() time.Time, lines ...string) error {
	cfg, err := s.RESTConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	pod, err := cs.CoreV1().Pods(namespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	containers := podContainers(pod)
	if !slices.Contains(containers, container) {
		return fmt.Errorf("pod %s/%s has no container %q (it has %s)", namespace, podName, container, strings.Join(containers, ", "))
	}
	dir := filepath.Join(s.podLogsDir(), namespace+"_"+podName+"_"+string(pod.UID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	for _, line := range lines {
		// One entry per line: a newline inside would start a new one.
		for part := range strings.SplitSeq(line, "\n") {
			fmt.Fprintf(&b, "%s stdout F %s\n", stamp().Format(time.RFC3339Nano), part)
		}
	}
	logWriteMu.Lock()
	err = appendFile(filepath.Join(dir, container+".log"), b.String())
	logWriteMu.Unlock()
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return s.ensureLogsObject(ctx, cs, dyn, pod, dir, containers)
}

func appendFile(path, data string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func podContainers(pod *corev1.Pod) []string {
	var names []string
	for _, c := range pod.Spec.InitContainers {
		names = append(names, c.Name)
	}
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	return names
}

// ensureLogsObject names the pod's log files to kwok (a Logs object named
// as the pod, for this pod's UID) and waits until its kubelet serves them.
func (s *Site) ensureLogsObject(ctx context.Context, cs kubernetes.Interface, dyn dynamic.Interface, pod *corev1.Pod, dir string, containers []string) error {
	client := dyn.Resource(kwokLogsResource).Namespace(pod.Namespace)
	const uidAnnotation = "sitebox.sitecon.io/pod-uid"
	existing, err := client.Get(ctx, pod.Name, metav1.GetOptions{})
	switch {
	case err == nil && existing.GetAnnotations()[uidAnnotation] == string(pod.UID):
		return nil
	case err == nil:
		// A pod of the same name before this one.
		if err := client.Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	case !apierrors.IsNotFound(err):
		return err
	}
	var logs []any
	for _, c := range containers {
		file := filepath.Join(dir, c+".log")
		if err := appendFile(file, ""); err != nil {
			return err
		}
		// The previous instance's log: there once the container
		// restarted (RestartContainer).
		logs = append(logs, map[string]any{"containers": []any{c}, "logsFile": file, "previousLogsFile": previousLog(file)})
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1",
		"kind":       "Logs",
		"metadata": map[string]any{
			"name": pod.Name, "namespace": pod.Namespace,
			"annotations": map[string]any{uidAnnotation: string(pod.UID)},
		},
		"spec": map[string]any{"logs": logs},
	}}
	// Another writer of the same pod may have created it just now.
	if _, err := client.Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kwok Logs for pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	// kwok learns of the object through its watch. Until it has, the pod's
	// log reads as the default empty one: wait until a container's file
	// is what the kubelet answers with (it holds at least the line just
	// written).
	var last error
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, c := range containers {
			st, err := os.Stat(filepath.Join(dir, c+".log"))
			if err != nil || st.Size() == 0 {
				continue
			}
			data, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: c, LimitBytes: ptr.To[int64](1)}).DoRaw(ctx)
			if err != nil {
				last = err
				return false, nil
			}
			return len(data) > 0, nil
		}
		return false, errors.New("no container has logged anything")
	})
	if err != nil {
		return fmt.Errorf("the kubelet of pod %s/%s does not serve its log (last: %v): %w", pod.Namespace, pod.Name, last, err)
	}
	return nil
}

// RunAppChatter makes the site's running app pods log, until ctx ends:
// every interval, a line in each container of a container app and on a
// VM's serial console (guest-console-log), so that `sitecon logs` and the
// console's logs view have something to show in the demo.
func (s *Site) RunAppChatter(ctx context.Context, cs kubernetes.Interface, every time.Duration, log *slog.Logger) error {
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(kube.AppNamespace))
	lister := factory.Core().V1().Pods().Lister()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		pods, err := lister.List(labels.Everything())
		if err != nil {
			return err
		}
		for _, p := range pods {
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				continue
			}
			app, _, vm := streams.AppOfPod(p)
			if app == "" {
				continue
			}
			for _, c := range p.Spec.Containers {
				if vm && c.Name != streams.GuestConsoleLogContainer {
					continue
				}
				line := chatterLine(app, vm, n, every)
				if err := s.AppendContainerLog(ctx, p.Namespace, p.Name, c.Name, line); err != nil && ctx.Err() == nil {
					log.Warn("app chatter", "pod", p.Name, "container", c.Name, "err", err)
				}
			}
		}
	}
}

// chatterLine is the n-th line an app logs in the demo: the demo apps
// (DemoApps) each say something of their own.
func chatterLine(app string, vm bool, n int, every time.Duration) string {
	switch {
	case vm:
		return fmt.Sprintf("[%9.3f] %s: watchdog ok, load %.2f", float64(n)*every.Seconds(), app, float64(n%7)/10+0.2)
	case app == "plc-gateway":
		return fmt.Sprintf("modbus poll %d: 16 registers read from 10.1.0.%d in %d ms", n, 10+n%4, 4+n%9)
	case app == "mqtt-broker":
		return fmt.Sprintf("client sensor-%d published %d messages to plant/line1/telemetry", n%5+1, n%13+1)
	}
	return fmt.Sprintf("%s: tick %d, all healthy", app, n)
}

// previousLog is where a container's previous instance's log is kept.
func previousLog(file string) string { return strings.TrimSuffix(file, ".log") + ".previous.log" }

// ContainerRestart says how RestartContainer restarts a container.
type ContainerRestart struct {
	// ReportWhenFollowed holds the pod status's word of the restart until
	// a reader has followed the new instance's log (30 s at most): a
	// kubelet reports a container's start some time after the start, and
	// a reader that opens its stream in between reads the new instance
	// while the API still shows the old one.
	ReportWhenFollowed bool
}

// RestartContainer restarts a container of a pod as its kubelet does
// when the container exits and is started again: the follows of its log
// end (a reader that had not read the last lines finds them in the
// previous log), the log written so far becomes the previous instance's
// (what previous=true reads; the one before is dropped, as a kubelet
// keeps one), the new instance's log starts empty, and the pod's status
// then says so: restartCount one more, lastState the old instance
// terminated, state running since now. The container must have logged
// (AppendContainerLog), and its node's kubelet front must run in this
// process (a test's site).
func (s *Site) RestartContainer(ctx context.Context, namespace, podName, container string, how ContainerRestart) error {
	cs, err := s.coreClient()
	if err != nil {
		return err
	}
	pod, err := cs.CoreV1().Pods(namespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(pod.Status.ContainerStatuses, func(st corev1.ContainerStatus) bool { return st.Name == container }) {
		return fmt.Errorf("pod %s/%s has no status for a container %q", namespace, podName, container)
	}
	front, ok := s.front(pod.Spec.NodeName)
	if !ok {
		return fmt.Errorf("the kubelet front of node %q does not run in this process", pod.Spec.NodeName)
	}
	file := filepath.Join(s.podLogsDir(), namespace+"_"+podName+"_"+string(pod.UID), container+".log")
	if _, err := os.Stat(file); err != nil {
		return fmt.Errorf("container %s of pod %s/%s has not logged yet (AppendContainerLog): %w", container, namespace, podName, err)
	}
	key := followKey(namespace, podName, container)
	// The instance ends: so do the follows of its log.
	front.endFollows(key)
	logWriteMu.Lock()
	err = os.Rename(file, previousLog(file))
	if err == nil {
		err = appendFile(file, "")
	}
	logWriteMu.Unlock()
	if err != nil {
		return fmt.Errorf("restart container %s of pod %s/%s: %w", container, namespace, podName, err)
	}
	// A follow opened before the swap reads the old file still: it ends
	// too. Every follow opened after reads the new instance's.
	followed := front.endFollows(key)
	if how.ReportWhenFollowed {
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return front.followsOpened(key) > followed, nil
		}); err != nil {
			return fmt.Errorf("nobody followed the new instance of container %s of pod %s/%s: %w", container, namespace, podName, err)
		}
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := cs.CoreV1().Pods(namespace).Get(ctx, podName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		i := slices.IndexFunc(pod.Status.ContainerStatuses, func(st corev1.ContainerStatus) bool { return st.Name == container })
		if i < 0 {
			return fmt.Errorf("pod %s/%s lost the status of container %q", namespace, podName, container)
		}
		st := &pod.Status.ContainerStatuses[i]
		now := metav1.Now()
		started := now
		if st.State.Running != nil {
			started = st.State.Running.StartedAt
		}
		st.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", StartedAt: started, FinishedAt: now, ContainerID: st.ContainerID,
		}}
		st.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
		st.RestartCount++
		if st.ContainerID != "" {
			st.ContainerID = "containerd://" + strings.ReplaceAll(string(uuid.NewUUID()), "-", "")
		}
		_, err = cs.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
		return err
	})
}
