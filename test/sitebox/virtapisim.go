package sitebox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	kvv1 "kubevirt.io/api/core/v1"
	kvcorev1 "kubevirt.io/client-go/kubevirt/typed/core/v1"
)

// The virt-api simulator stands in for the part of KubeVirt's virt-api that
// serves subresources.kubevirt.io/v1 behind the API server's aggregation
// layer. It serves one subresource, vnc, as virt-api does with
// virt-handler and QEMU behind it: a websocket (subprotocol
// plain.kubevirt.io) carrying the VM's RFB stream, of which it speaks the
// handshake (protocol version, security type None, ServerInit with the
// VMI's name) and then reads and drops what the viewer sends. It holds one
// connection per VMI, as KubeVirt does: a new one closes the old, unless the
// new one asks preserveSession=true, which is then refused. A VMI that is
// gone or stops running ends its connection.
//
// It answers only the API server: a client must present a certificate the
// front-proxy CA signed with the allowed name, and the user it acts for is
// in X-Remote-User (the API server authorised the request already).
const (
	virtAPICert       = "virt-api"
	virtAPINamespace  = "kubevirt"
	virtAPIService    = "virt-api"
	virtAPIServerName = virtAPIService + "." + virtAPINamespace + ".svc"
	// SubresourcesGroup is KubeVirt's aggregated API group.
	SubresourcesGroup = "subresources.kubevirt.io"
	// SubresourcesAPIService names its APIService.
	SubresourcesAPIService = "v1." + SubresourcesGroup
)

var vmiGVR = kvv1.SchemeGroupVersion.WithResource("virtualmachineinstances")

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

type virtAPISimulator struct {
	dyn dynamic.Interface
	log *slog.Logger

	mu       sync.Mutex
	sessions map[string]*vncSession // by namespace/name
}

type vncSession struct {
	conn net.Conn
	once sync.Once
}

// end closes the session's connection (once).
func (s *vncSession) end() { s.once.Do(func() { _ = s.conn.Close() }) }

// runVirtAPISimulator serves until ctx ends, on a port of 127.0.0.1, and
// registers itself as the server of SubresourcesAPIService.
func runVirtAPISimulator(ctx context.Context, core kubernetes.Interface, dyn dynamic.Interface, pkiDir string, vmiInf cache.SharedIndexInformer, log *slog.Logger) error {
	cert, err := tls.LoadX509KeyPair(filepath.Join(pkiDir, virtAPICert+".crt"), filepath.Join(pkiDir, virtAPICert+".key"))
	if err != nil {
		return err
	}
	proxyCA, err := os.ReadFile(filepath.Join(pkiDir, "front-proxy-ca.crt"))
	if err != nil {
		return err
	}
	clientCAs := x509.NewCertPool()
	if !clientCAs.AppendCertsFromPEM(proxyCA) {
		return errors.New("front-proxy-ca.crt: no certificate")
	}
	servingCA, err := os.ReadFile(filepath.Join(pkiDir, "ca.crt"))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	sim := &virtAPISimulator{dyn: dyn, log: log, sessions: map[string]*vncSession{}}
	_, _ = vmiInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { sim.vmiChanged(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if vmi, ok := obj.(*kvv1.VirtualMachineInstance); ok {
				sim.endSession(vmi.Namespace+"/"+vmi.Name, "the VMI is gone")
			}
		},
	})
	srv := &http.Server{
		Handler: sim.handler(),
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientCAs:    clientCAs,
			// Checked per request (frontProxyUser), so that a client
			// without the front proxy's certificate gets an answer that
			// says so rather than a failed handshake.
			ClientAuth: tls.VerifyClientCertIfGiven,
			MinVersion: tls.VersionTLS12,
		},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	port := ln.Addr().(*net.TCPAddr).Port
	if err := registerVirtAPI(ctx, core, dyn, port, servingCA); err != nil {
		_ = srv.Close()
		return fmt.Errorf("register %s: %w", SubresourcesAPIService, err)
	}
	log.Info("virt-api simulator serving", "addr", ln.Addr().String())
	select {
	case <-ctx.Done():
	case err := <-served:
		return err
	}
	_ = srv.Close()
	sim.mu.Lock()
	for key, s := range sim.sessions {
		s.end()
		delete(sim.sessions, key)
	}
	sim.mu.Unlock()
	return nil
}

