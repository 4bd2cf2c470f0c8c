package e2e

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	kvv1 "kubevirt.io/api/core/v1"
	kvcorev1 "kubevirt.io/client-go/kubevirt/typed/core/v1"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/vncbridge"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/access"
	"github.com/sitecon/sitecon/kube/streams"
	"github.com/sitecon/sitecon/test/sitebox"
	"github.com/sitecon/sitecon/test/syncbuf"
)

// rfbHandshake speaks a VNC viewer's side of the RFB handshake (RFC 6143:
// version 3.8, security type None, ClientInit shared) and returns the
// desktop name ServerInit carries.
func rfbHandshake(c net.Conn) (string, error) { return rfbHandshakeWith(c, "") }

// rfbHandshakeWith is rfbHandshake answering VNC Authentication with
// password, when one is given (and then only that).
func rfbHandshakeWith(c net.Conn, password string) (string, error) {
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
	if count[0] == 0 {
		return "", fmt.Errorf("refused: %s", rfbReason(c))
	}
	types := make([]byte, count[0])
	if _, err := io.ReadFull(c, types); err != nil {
		return "", err
	}
	want := byte(1)
	if password != "" {
		want = 2
	}
	if !strings.ContainsRune(string(types), rune(want)) {
		return "", fmt.Errorf("security types %v: no %d", types, want)
	}
	if _, err := c.Write([]byte{want}); err != nil {
		return "", err
	}
	if password != "" {
		challenge := make([]byte, 16)
		if _, err := io.ReadFull(c, challenge); err != nil {
			return "", fmt.Errorf("challenge: %w", err)
		}
		response, err := streams.VNCAuthResponse(challenge, password)
		if err != nil {
			return "", err
		}
		if _, err := c.Write(response); err != nil {
			return "", err
		}
	}
	result := make([]byte, 4)
	if _, err := io.ReadFull(c, result); err != nil {
		return "", fmt.Errorf("security result: %w", err)
	}
	if binary.BigEndian.Uint32(result) != 0 {
		return "", fmt.Errorf("security result %v: %s", result, rfbReason(c))
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

func mustDial(t *testing.T, dial func(string) (net.Conn, error), node string) net.Conn {
	t.Helper()
	c, err := dial(node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rfbReason reads RFB's length-prefixed reason.
func rfbReason(c net.Conn) string {
	n := make([]byte, 4)
	if _, err := io.ReadFull(c, n); err != nil {
		return fmt.Sprintf("no reason (%v)", err)
	}
	reason := make([]byte, min(binary.BigEndian.Uint32(n), 4096))
	if _, err := io.ReadFull(c, reason); err != nil {
		return fmt.Sprintf("no reason (%v)", err)
	}
	return string(reason)
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
	t.Cleanup(func() { _ = kv.Delete(context.Background(), name, metav1.DeleteOptions{}) })
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

// vncProcess is a running `sitecon vnc`: the address it serves viewers
// on and its output so far.
type vncProcess struct {
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	addr string
	done chan error
}

func startSiteconVNC(t *testing.T, site *sitebox.TestSite, args ...string) *vncProcess {
	t.Helper()
	p := &vncProcess{out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(sitecon, append([]string{"vnc", "--kubeconfig", site.Kubeconfig()}, args...)...)
	p.cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+t.TempDir())
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	p.addr = until(t, 30*time.Second, "sitecon vnc serving", func() (string, bool) {
		for _, line := range strings.Split(p.out.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, "point a VNC viewer at "); ok {
				return strings.Fields(rest)[0], true
			}
		}
		return "", false
	}, func(string) string { return p.out.String() })
	return p
}

// exited waits for the process to end and returns its error and output.
func (p *vncProcess) exited(t *testing.T, within time.Duration) (string, error) {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		return p.out.String(), err
	case <-time.After(within):
		t.Fatalf("sitecon vnc still running after %s:\n%s", within, p.out.String())
		return "", nil
	}
}

// rfbRefusal reads a server's RFB refusal: its version, then zero security
// types and the reason (RFC 6143 7.1.2).
func rfbRefusal(c net.Conn) (string, error) {
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	version := make([]byte, 12)
	if _, err := io.ReadFull(c, version); err != nil {
		return "", err
	}
	if _, err := c.Write([]byte("RFB 003.008\n")); err != nil {
		return "", err
	}
	head := make([]byte, 5)
	if _, err := io.ReadFull(c, head); err != nil {
		return "", err
	}
	if head[0] != 0 {
		return "", fmt.Errorf("%d security types offered: not refused", head[0])
	}
	reason := make([]byte, binary.BigEndian.Uint32(head[1:]))
	_, err := io.ReadFull(c, reason)
	return string(reason), err
}

// vncVMI creates a VMI as the agent lays out a VM app with VNC (the port
// annotation), and waits until it runs unless it cannot be placed.
func vncVMI(t *testing.T, site *sitebox.TestSite, name string, port int, placeable bool) {
	t.Helper()
	kv := site.Clients(t).KubeVirt.KubevirtV1().VirtualMachineInstances(kube.AppNamespace)
	vmi := &kvv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kvv1.VirtualMachineInstanceSpec{
		Domain: kvv1.DomainSpec{Resources: kvv1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceMemory: resource.MustParse("64Mi")}}}}}
	if port > 0 {
		vmi.Annotations = map[string]string{kube.AnnotationVNCPort: fmt.Sprint(port)}
	}
	if !placeable {
		vmi.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": "no-such-node"}
	}
	if _, err := kv.Create(t.Context(), vmi, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kv.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if placeable {
		until(t, 60*time.Second, "VMI "+name+" Running", func() (string, bool) {
			got, err := kv.Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				return err.Error(), false
			}
			return string(got.Status.Phase), got.Status.Phase == kvv1.Running
		}, func(s string) string { return s })
	}
}

