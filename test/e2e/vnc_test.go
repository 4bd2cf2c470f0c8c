package e2e

import (
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	kvv1 "kubevirt.io/api/core/v1"
	kvcorev1 "kubevirt.io/client-go/kubevirt/typed/core/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// rfbHandshake speaks a VNC viewer's side of the RFB handshake (RFC 6143:
// version 3.8, security type None, ClientInit shared) and returns the
// desktop name ServerInit carries.
func rfbHandshake(c net.Conn) (string, error) {
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	defer func() { _ = c.SetDeadline(time.Time{}) }()
	version := make([]byte, 12)
	if _, err := io.ReadFull(c, version); err != nil {
		return "", fmt.Errorf("server version: %w", err)
	}
	if !strings.HasPrefix(string(version), "RFB 003.") {
		return "", fmt.Errorf("server version %q: not RFB", version)
	}
	if _, err := c.Write([]byte("RFB 003.008\n")); err != nil {
		return "", err
	}
	count := make([]byte, 1)
	if _, err := io.ReadFull(c, count); err != nil {
		return "", fmt.Errorf("security types: %w", err)
	}
	types := make([]byte, count[0])
	if _, err := io.ReadFull(c, types); err != nil {
		return "", err
	}
	if !strings.ContainsRune(string(types), 1) {
		return "", fmt.Errorf("security types %v: no None", types)
	}
	if _, err := c.Write([]byte{1}); err != nil {
		return "", err
	}
	result := make([]byte, 4)
	if _, err := io.ReadFull(c, result); err != nil {
		return "", fmt.Errorf("security result: %w", err)
	}
	if binary.BigEndian.Uint32(result) != 0 {
		return "", fmt.Errorf("security result %v", result)
	}
	if _, err := c.Write([]byte{1}); err != nil { // ClientInit: shared
		return "", err
	}
	init := make([]byte, 24)
	if _, err := io.ReadFull(c, init); err != nil {
		return "", fmt.Errorf("server init: %w", err)
	}
	name := make([]byte, binary.BigEndian.Uint32(init[20:]))
	if _, err := io.ReadFull(c, name); err != nil {
		return "", fmt.Errorf("server init name: %w", err)
	}
	return string(name), nil
}

// closedWithin: the connection ends (EOF or reset) within d.
func closedWithin(c net.Conn, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 512)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return fmt.Errorf("still open after %s", d)
		}
		return nil
	}
}

// runningVMI creates a VMI in the app namespace and waits until it runs.
func runningVMI(t *testing.T, site *sitebox.TestSite, name string, nodeSelector map[string]string, wantRunning bool) *kvv1.VirtualMachineInstance {
	t.Helper()
	kv := site.Clients(t).KubeVirt.KubevirtV1().VirtualMachineInstances(kube.AppNamespace)
	vmi := &kvv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.VirtualMachineInstanceSpec{
		NodeSelector: nodeSelector,
		Domain: kvv1.DomainSpec{Resources: kvv1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("64Mi")}}}}}
	if _, err := kv.Create(t.Context(), vmi, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kv.Delete(t.Context(), name, metav1.DeleteOptions{}) })
	if !wantRunning {
		return vmi
	}
	return until(t, 60*time.Second, "VMI "+name+" Running", func() (*kvv1.VirtualMachineInstance, bool) {
		got, err := kv.Get(t.Context(), name, metav1.GetOptions{})
		return got, err == nil && got.Status.Phase == kvv1.Running
	}, func(v *kvv1.VirtualMachineInstance) string {
		if v == nil {
			return "not found"
		}
		return string(v.Status.Phase)
	})
}

// vncThroughAPIServer opens the VMI's vnc subresource through the site's
// API server, as kubevirt.io/client-go's VNC() does.
func vncThroughAPIServer(cfg *rest.Config, name string, preserveSession bool) (net.Conn, error) {
	s, err := kvcorev1.AsyncSubresourceHelper(cfg, "virtualmachineinstances", kube.AppNamespace, name, "vnc",
		url.Values{"preserveSession": {fmt.Sprint(preserveSession)}})
	if err != nil {
		return nil, err
	}
	return s.AsConn(), nil
}

