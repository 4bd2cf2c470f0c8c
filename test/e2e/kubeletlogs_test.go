package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/test/sitebox"
)

// logPod creates a pod with the given containers on node in a namespace of
// its own and waits until kwok runs it.
func logPod(t *testing.T, cs kubernetes.Interface, ns, name, node string, containers ...string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	for _, c := range containers {
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: c, Image: "registry.local/" + c + ":1"})
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &waitPods(t, cs, ns, metav1.ListOptions{}, 30*time.Second, "the pod running", onlyPodReadyOn(node))[0]
}

// The API server reads a container's log from the pod's kubelet (kwok) at
// the node's address, over TLS it checks against the site's CA: lines a
// test writes come back through client-go's GetLogs with the options a
// logs reader uses.
func TestKubeletServesContainerLogsThroughAPIServer(t *testing.T) {
	site := sitebox.Shared(t)
	cs := clientset(t, site)
	ctx := context.Background()
	const ns = "kubelet-logs"
	node := site.Nodes[1]
	logPod(t, cs, ns, "talker", node.Name, "main", "sidecar")

	read := func(opts *corev1.PodLogOptions) []string {
		t.Helper()
		data, err := cs.CoreV1().Pods(ns).GetLogs("talker", opts).DoRaw(ctx)
		if err != nil {
			t.Fatalf("GetLogs %+v: %v", opts, err)
		}
		return strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	}
	// Nothing written yet: the log is empty, not an error.
	if data, err := cs.CoreV1().Pods(ns).GetLogs("talker", &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx); err != nil || len(data) != 0 {
		t.Fatalf("a container that logged nothing: %q, %v; want an empty log", data, err)
	}

	if err := site.AppendContainerLog(ctx, ns, "talker", "main", "one", "two", "three"); err != nil {
		t.Fatal(err)
	}
	if err := site.AppendContainerLog(ctx, ns, "talker", "sidecar", "side-one"); err != nil {
		t.Fatal(err)
	}
	if got := read(&corev1.PodLogOptions{Container: "main"}); strings.Join(got, ",") != "one,two,three" {
		t.Fatalf("main's log: %q", got)
	}
	if got := read(&corev1.PodLogOptions{Container: "sidecar"}); strings.Join(got, ",") != "side-one" {
		t.Fatalf("sidecar's log: %q", got)
	}
	if got := read(&corev1.PodLogOptions{Container: "main", TailLines: ptr.To[int64](2)}); strings.Join(got, ",") != "two,three" {
		t.Fatalf("main's last two lines: %q", got)
	}
	// Timestamps, and since: a line stamped a minute ago is left out.
	old := time.Now().Add(-time.Minute)
	if err := site.AppendContainerLogAt(ctx, ns, "talker", "sidecar", old, "stale"); err != nil {
		t.Fatal(err)
	}
	if got := read(&corev1.PodLogOptions{Container: "sidecar", SinceSeconds: ptr.To[int64](30)}); strings.Join(got, ",") != "side-one" {
		t.Fatalf("sidecar since 30s: %q (the line stamped a minute ago must be left out)", got)
	}
	stamped := read(&corev1.PodLogOptions{Container: "main", Timestamps: true})
	for _, l := range stamped {
		ts, _, ok := strings.Cut(l, " ")
		if _, err := time.Parse(time.RFC3339Nano, ts); !ok || err != nil {
			t.Fatalf("line %q: no timestamp (%v)", l, err)
		}
	}

	// Follow: the last line there, then lines written after the stream
	// opened. (The stream's headers come with its first line: with
	// nothing to send, opening it would wait.)
	followCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := cs.CoreV1().Pods(ns).GetLogs("talker", &corev1.PodLogOptions{Container: "main", Follow: true, TailLines: ptr.To[int64](1)}).Stream(followCtx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stream)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	if got := <-lines; got != "three" {
		t.Fatalf("followed from the last line: %q, want three", got)
	}
	for i := range 3 {
		want := "live-" + strconv.Itoa(i)
		if err := site.AppendContainerLog(ctx, ns, "talker", "main", want); err != nil {
			t.Fatal(err)
		}
		select {
		case got, ok := <-lines:
			if !ok || got != want {
				t.Fatalf("followed line %d: %q (open %v), want %q", i, got, ok, want)
			}
		case <-followCtx.Done():
			t.Fatalf("followed line %q never arrived", want)
		}
	}
}

// The kubelet port of each node is TLS with the node's own serving
// certificate, for its address, from the site's CA: what the API server's
// --kubelet-certificate-authority checks.
func TestKubeletServesTLSForItsNodeAddress(t *testing.T) {
	site := sitebox.Shared(t)
	caPEM, err := os.ReadFile(filepath.Join(site.Dir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for _, n := range site.Nodes {
		addr := net.JoinHostPort(n.IP, strconv.Itoa(sitebox.KubeletPort))
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: n.IP})
		if err != nil {
			t.Fatalf("kubelet of %s at %s: %v", n.Name, addr, err)
		}
		cn := conn.ConnectionState().PeerCertificates[0].Subject.CommonName
		conn.Close()
		if cn != n.Name {
			t.Errorf("kubelet at %s presents %q, want %s's own certificate", addr, cn, n.Name)
		}
	}
}