// Issue 21 section 2: `sitecon vnc APP` bridges a local port to the VM's
// console through the API server: a viewer's RFB handshake reads the VMI's
// name; a second viewer is turned away with the reason while the first
// keeps its session; the bridge closes when the VM stops. A container app,
// a VM without VNC, a VM not running: a clear error, exit non-zero.
func TestSiteconVNC(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	if err := sitebox.WaitVirtAPI(t.Context(), dynClient(t, site), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	vncVMI(t, site, "vnc-cli", 5901, true)
	vncVMI(t, site, "vnc-cli-off", 0, true)
	vncVMI(t, site, "vnc-cli-pending", 5902, false)
	cs := clientset(t, site)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vnc-cli-container"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.local/c:1"}}}}
	if _, err := cs.CoreV1().Pods(kube.AppNamespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Pods(kube.AppNamespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
	})

	for app, want := range map[string]string{
		"vnc-cli-container": "vnc-cli-container is a container app: VNC is a VM's console",
		"vnc-cli-off":       "vnc-cli-off has no VNC console (enable_vnc is off in its config)",
		"vnc-cli-pending":   "vnc-cli-pending is not running",
		"no-such-app":       `no app "no-such-app"`,
	} {
		out, errOut, err := runSitecon(t, "vnc", app, "--kubeconfig", site.Kubeconfig())
		if err == nil || !strings.Contains(errOut, want) {
			t.Errorf("sitecon vnc %s: %v\n%s%s\nwant an error saying %q", app, err, out, errOut, want)
		}
	}

	p := startSiteconVNC(t, site, "vnc-cli")
	first, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if name, err := rfbHandshake(first); err != nil || name != "vnc-cli" {
		t.Fatalf("RFB handshake through sitecon vnc: %q, %v\n%s", name, err, p.out.String())
	}
	second, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if reason, err := rfbRefusal(second); err != nil || !strings.Contains(reason, "one viewer at a time") {
		t.Fatalf("a second viewer: reason %q, %v; want turned away, one viewer at a time", reason, err)
	}
	until(t, 10*time.Second, "sitecon vnc tells of the second viewer", func() (string, bool) {
		return p.out.String(), strings.Contains(p.out.String(), "turned away: another viewer is connected")
	}, func(s string) string { return s })
	// The first viewer's session is untouched: still open, and the VM's
	// console still takes its input (a FramebufferUpdateRequest).
	if err := closedWithin(first, 2*time.Second); err == nil {
		t.Fatalf("the first viewer was cut off when the second came:\n%s", p.out.String())
	}
	if _, err := first.Write([]byte{3, 0, 0, 0, 0, 0, 4, 0, 3, 0}); err != nil {
		t.Fatalf("first viewer: %v", err)
	}

	// The VM stops: the bridge closes, the viewer with it, and sitecon says why.
	if err := site.Clients(t).KubeVirt.KubevirtV1().VirtualMachineInstances(kube.AppNamespace).Delete(t.Context(), "vnc-cli", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err := p.exited(t, 30*time.Second)
	if err == nil || !strings.Contains(out, "the console bridge closed") {
		t.Fatalf("sitecon vnc once the VM stopped: %v\n%s", err, out)
	}
	if err := closedWithin(first, 5*time.Second); err != nil {
		t.Fatalf("the viewer once the VM stopped: %v", err)
	}
}

