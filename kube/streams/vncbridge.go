package streams

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	kvv1 "kubevirt.io/api/core/v1"
	kvclientset "kubevirt.io/client-go/kubevirt"
	kvcorev1 "kubevirt.io/client-go/kubevirt/typed/core/v1"

	"github.com/sitecon/sitecon/kube"
)

// A VNC bridge serves a local TCP port bridged to a VM's console through
// the API server: KubeVirt's vnc subresource
// (/apis/subresources.kubevirt.io/v1/namespaces/NS/virtualmachineinstances/NAME/vnc),
// a websocket with subprotocol plain.kubevirt.io carrying the RFB stream,
// opened as kubevirt.io/client-go's VNC() opens it. The console, `sitecon
// vnc` and the agent (for the device's remote-console service) each run one.
//
// One viewer at a time: KubeVirt serves one connection per VMI and a new
// one closes the old, so a second viewer on the same bridge would cut the
// first one off. The bridge turns the second one away instead, with the
// reason in RFB's own failure message (a viewer shows it), and asks KubeVirt
// to keep a session another bridge holds (preserveSession): whoever comes
// second is refused with the reason, nobody is cut off.

// VNCTargetFor is the VM app ref names, if it has a VNC console that runs
// now; the error says why not (no such app, not a VM, no VNC, not running).
func VNCTargetFor(apps []kube.AppStatus, ref string) (kube.AppStatus, error) {
	a, ok := kube.FindApp(apps, ref)
	switch {
	case !ok:
		return kube.AppStatus{}, fmt.Errorf("no app %q (apps: %s)", ref, kube.AppNames(apps))
	case a.Kind != kube.AppKindVM:
		return kube.AppStatus{}, fmt.Errorf("%s is a %s app: VNC is a VM's console", a.Name, a.Kind)
	case a.VNCPort == 0:
		return kube.AppStatus{}, fmt.Errorf("%s has no VNC console (enable_vnc is off in its config)", a.Name)
	case !a.Ready:
		return kube.AppStatus{}, fmt.Errorf("%s is not running (%s): no console to show", a.Name, kube.AppWhere(a))
	}
	return a, nil
}

// VNCEvent is something a bridge's owner may tell (the CLI prints it, the
// console shows it, the agent logs it).
type VNCEvent struct {
	Kind VNCEventKind
	// Viewer is the viewer's address.
	Viewer string
	// Err: why a viewer was turned away or its session ended.
	Err error
}

// VNCEventKind says what happened.
type VNCEventKind int

const (
	// VNCViewerConnected: a viewer is bridged to the VM.
	VNCViewerConnected VNCEventKind = iota
	// VNCViewerLeft: the viewer's session ended (Err: why, if not the
	// viewer's own leaving).
	VNCViewerLeft
	// VNCViewerTurnedAway: a viewer was refused: another is connected, or
	// KubeVirt refused the connection (Err).
	VNCViewerTurnedAway
)

// String is the event as one line.
func (e VNCEvent) String() string {
	switch e.Kind {
	case VNCViewerConnected:
		return "viewer " + e.Viewer + " connected"
	case VNCViewerLeft:
		if e.Err != nil {
			return "viewer " + e.Viewer + " disconnected: " + e.Err.Error()
		}
		return "viewer " + e.Viewer + " disconnected"
	default:
		return "viewer " + e.Viewer + " turned away: " + e.Err.Error()
	}
}

// ErrVNCBusy turns a second viewer away.
var ErrVNCBusy = errors.New("another viewer is connected to this VM's console (one viewer at a time)")

// VNCBridge bridges the viewers of one listener to one VMI's console.
type VNCBridge struct {
	// Config reaches the API server.
	Config    *rest.Config
	Namespace string
	VMI       string
	// Events, if set, is told what happens (from the bridge's goroutines).
	Events func(VNCEvent)
	// DialTimeout bounds the opening of KubeVirt's websocket (0: 15s).
	DialTimeout time.Duration
	// Passwords, if set, are what a viewer must answer with (RFB's VNC
	// Authentication), checked before the viewer takes the one viewer
	// slot or the bridge asks KubeVirt for anything; nil: no
	// authentication (a bridge only its own user's processes reach).
	Passwords *VNCPasswords

	mu     sync.Mutex
	viewer net.Conn
}

