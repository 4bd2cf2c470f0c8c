package e2e

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
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
	scratchNamespace(t, cs, ns)
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
	apiServer, err := tls.LoadX509KeyPair(filepath.Join(site.Dir, "pki", "apiserver-kubelet-client.crt"), filepath.Join(site.Dir, "pki", "apiserver-kubelet-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range site.Nodes {
		addr := net.JoinHostPort(n.IP, strconv.Itoa(sitebox.KubeletPort))
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: n.IP, Certificates: []tls.Certificate{apiServer}})
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

// Issue 21 item 1, sitebox: a node's kubelet port asks for a client
// certificate and takes only one the site's CA signed, as a kubelet run
// with --client-ca-file does; the API server's kubelet client certificate
// is such a one (the logs read through the API server above come that
// way). Without a certificate, or with one from another CA, nothing is
// served.
func TestKubeletRequiresTheSiteCAsClientCertificate(t *testing.T) {
	site := sitebox.Shared(t)
	roots, apiServer := kubeletPKI(t, site)
	stranger := otherCAClientCert(t, "kube-apiserver-kubelet-client")
	for _, n := range site.Nodes {
		url := "https://" + net.JoinHostPort(n.IP, strconv.Itoa(sitebox.KubeletPort)) + "/healthz"
		get := func(certs ...tls.Certificate) (int, error) {
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: n.IP, Certificates: certs},
			}}
			defer client.CloseIdleConnections()
			resp, err := client.Get(url)
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}
		if code, err := get(apiServer); err != nil || code != http.StatusOK {
			t.Fatalf("%s's kubelet with the API server's client certificate: %d, %v; want 200", n.Name, code, err)
		}
		if code, err := get(); err == nil {
			t.Errorf("%s's kubelet without a client certificate answered %d; want the handshake refused", n.Name, code)
		}
		if code, err := get(stranger); err == nil {
			t.Errorf("%s's kubelet with a client certificate from another CA answered %d; want the handshake refused", n.Name, code)
		}
	}
}

// A node's kubelet port goes with its node and comes back with it: its
// front is the node's kubelet as much as its kwok is.
func TestKubeletPortGoesAndComesBackWithItsNode(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	roots, apiServer := kubeletPKI(t, site)
	n := site.Nodes[2]
	healthz := func() error {
		client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: n.IP, Certificates: []tls.Certificate{apiServer}},
		}}
		defer client.CloseIdleConnections()
		resp, err := client.Get("https://" + net.JoinHostPort(n.IP, strconv.Itoa(sitebox.KubeletPort)) + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %s", resp.Status)
		}
		return nil
	}
	if err := healthz(); err != nil {
		t.Fatalf("%s's kubelet before the failure: %v", n.Name, err)
	}
	site.RecoverOnCleanup(t, n.Name)
	if err := site.Fail(n.Name); err != nil {
		t.Fatal(err)
	}
	if err := healthz(); err == nil {
		t.Fatalf("%s's kubelet port answers while the node is failed", n.Name)
	}
	if err := site.Recover(n.Name); err != nil {
		t.Fatal(err)
	}
	until(t, 30*time.Second, n.Name+"'s kubelet serving again", func() (string, bool) {
		err := healthz()
		return fmt.Sprint(err), err == nil
	}, func(s string) string { return s })
	site.WaitSettled(t, 90*time.Second)
}

// kubeletPKI is the site's CA, which the kubelets' serving certificates
// chain to, and the API server's kubelet client certificate.
func kubeletPKI(t *testing.T, site *sitebox.TestSite) (*x509.CertPool, tls.Certificate) {
	t.Helper()
	pki := filepath.Join(site.Dir, "pki")
	caPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	apiServer, err := tls.LoadX509KeyPair(filepath.Join(pki, "apiserver-kubelet-client.crt"), filepath.Join(pki, "apiserver-kubelet-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	return roots, apiServer
}

// otherCAClientCert is a client certificate named cn, signed by a CA of
// its own.
func otherCAClientCert(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		Subject:   pkix.Name{CommonName: cn, Organization: []string{"system:masters"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