// nodeAddr is a simulated node's own address on this machine.
func nodeAddr(t *testing.T, site *sitebox.TestSite, node string) string {
	t.Helper()
	for _, n := range site.Nodes {
		if n.Name == node {
			return n.IP
		}
	}
	t.Fatalf("no node %s", node)
	return ""
}

// Issue 21 section 2: every node's agent serves the consoles of the VM
// apps with VNC running on its node, at 5900+vnc_display on its address
// (127.0.0.1 on a device; each simulated node's own here): a viewer's RFB
// handshake there reads the VM's name, and no other node serves it. The
// port moves with the VM: after a migration the new node serves it and the
// old one no longer does.
func TestAgentServesVMConsoleWhereTheVMRuns(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	if err := sitebox.WaitVirtAPI(t.Context(), dynClient(t, site), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	cs := clientset(t, site)
	appsDir, logDir, auditLog := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "audit.jsonl")
	const app, display = "vnc-agent-vm", 7
	appConfigs := map[string]apps.AppConfig{
		app: {UUID: "e2e00000-0000-4000-8000-0000000000a7", DisplayName: app, Activate: true, Kind: apps.KindVM,
			Image: "registry.local/vm:1", DesignatedNodeID: sitebox.NodeUUID("node-a"), Affinity: apps.AffinityPreferred,
			Resources: apps.AppResources{Memory: "1Gi"}, EnableVNC: true, VNCDisplay: display},
	}
	for name, a := range appConfigs {
		writeJSON(t, filepath.Join(appsDir, "apps", name+".json"), a)
	}
	agents := map[string]*siteAgent{}
	var all []*siteAgent
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		agents[n] = startSiteAgent(t, site, n, appsDir, logDir)
		all = append(all, agents[n])
	}
	t.Cleanup(func() { cleanupApps(t, cs, dynClient(t, site), agents, appsDir, appConfigs) })
	waitAgents(t, all, app, 60*time.Second, "running on node-a", runningOn("node-a"))

	port := fmt.Sprint(5900 + display)
	dial := func(node string) (net.Conn, error) {
		return net.DialTimeout("tcp", net.JoinHostPort(nodeAddr(t, site, node), port), 5*time.Second)
	}
	// A one-time password from the node's agent, through its socket, as
	// the device's remote-console service asks for one.
	password := func(node string) (string, error) {
		out, errOut, err := runSitecon(t, "agent", "vnc-password", port, "--json", "--socket", agents[node].socket)
		if err != nil {
			return "", fmt.Errorf("%v: %s", err, errOut)
		}
		var s vncbridge.Session
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			return "", fmt.Errorf("%q: %v", out, err)
		}
		if s.Address != net.JoinHostPort(nodeAddr(t, site, node), port) {
			return "", fmt.Errorf("session at %s, want port %s on %s", s.Address, port, node)
		}
		return s.Password, nil
	}
	console := func(node string) (string, error) {
		c, err := dial(node)
		if err != nil {
			return "", err
		}
		defer c.Close()
		pw, err := password(node)
		if err != nil {
			return "", err
		}
		return rfbHandshakeWith(c, pw)
	}
	vmiOn := func(node string) string {
		vmis, err := site.Clients(t).KubeVirt.KubevirtV1().VirtualMachineInstances(kube.AppNamespace).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vmis.Items {
			if v.Status.NodeName == node && v.Status.Phase == kvv1.Running && v.DeletionTimestamp == nil && v.Labels[kube.LabelAppUUID] == appConfigs[app].UUID {
				return v.Name
			}
		}
		return ""
	}
	servedOnlyOn := func(node string) {
		t.Helper()
		until(t, 60*time.Second, "the console served on "+node+" alone", func() (string, bool) {
			vmi := vmiOn(node)
			if vmi == "" {
				return "no running VMI on " + node, false
			}
			name, err := console(node)
			if err != nil || name != vmi {
				return fmt.Sprintf("%s: %q, %v (want %q)", node, name, err, vmi), false
			}
			for _, other := range []string{"node-a", "node-b", "node-c"} {
				if other == node {
					continue
				}
				if _, err := console(other); err == nil || !strings.Contains(err.Error(), "connection refused") {
					return fmt.Sprintf("%s still serves it: %v", other, err), false
				}
			}
			return "", true
		}, func(s string) string { return s })
	}
	// Issue 37: reaching the port is not enough. A viewer without a
	// password, or with a wrong or spent one, is turned away in RFB's words
	// and sees nothing; one that connects and stalls holds no slot.
	_ = until(t, 60*time.Second, "node-a serving the console's port", func() (error, bool) {
		c, err := dial("node-a")
		if err == nil {
			_ = c.Close()
		}
		return err, err == nil
	}, func(err error) string { return fmt.Sprint(err) })
	if name, err := rfbHandshake(mustDial(t, dial, "node-a")); err == nil || !strings.Contains(err.Error(), "no 1") {
		t.Fatalf("a viewer asking for no authentication: %q, %v; want only VNC Authentication offered", name, err)
	}
	servedOnlyOn("node-a")

	if name, err := rfbHandshakeWith(mustDial(t, dial, "node-a"), "wrong-pw"); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("a viewer with a wrong password: %q, %v; want authentication failed", name, err)
	}
	staller := mustDial(t, dial, "node-a") // never answers the handshake
	defer staller.Close()
	pw, err := password("node-a")
	if err != nil {
		t.Fatal(err)
	}
	if name, err := rfbHandshakeWith(mustDial(t, dial, "node-a"), pw); err != nil || name == "" {
		t.Errorf("a viewer with a password beside one that stalls: %q, %v", name, err)
	}
	if name, err := rfbHandshakeWith(mustDial(t, dial, "node-a"), pw); err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Errorf("a password used a second time: %q, %v; want authentication failed", name, err)
	}
	if out, errOut, err := runSitecon(t, "agent", "vnc-password", "no-such-console", "--socket", agents["node-a"].socket); err == nil ||
		!strings.Contains(errOut, port) {
		t.Errorf("a password for a console the node does not serve: %v %s%s; want refused, naming what it serves", err, out, errOut)
	}

	if out, err := act(t, site, auditLog, "migrate", app, "node-b", "--yes", "--timeout", "90s"); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	waitAgents(t, all, app, 60*time.Second, "running on node-b", runningOn("node-b"))
	servedOnlyOn("node-b")
}