// Issue 21 section 2: sitebox serves KubeVirt's vnc subresource through
// the API server's aggregation layer: an RFB handshake reads the VMI's
// name; one connection per VMI (a new one closes the old, or is refused
// when it asks to preserve the session); a missing VMI is 404, one not
// running 409; the simulator answers no one but the API server's front
// proxy; a VMI that goes away ends its connection.
func TestVirtAPISimulatorServesVNC(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	dyn := dynClient(t, site)
	if err := sitebox.WaitVirtAPI(t.Context(), dyn, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	vmi := runningVMI(t, site, "vnc-sim", nil, true)

	first, err := vncThroughAPIServer(site.Config, vmi.Name, false)
	if err != nil {
		t.Fatalf("vnc through the API server: %v", err)
	}
	defer first.Close()
	if name, err := rfbHandshake(first); err != nil || name != vmi.Name {
		t.Fatalf("RFB handshake: name %q, %v; want %q", name, err, vmi.Name)
	}
	if _, err := vncThroughAPIServer(site.Config, vmi.Name, true); err == nil || !strings.Contains(err.Error(), "already open") {
		t.Fatalf("a second connection asking to preserve the session: %v, want it refused", err)
	}
	second, err := vncThroughAPIServer(site.Config, vmi.Name, false)
	if err != nil {
		t.Fatalf("second connection: %v", err)
	}
	defer second.Close()
	if err := closedWithin(first, 10*time.Second); err != nil {
		t.Fatalf("the first connection once a second one opened: %v (KubeVirt closes it)", err)
	}
	if name, err := rfbHandshake(second); err != nil || name != vmi.Name {
		t.Fatalf("RFB handshake on the second connection: %q, %v", name, err)
	}

	if _, err := vncThroughAPIServer(site.Config, "no-such-vmi", false); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("a VMI that does not exist: %v, want not found", err)
	}
	runningVMI(t, site, "vnc-sim-pending", map[string]string{"kubernetes.io/hostname": "no-such-node"}, false)
	if _, err := vncThroughAPIServer(site.Config, "vnc-sim-pending", false); err == nil || !strings.Contains(err.Error(), "instead of Running") {
		t.Fatalf("a VMI that is not running: %v, want refused", err)
	}

	// Straight to the simulator with the cluster's admin certificate, not
	// the front proxy's: refused.
	svc, err := dyn.Resource(schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}).
		Get(t.Context(), sitebox.SubresourcesAPIService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	port, _, _ := unstructured.NestedInt64(svc.Object, "spec", "service", "port")
	tlsCfg, err := rest.TLSConfigFor(site.Config)
	if err != nil {
		t.Fatal(err)
	}
	discoveryURL := fmt.Sprintf("https://127.0.0.1:%d/apis/subresources.kubevirt.io/v1", port)
	call := func(cfg *tls.Config) (string, error) {
		cfg.InsecureSkipVerify = true // who calls is the point, not the server's name
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := c.Get(discoveryURL)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.Status + " " + string(body), nil
	}
	if got, err := call(tlsCfg.Clone()); err == nil || !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Fatalf("the simulator called with the admin certificate (not the front proxy's CA): %q, %v; want the handshake refused", got, err)
	}
	if got, err := call(&tls.Config{}); err != nil || !strings.HasPrefix(got, "401") {
		t.Fatalf("the simulator called with no certificate: %q, %v; want 401", got, err)
	}

	// The VMI goes: its connection ends.
	if err := site.Clients(t).KubeVirt.KubevirtV1().VirtualMachineInstances(kube.AppNamespace).Delete(t.Context(), vmi.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := closedWithin(second, 30*time.Second); err != nil {
		t.Fatalf("the connection of a deleted VMI: %v", err)
	}
}