// registerVirtAPI points SubresourcesAPIService at port on 127.0.0.1: an
// ExternalName Service (an Endpoints address may not be a loopback one)
// and the APIService naming it, with the CA that signed the serving
// certificate. It is applied on every start: the port changes.
func registerVirtAPI(ctx context.Context, core kubernetes.Interface, dyn dynamic.Interface, port int, servingCA []byte) error {
	svc := corev1apply.Service(virtAPIService, virtAPINamespace).WithSpec(corev1apply.ServiceSpec().
		WithType(corev1.ServiceTypeExternalName).WithExternalName("127.0.0.1").
		WithPorts(corev1apply.ServicePort().WithName("https").WithPort(int32(port))))
	apply := metav1.ApplyOptions{FieldManager: "sitebox", Force: true}
	if _, err := core.CoreV1().Services(virtAPINamespace).Apply(ctx, svc, apply); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": SubresourcesAPIService},
		"spec": map[string]any{
			"group": SubresourcesGroup, "version": "v1",
			"service":              map[string]any{"namespace": virtAPINamespace, "name": virtAPIService, "port": int64(port)},
			"caBundle":             servingCA,
			"groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
		},
	}}
	// caBundle is bytes: base64 in JSON, as the typed client would send it.
	data, err := json.Marshal(apiService.Object)
	if err != nil {
		return err
	}
	if _, err := dyn.Resource(apiServiceGVR).Patch(ctx, SubresourcesAPIService, "application/apply-patch+yaml", data,
		metav1.PatchOptions{FieldManager: "sitebox", Force: ptrTrue()}); err != nil {
		return fmt.Errorf("apiservice: %w", err)
	}
	return nil
}

func ptrTrue() *bool { t := true; return &t }

// WaitVirtAPI waits until the API server finds the virt-api simulator
// available (its APIService's Available condition): until then a vnc
// request is answered 503 by the API server itself.
func WaitVirtAPI(ctx context.Context, dyn dynamic.Interface, within time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		obj, err := dyn.Resource(apiServiceGVR).Get(ctx, SubresourcesAPIService, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Available" {
				last = fmt.Sprintf("Available=%v: %v", m["status"], m["message"])
				return m["status"] == "True", nil
			}
		}
		last = "no Available condition yet"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s not available: %s", SubresourcesAPIService, last)
	}
	return nil
}

func (sim *virtAPISimulator) handler() http.Handler {
	mux := http.NewServeMux()
	groupVersion := SubresourcesGroup + "/v1"
	mux.HandleFunc("GET /apis", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"},
			Groups: []metav1.APIGroup{subresourcesGroup()}})
	})
	mux.HandleFunc("GET /apis/"+SubresourcesGroup, func(w http.ResponseWriter, _ *http.Request) {
		g := subresourcesGroup()
		g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		writeJSON(w, http.StatusOK, &g)
	})
	mux.HandleFunc("GET /apis/"+groupVersion, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
			GroupVersion: groupVersion,
			APIResources: []metav1.APIResource{{Name: "virtualmachineinstances/vnc", Namespaced: true, Kind: "VirtualMachineInstance", Verbs: []string{"get"}}}})
	})
	mux.HandleFunc("GET /apis/"+groupVersion+"/namespaces/{ns}/virtualmachineinstances/{name}/vnc", sim.vnc)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !frontProxyClient(r) {
			writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized,
				"only the API server's front proxy ("+FrontProxyClientName+", signed by the front-proxy CA) may call virt-api")
			return
		}
		if r.Header.Get("X-Remote-User") == "" {
			writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "no X-Remote-User: the front proxy names no user")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// frontProxyClient: the request came over a connection whose client
// certificate the front-proxy CA signed, with the allowed name.
func frontProxyClient(r *http.Request) bool {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return false
	}
	return r.TLS.VerifiedChains[0][0].Subject.CommonName == FrontProxyClientName
}

func subresourcesGroup() metav1.APIGroup {
	v := metav1.GroupVersionForDiscovery{GroupVersion: SubresourcesGroup + "/v1", Version: "v1"}
	return metav1.APIGroup{Name: SubresourcesGroup, Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v}
}