// Serve accepts viewers on ln until ctx ends or ln fails; it closes ln and
// the viewer's session on return.
func (b *VNCBridge) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer func() {
		_ = ln.Close()
		b.mu.Lock()
		if b.viewer != nil {
			_ = b.viewer.Close()
		}
		b.mu.Unlock()
	}()
	pending := make(chan struct{}, maxPendingViewers)
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if b.Passwords != nil {
			select {
			case pending <- struct{}{}:
			default:
				// Too many handshakes at once: nobody's session is
				// at stake in closing this one.
				b.tell(VNCEvent{Kind: VNCViewerTurnedAway, Viewer: c.RemoteAddr().String(), Err: errTooManyPending})
				_ = c.Close()
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-pending }()
				b.authenticated(ctx, c)
			}()
			continue
		}
		if !b.claimViewer(c) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.turnAway(c, ErrVNCBusy)
			}()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer b.releaseViewer()
			b.bridge(ctx, c)
		}()
	}
}

// claimViewer takes the bridge's one viewer slot for viewer; false: another
// viewer holds it.
func (b *VNCBridge) claimViewer(viewer net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.viewer != nil {
		return false
	}
	b.viewer = viewer
	return true
}

// releaseViewer frees the viewer slot.
func (b *VNCBridge) releaseViewer() {
	b.mu.Lock()
	b.viewer = nil
	b.mu.Unlock()
}

func (b *VNCBridge) tell(e VNCEvent) {
	if b.Events != nil {
		b.Events(e)
	}
}

// viewerHandshakeTimeout bounds a viewer's handshake with an
// authenticating bridge, a person typing the password at a prompt
// included: one that stalls holds no slot, but a socket, so at most
// maxPendingViewers wait at once and the rest are closed at once.
const (
	viewerHandshakeTimeout = time.Minute
	maxPendingViewers      = 16
)

// upstreamHandshakeTimeout bounds the VM console's handshake, once
// KubeVirt's websocket is open.
const upstreamHandshakeTimeout = 15 * time.Second

// authenticated serves one viewer of a bridge with passwords: the viewer's
// handshake and its password first, then the viewer slot, then KubeVirt's
// console and its handshake (choosing none), and only then the security
// result, so that whatever refuses the viewer is said in RFB's own words.
// A password refused for a reason that is not the viewer's (the slot
// busy, KubeVirt failing) is not spent.
func (b *VNCBridge) authenticated(ctx context.Context, viewer net.Conn) {
	defer viewer.Close()
	stop := context.AfterFunc(ctx, func() { _ = viewer.Close() })
	defer stop()
	who := viewer.RemoteAddr().String()
	_ = viewer.SetDeadline(time.Now().Add(viewerHandshakeTimeout))
	minor, spent, err := viewerHandshake(viewer, b.Passwords)
	if err != nil {
		b.tell(VNCEvent{Kind: VNCViewerTurnedAway, Viewer: who, Err: err})
		return
	}
	if spent == nil {
		_ = sendSecurityResult(viewer, minor, errVNCAuthFailed)
		b.tell(VNCEvent{Kind: VNCViewerTurnedAway, Viewer: who, Err: errVNCAuthFailed})
		return
	}
	refuse := func(why error) {
		b.Passwords.giveBack(*spent)
		_ = sendSecurityResult(viewer, minor, why)
		b.tell(VNCEvent{Kind: VNCViewerTurnedAway, Viewer: who, Err: why})
	}
	if !b.claimViewer(viewer) {
		refuse(ErrVNCBusy)
		return
	}
	defer b.releaseViewer()
	// The viewer waits while KubeVirt is asked: a deadline of its own.
	_ = viewer.SetDeadline(time.Now().Add(b.dialTimeout() + upstreamHandshakeTimeout + 5*time.Second))
	upstream, err := b.dial(ctx)
	if err == nil {
		closeOnStop := context.AfterFunc(ctx, func() { _ = upstream.Close() })
		_ = upstream.SetDeadline(time.Now().Add(upstreamHandshakeTimeout))
		err = upstreamHandshake(upstream)
		closeOnStop()
		if err != nil {
			_ = upstream.Close()
		}
	}
	if err != nil {
		refuse(err)
		return
	}
	if err := sendSecurityResult(viewer, minor, nil); err != nil {
		_ = upstream.Close()
		b.tell(VNCEvent{Kind: VNCViewerLeft, Viewer: who, Err: fmt.Errorf("the viewer left during its handshake: %w", err)})
		return
	}
	_ = viewer.SetDeadline(time.Time{})
	_ = upstream.SetDeadline(time.Time{})
	b.splice(ctx, viewer, upstream)
}

// bridge copies between the viewer and the VM until either ends.
func (b *VNCBridge) bridge(ctx context.Context, viewer net.Conn) {
	defer viewer.Close()
	upstream, err := b.dial(ctx)
	if err != nil {
		b.turnAway(viewer, err)
		return
	}
	b.splice(ctx, viewer, upstream)
}

