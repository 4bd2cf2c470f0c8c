package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/streams"
	"github.com/sitecon/sitecon/test/sitebox"
)

// appPod runs a pod in the apps namespace shaped as an app's (its labels;
// a VM app's as KubeVirt's virt-launcher pod) on node, and waits until it
// runs.
func appPod(t *testing.T, cs kubernetes.Interface, name, app, node string, vm bool, containers ...string) *corev1.Pod {
	t.Helper()
	labels := map[string]string{kube.LabelAppName: app, kube.LabelAppUUID: "0000aaaa-0000-4000-8000-" + strings.Repeat("0", 12-len(app)) + app}
	if vm {
		labels["kubevirt.io"] = "virt-launcher"
		labels[streams.LabelVMIName] = app
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.PodSpec{NodeName: node}}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c, Image: "registry.local/" + c + ":1"})
	}
	ctx := context.Background()
	if _, err := cs.CoreV1().Pods(kube.AppNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(kube.AppNamespace).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	})
	return &waitPods(t, cs, kube.AppNamespace, metav1.ListOptions{FieldSelector: "metadata.name=" + name}, 30*time.Second, name+" running", onlyPodReadyOn(node))[0]
}

// Issue 21 item 1, the CLI: `sitecon logs APP|POD` reads an app's running
// pod's log through the API server, a VM's console log, follows, and
// strips what a terminal would act on.
func TestLogsCommand(t *testing.T) {
	site := sitebox.Shared(t)
	cs := clientset(t, site)
	ctx := context.Background()
	kc := []string{"--kubeconfig", site.Kubeconfig()}
	appPod(t, cs, "logcli-7f9c-x2", "logcli", "node-a", false, "main")
	if err := site.AppendContainerLog(ctx, kube.AppNamespace, "logcli-7f9c-x2", "main",
		"started", "\x1b]0;owned\x07title gone", "\x1b[31mred\x1b[0m plain", "last"); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runSitecon(t, append([]string{"logs", "logcli"}, kc...)...)
	if err != nil {
		t.Fatalf("sitecon logs logcli: %v\n%s%s", err, out, errOut)
	}
	if want := "started\ntitle gone\nred plain\nlast\n"; out != want {
		t.Fatalf("sitecon logs logcli printed %q, want %q (control sequences stripped)", out, want)
	}
	if !strings.Contains(errOut, "app logcli, pod logcli-7f9c-x2, container main") {
		t.Errorf("stderr %q does not say which pod it read", errOut)
	}
	out, _, err = runSitecon(t, append([]string{"logs", "logcli-7f9c-x2", "--tail", "1"}, kc...)...)
	if err != nil || out != "last\n" {
		t.Fatalf("sitecon logs POD --tail 1: %q, %v", out, err)
	}

	// Unknown: a clear error, non-zero exit, nothing on stdout.
	out, errOut, err = runSitecon(t, append([]string{"logs", "no-such-app"}, kc...)...)
	if err == nil || out != "" || !strings.Contains(errOut, `no pod or app named "no-such-app"`) || !strings.Contains(errOut, "logcli") {
		t.Fatalf("unknown app: err %v, stdout %q, stderr %q; want a non-zero exit naming the apps there are", err, out, errOut)
	}
	_, errOut, err = runSitecon(t, append([]string{"logs", "logcli", "--container", "nope"}, kc...)...)
	if err == nil || !strings.Contains(errOut, `no container "nope" (it has main)`) {
		t.Fatalf("unknown container: %v %q", err, errOut)
	}

	// A VM app: its serial console log, said so.
	appPod(t, cs, "virt-launcher-logvm-abcde", "logvm", "node-b", true, "compute", streams.GuestConsoleLogContainer)
	if err := site.AppendContainerLog(ctx, kube.AppNamespace, "virt-launcher-logvm-abcde", streams.GuestConsoleLogContainer, "login:"); err != nil {
		t.Fatal(err)
	}
	if err := site.AppendContainerLog(ctx, kube.AppNamespace, "virt-launcher-logvm-abcde", "compute", "virt-launcher noise"); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = runSitecon(t, append([]string{"logs", "logvm"}, kc...)...)
	if err != nil || out != "login:\n" || !strings.Contains(errOut, "guest-console-log: the VM's serial console log") {
		t.Fatalf("sitecon logs VM: %v, stdout %q, stderr %q; want the console log, said so", err, out, errOut)
	}

	// -f: the lines there, then new ones as they come; Ctrl-C ends it
	// cleanly.
	followCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(followCtx, sitecon, append([]string{"logs", "logcli", "-f", "--tail", "1"}, kc...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(want string) {
		t.Helper()
		select {
		case got := <-lines:
			if got != want {
				t.Fatalf("followed %q, want %q", got, want)
			}
		case <-followCtx.Done():
			t.Fatalf("%q never followed", want)
		}
	}
	next("last")
	for _, l := range []string{"new one", "new two"} {
		if err := site.AppendContainerLog(ctx, kube.AppNamespace, "logcli-7f9c-x2", "main", l); err != nil {
			t.Fatal(err)
		}
		next(l)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sitecon logs -f after Ctrl-C: %v, want a clean exit", err)
	}
}