func (sim *virtAPISimulator) vnc(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	key := ns + "/" + name
	// Read live, as virt-api does (its subresource handler GETs the VMI):
	// an informer's copy may not have seen a VMI created a moment ago.
	obj, err := sim.dyn.Resource(vmiGVR).Namespace(ns).Get(r.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("virtualmachineinstance %q not found", key))
		return
	}
	vmi := &kvv1.VirtualMachineInstance{}
	if err == nil {
		err = runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, vmi)
	}
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, fmt.Sprintf("reading virtualmachineinstance %q: %v", key, err))
		return
	}
	if vmi.Status.Phase != kvv1.Running || vmi.DeletionTimestamp != nil {
		writeStatus(w, http.StatusConflict, metav1.StatusReasonConflict,
			fmt.Sprintf("Unable to connect to VirtualMachineInstance because phase is %s instead of Running", vmi.Status.Phase))
		return
	}
	preserve := r.URL.Query().Get("preserveSession") == "true"
	sim.mu.Lock()
	_, busy := sim.sessions[key]
	sim.mu.Unlock()
	if preserve && busy {
		writeStatus(w, http.StatusConflict, metav1.StatusReasonConflict,
			fmt.Sprintf("a VNC connection to %s is already open (one viewer at a time)", key))
		return
	}
	ws, err := kvcorev1.NewUpgrader().Upgrade(w, r, nil)
	if err != nil {
		sim.log.Warn("vnc upgrade", "vmi", key, "err", err)
		return
	}
	done := make(chan struct{})
	session := &vncSession{conn: kvcorev1.NewWebsocketStreamer(ws, done).AsConn()}
	sim.mu.Lock()
	old := sim.sessions[key]
	sim.sessions[key] = session
	sim.mu.Unlock()
	if old != nil {
		// KubeVirt serves one VNC client per VMI: the new one wins.
		old.end()
		sim.log.Info("vnc: a new connection closes the old", "vmi", key)
	}
	sim.log.Info("vnc open", "vmi", key, "user", r.Header.Get("X-Remote-User"))
	err = serveRFB(session.conn, name)
	session.end()
	close(done)
	sim.mu.Lock()
	if sim.sessions[key] == session {
		delete(sim.sessions, key)
	}
	sim.mu.Unlock()
	sim.log.Info("vnc closed", "vmi", key, "err", err)
}

// vmiChanged ends the connection to a VMI that no longer runs.
func (sim *virtAPISimulator) vmiChanged(obj any) {
	vmi, ok := obj.(*kvv1.VirtualMachineInstance)
	if !ok || (vmi.Status.Phase == kvv1.Running && vmi.DeletionTimestamp == nil) {
		return
	}
	sim.endSession(vmi.Namespace+"/"+vmi.Name, "the VMI is "+string(vmi.Status.Phase))
}

func (sim *virtAPISimulator) endSession(key, why string) {
	sim.mu.Lock()
	s := sim.sessions[key]
	delete(sim.sessions, key)
	sim.mu.Unlock()
	if s != nil {
		sim.log.Info("vnc: closing", "vmi", key, "why", why)
		s.end()
	}
}

// RFB (RFC 6143) as QEMU speaks it with no password: version 3.8, security
// type None, then ServerInit naming the desktop.
const rfbVersion = "RFB 003.008\n"

func serveRFB(c net.Conn, desktop string) error {
	if _, err := io.WriteString(c, rfbVersion); err != nil {
		return err
	}
	version := make([]byte, len(rfbVersion))
	if _, err := io.ReadFull(c, version); err != nil {
		return fmt.Errorf("client version: %w", err)
	}
	if !strings.HasPrefix(string(version), "RFB 003.") {
		return fmt.Errorf("client version %q", version)
	}
	const securityNone = 1
	if _, err := c.Write([]byte{1, securityNone}); err != nil {
		return err
	}
	choice := make([]byte, 1)
	if _, err := io.ReadFull(c, choice); err != nil {
		return fmt.Errorf("security type: %w", err)
	}
	if choice[0] != securityNone {
		reason := "security type not offered"
		msg := binary.BigEndian.AppendUint32([]byte{0, 0, 0, 1}, uint32(len(reason)))
		_, _ = c.Write(append(msg, reason...))
		return fmt.Errorf("client chose security type %d", choice[0])
	}
	if _, err := c.Write([]byte{0, 0, 0, 0}); err != nil { // SecurityResult OK
		return err
	}
	if _, err := io.ReadFull(c, choice); err != nil { // ClientInit (shared flag)
		return fmt.Errorf("client init: %w", err)
	}
	init := binary.BigEndian.AppendUint16(nil, 1024)
	init = binary.BigEndian.AppendUint16(init, 768)
	// Pixel format: 32 bits per pixel, depth 24, little-endian true colour,
	// 8 bits per channel at shifts 16, 8, 0, then 3 bytes of padding.
	init = append(init, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0)
	init = binary.BigEndian.AppendUint32(init, uint32(len(desktop)))
	init = append(init, desktop...)
	if _, err := c.Write(init); err != nil {
		return err
	}
	// The viewer's requests and input: read and dropped until it leaves.
	_, err := io.Copy(io.Discard, c)
	return err
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	writeJSON(w, code, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: int32(code), Reason: reason, Message: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