// splice copies between the viewer and the VM until either ends, and
// closes both.
func (b *VNCBridge) splice(ctx context.Context, viewer, upstream net.Conn) {
	defer upstream.Close()
	b.tell(VNCEvent{Kind: VNCViewerConnected, Viewer: viewer.RemoteAddr().String()})
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(upstream, viewer)
		done <- err
	}()
	go func() {
		_, err := io.Copy(viewer, upstream)
		if err == nil {
			err = errors.New("the VM's console closed")
		}
		done <- err
	}()
	var why error
	select {
	case <-ctx.Done():
		why = errors.New("the bridge stopped")
	case why = <-done:
	}
	_ = viewer.Close()
	_ = upstream.Close()
	if why != nil && (errors.Is(why, net.ErrClosed) || errors.Is(why, io.EOF)) {
		why = nil
	}
	b.tell(VNCEvent{Kind: VNCViewerLeft, Viewer: viewer.RemoteAddr().String(), Err: why})
}

// errTooManyPending closes a viewer beyond maxPendingViewers.
var errTooManyPending = fmt.Errorf("%d viewers are already in their handshake", maxPendingViewers)

func (b *VNCBridge) dialTimeout() time.Duration {
	if b.DialTimeout > 0 {
		return b.DialTimeout
	}
	return 15 * time.Second
}

// dial opens KubeVirt's vnc websocket, asking it to keep a session someone
// else holds. AsyncSubresourceHelper takes no context: a dial that outlives
// ctx or the timeout is closed when it arrives.
func (b *VNCBridge) dial(ctx context.Context) (net.Conn, error) {
	timeout := b.dialTimeout()
	type result struct {
		conn net.Conn
		err  error
	}
	got := make(chan result, 1)
	go func() {
		s, err := kvcorev1.AsyncSubresourceHelper(b.Config, "virtualmachineinstances", b.Namespace, b.VMI, "vnc",
			url.Values{"preserveSession": {"true"}})
		if err != nil {
			got <- result{err: fmt.Errorf("KubeVirt refused the console of %s/%s: %w", b.Namespace, b.VMI, err)}
			return
		}
		got <- result{conn: s.AsConn()}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	abandon := func() {
		go func() {
			if r := <-got; r.conn != nil {
				_ = r.conn.Close()
			}
		}()
	}
	select {
	case r := <-got:
		return r.conn, r.err
	case <-ctx.Done():
		abandon()
		return nil, ctx.Err()
	case <-timer.C:
		abandon()
		return nil, fmt.Errorf("the API server did not open the console of %s/%s within %s", b.Namespace, b.VMI, timeout)
	}
}

// turnAway tells a viewer why in RFB's own words: the server's protocol
// version, then zero security types and the reason (RFC 6143 7.1.2), which
// viewers show; and tells the bridge's owner.
func (b *VNCBridge) turnAway(c net.Conn, why error) {
	defer c.Close()
	b.tell(VNCEvent{Kind: VNCViewerTurnedAway, Viewer: c.RemoteAddr().String(), Err: why})
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "RFB 003.008\n"); err != nil {
		return
	}
	version := make([]byte, 12)
	if _, err := io.ReadFull(c, version); err != nil {
		return
	}
	reason := why.Error()
	msg := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(reason)))
	_, _ = c.Write(append(msg, reason...))
}

// WaitVMIStops returns once the VMI is no longer Running (or is gone), with
// what became of it; or ctx's error. It watches the one VMI.
func WaitVMIStops(ctx context.Context, kv kvclientset.Interface, namespace, name string) (string, error) {
	vmis := kv.KubevirtV1().VirtualMachineInstances(namespace)
	byName := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return vmis.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return vmis.Watch(ctx, o)
		},
	}
	var what string
	_, err := watchtools.UntilWithSync(ctx, lw, &kvv1.VirtualMachineInstance{}, func(store cache.Store) (bool, error) {
		if _, exists, _ := store.GetByKey(namespace + "/" + name); !exists {
			what = "the VM is gone"
			return true, nil
		}
		return false, nil
	}, func(e watch.Event) (bool, error) {
		vmi, ok := e.Object.(*kvv1.VirtualMachineInstance)
		switch {
		case e.Type == watch.Deleted:
			what = "the VM is gone"
		case ok && vmi.DeletionTimestamp != nil:
			what = "the VM is stopping"
		case ok && vmi.Status.Phase != kvv1.Running:
			what = "the VM is " + string(vmi.Status.Phase)
		default:
			return false, nil
		}
		return true, nil
	})
	return what, err
}