// A node's agent opens the consoles of the VMs on its node with its
// node's own identity, and no other node's: the stats leader grants each
// node its own VMIs' consoles by name (access.ConsoleGrants), and takes
// the grant back when the VM goes.
func TestWorkerIdentityOpensVMConsole(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	if err := sitebox.WaitVirtAPI(t.Context(), dynClient(t, site), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	admin := clientset(t, site)
	grantAgentAccessAfresh(t, admin)
	clearStatsLeaderLease(t, admin)
	logDir := t.TempDir()
	leader := startAgentWith(t, site, "node-a", t.TempDir(), logDir, func(o *agent.Options) {
		o.LeaderDurations = apps.LeaderDurations{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	})
	t.Cleanup(leader.stop)
	vncVMI(t, site, "vnc-worker", 5908, true)
	vmi, err := site.Clients(t).KubeVirt.KubevirtV1().VirtualMachineInstances(kube.AppNamespace).Get(t.Context(), "vnc-worker", metav1.GetOptions{})
	if err != nil || vmi.Status.NodeName == "" {
		t.Fatalf("VMI vnc-worker's node: %v %v", vmi.Status.NodeName, err)
	}
	here := vmi.Status.NodeName
	other := "node-a"
	if here == other {
		other = "node-b"
	}
	open := func(node string) (string, error) {
		c, err := vncThroughAPIServer(workerIdentity(t, site, node), "vnc-worker", true)
		if err != nil {
			return "", err
		}
		defer c.Close()
		return rfbHandshake(c)
	}
	until(t, 20*time.Second, here+"'s identity opens the console of the VM it runs", func() (string, bool) {
		name, err := open(here)
		return fmt.Sprintf("%q, %v", name, err), err == nil && name == "vnc-worker"
	}, func(s string) string { return s })
	if _, err := open(other); err == nil || !strings.Contains(err.Error(), "forbidden") && !strings.Contains(err.Error(), "403") {
		t.Errorf("%s's identity opened the console of a VM on %s (err %v), want Forbidden", other, here, err)
	}
	// The VM goes: so does the grant (a Role naming no VMI would grant all).
	if err := site.Clients(t).KubeVirt.KubevirtV1().VirtualMachineInstances(kube.AppNamespace).Delete(t.Context(), "vnc-worker", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = until(t, 20*time.Second, here+"'s console grant taken back with its last VM", func() (error, bool) {
		_, err := admin.RbacV1().Roles(kube.AppNamespace).Get(t.Context(), access.ConsoleRoleName(here), metav1.GetOptions{})
		return err, apierrors.IsNotFound(err)
	}, func(err error) string { return fmt.Sprintf("the Role: %v", err) })
}

// v on the apps screen: the console bridges the selected VM's console to
// a local port and says where; a viewer's RFB handshake there reads the
// VM's name, a second viewer is told on screen it was turned away; esc
// closes the bridge and the port with it. The VNC column shows the port of
// the running VM and "off" for the one that does not run.
func TestConsoleVNC(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	if err := sitebox.WaitVirtAPI(t.Context(), dynClient(t, site), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	vncVMI(t, site, "vnc-cons", 5909, true)
	vncVMI(t, site, "vnc-cons-off", 5910, false)
	// Without colour the selected row is marked "> ".
	c := startConsoleNoColor(t, "--kubeconfig", site.Kubeconfig(), "--log-file", t.TempDir()+"/console.log")
	c.waitScreen(10*time.Second, "overview", func(s string) bool { return strings.Contains(s, "3/3 ready") })
	c.keys("5")
	// The two rows alone, vnc-cons first (by name) and selected.
	c.keys("/", "vnc-cons", "Enter")
	c.waitScreen(10*time.Second, "filtered", func(s string) bool { return strings.Contains(s, "filter /vnc-cons") })
	// The VNC column, or at 80 columns when it gives way, the selected
	// row's line under the table.
	vncShows := func(s, app, want string) bool {
		selected := false
		for _, l := range strings.Split(s, "\n") {
			selected = selected || strings.HasPrefix(strings.TrimSpace(l), "> "+app+" ")
		}
		return selected && (strings.Contains(lineWith(s, app+" "), " "+want) || strings.Contains(s, "VNC "+want))
	}
	c.waitScreen(10*time.Second, "vnc-cons's port", func(s string) bool { return vncShows(s, "vnc-cons", "5909") })
	c.keys("Down")
	c.waitScreen(10*time.Second, "vnc-cons-off off", func(s string) bool { return vncShows(s, "vnc-cons-off", "off") })
	c.keys("Up")
	c.waitScreen(5*time.Second, "vnc-cons selected", func(s string) bool { return vncShows(s, "vnc-cons", "5909") })
	c.keys("v")
	s := c.waitScreen(15*time.Second, "the bridge's address", func(s string) bool {
		return strings.Contains(s, "VNC console of vnc-cons") && strings.Contains(s, "point a VNC viewer at 127.0.0.1:")
	})
	var addr string
	for _, line := range strings.Split(s, "\n") {
		if _, rest, ok := strings.Cut(line, "point a VNC viewer at "); ok {
			addr = strings.Fields(rest)[0]
		}
	}
	viewer, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer viewer.Close()
	if name, err := rfbHandshake(viewer); err != nil || name != "vnc-cons" {
		t.Fatalf("RFB handshake through the console's bridge: %q, %v", name, err)
	}
	second, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if reason, err := rfbRefusal(second); err != nil || !strings.Contains(reason, "one viewer at a time") {
		t.Fatalf("a second viewer: %q, %v", reason, err)
	}
	c.waitScreen(10*time.Second, "the second viewer told", func(s string) bool { return strings.Contains(s, "turned away") })
	// The dialog takes keys once it has been on screen a moment, and says
	// so by showing them.
	c.waitScreen(5*time.Second, "the dialog takes keys", func(s string) bool { return strings.Contains(s, "running... esc cancels") })
	c.keys("Escape")
	c.waitScreen(10*time.Second, "closed", func(s string) bool { return strings.Contains(s, "closed: VNC console of vnc-cons") })
	if err := closedWithin(viewer, 5*time.Second); err != nil {
		t.Fatalf("the viewer once the console's bridge closed: %v", err)
	}
	_ = until(t, 5*time.Second, "the port closed", func() (error, bool) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err, err != nil
	}, func(err error) string { return fmt.Sprint(err) })
}

// Issue 37: a server's agent opens its node's VM consoles with the node's
// own identity, never with the admin credential it holds for the rest
// of its work: given the admin's, it serves no console and says why when
// asked for one.
func TestAgentOpensConsolesWithItsNodesIdentityOnly(t *testing.T) {
	site := sitebox.Shared(t)
	site.WaitSettled(t, 90*time.Second)
	a := startAgentWith(t, site, "node-a", t.TempDir(), t.TempDir(), func(o *agent.Options) {
		o.NodeKubeconfig = site.Kubeconfig()
	})
	t.Cleanup(a.stop)
	until(t, 60*time.Second, "the agent refusing consoles for want of its node's identity", func() (string, bool) {
		_, errOut, err := runSitecon(t, "agent", "vnc-password", "5901", "--socket", a.socket)
		return errOut, err != nil && strings.Contains(errOut, "not node node-a's own identity")
	}, func(s string) string { return s })
}
