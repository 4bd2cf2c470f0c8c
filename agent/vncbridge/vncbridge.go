// Package vncbridge serves the VM consoles of this node's apps to the
// device: for every running VM app with VNC (enable_vnc) whose VMI runs on
// this node, BindAddress:5900+vnc_display (the port its VMI's
// sitecon.io/vnc-port annotation names) is bridged to the VM's console
// through the API server (kube.VNCBridge), where the device's
// remote-console service finds it, as it found QEMU's port before the VM
// ran in a cluster. The port moves with the VM: it is closed when the VMI
// leaves this node or stops, and the node the VM lands on opens it.
//
// A port serves only a viewer that answers with a one-time password
// (RFB's VNC Authentication) the agent issued over its socket, which is
// root's alone (Session; `sitecon agent vnc-password`): a process that
// merely reaches the port, a host-network pod's for one, neither sees the
// VM nor holds its one viewer slot.
//
// It reads the VMIs from the agent's snapshot (its informer) and acts on
// its change notifications; it never polls. A port it cannot listen on
// (another process holds it) is tried again every RetryListen.
package vncbridge

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	kvv1 "kubevirt.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/streams"
)

// DefaultBindAddress is where a device's remote-console service looks.
const DefaultBindAddress = "127.0.0.1"

// Source is what the bridges read: the agent's snapshot.
type Source interface {
	Subscribe() (<-chan struct{}, func())
	VMIs() []*kvv1.VirtualMachineInstance
}

// Options configure the bridges.
type Options struct {
	// Node is this node's name.
	Node string
	// BindAddress is the address the ports are served on (default
	// DefaultBindAddress; tests give each simulated node its own).
	BindAddress string
	// Config opens the consoles: this node's own identity.
	Config *rest.Config
	// RetryListen is how soon a port that could not be opened is tried
	// again (default 5s).
	RetryListen time.Duration
	Log         *slog.Logger
}

// Target is one console to serve: the VMI, its app and the port.
type Target struct {
	Port      int
	Namespace string
	VMI       string
	// App is the app's name (its VMI's sitecon.io/app-name label).
	App string
}

// Want is which consoles this node serves, by port: the Running VMIs on
// node with a VNC port, not being deleted. Two VMIs asking for one port
// (two apps with one display): the first by name keeps it, the other is
// reported in conflicts.
func Want(vmis []*kvv1.VirtualMachineInstance, node string) (want map[int]Target, conflicts []string) {
	var candidates []Target
	for _, vmi := range vmis {
		if vmi.Status.NodeName != node || vmi.Status.Phase != kvv1.Running || vmi.DeletionTimestamp != nil {
			continue
		}
		port, err := strconv.Atoi(vmi.Annotations[kube.AnnotationVNCPort])
		if err != nil || port <= 0 || port > 65535 {
			continue
		}
		candidates = append(candidates, Target{Port: port, Namespace: vmi.Namespace, VMI: vmi.Name, App: vmi.Labels[kube.LabelAppName]})
	}
	slices.SortFunc(candidates, func(a, b Target) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), strings.Compare(a.VMI, b.VMI))
	})
	want = map[int]Target{}
	for _, c := range candidates {
		if had, taken := want[c.Port]; taken {
			conflicts = append(conflicts, c.Namespace+"/"+c.VMI+" asks for port "+strconv.Itoa(c.Port)+", served for "+had.Namespace+"/"+had.VMI)
			continue
		}
		want[c.Port] = c
	}
	return want, conflicts
}

// Bridges serve the consoles Want names.
type Bridges struct {
	opts Options
	src  Source

	mu      sync.Mutex
	running map[int]*running
}

type running struct {
	target    Target
	addr      string
	passwords *streams.VNCPasswords
	cancel    context.CancelFunc
	done      chan struct{}
}

// SessionTTL is how long a password Session issues may wait for its
// viewer.
const SessionTTL = time.Minute

// SessionRequest asks for a Session: Console names it as Session's ref.
type SessionRequest struct {
	Console string `json:"console"`
}

// Session is one viewer's way in: where, and the password that opens one
// session there within its lifetime.
type Session struct {
	App      string    `json:"app,omitempty"`
	VMI      string    `json:"vmi"`
	Address  string    `json:"address"`
	Password string    `json:"password"`
	Expires  time.Time `json:"expires"`
}

// Session issues a one-time password for the console ref names: its port
// (5900+vnc_display, what the device's remote-console service knows), its
// app's name or its VMI's name. The error says what this node serves when
// ref names none of it.
func (b *Bridges) Session(ref string) (Session, error) {
	b.mu.Lock()
	var found []*running
	var served []string
	for _, r := range b.running {
		served = append(served, fmt.Sprintf("%s (%s, port %d)", cmp.Or(r.target.App, r.target.VMI), r.target.VMI, r.target.Port))
		if ref == strconv.Itoa(r.target.Port) || ref == r.target.VMI || (r.target.App != "" && ref == r.target.App) {
			found = append(found, r)
		}
	}
	b.mu.Unlock()
	slices.Sort(served)
	switch {
	case len(found) > 1:
		// Never a guess: a password for the wrong VM is someone else's screen.
		return Session{}, fmt.Errorf("%q names more than one console here (%s): name it by its port", ref, strings.Join(served, ", "))
	case len(found) == 0 && len(served) == 0:
		return Session{}, fmt.Errorf("no console %q: this node serves none (a VM app with enable_vnc running here)", ref)
	case len(found) == 0:
		return Session{}, fmt.Errorf("no console %q on this node (it serves %s)", ref, strings.Join(served, ", "))
	}
	r := found[0]
	password, expires, err := r.passwords.Issue(SessionTTL)
	if err != nil {
		return Session{}, err
	}
	return Session{App: r.target.App, VMI: r.target.Namespace + "/" + r.target.VMI, Address: r.addr,
		Password: password, Expires: expires.UTC()}, nil
}

// New makes the bridges of one node.
func New(opts Options, src Source) *Bridges {
	if opts.BindAddress == "" {
		opts.BindAddress = DefaultBindAddress
	}
	if opts.RetryListen <= 0 {
		opts.RetryListen = 5 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Bridges{opts: opts, src: src, running: map[int]*running{}}
}

// Served is what is being served now: address by VMI (namespace/name).
func (b *Bridges) Served() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]string, len(b.running))
	for _, r := range b.running {
		out[r.target.Namespace+"/"+r.target.VMI] = r.addr
	}
	return out
}

// Run serves until ctx ends, then closes every port.
func (b *Bridges) Run(ctx context.Context) error {
	changes, unsubscribe := b.src.Subscribe()
	defer unsubscribe()
	retry := time.NewTimer(0)
	defer retry.Stop()
	defer b.stopAll()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-retry.C:
		}
		if failed := b.reconcile(ctx); failed {
			retry.Reset(b.opts.RetryListen)
		}
	}
}

// reconcile opens the ports wanted and closes the others; true when a
// port could not be opened.
func (b *Bridges) reconcile(ctx context.Context) (failed bool) {
	want, conflicts := Want(b.src.VMIs(), b.opts.Node)
	for _, c := range conflicts {
		b.opts.Log.Warn("vnc: port taken", "conflict", c)
	}
	b.mu.Lock()
	var stop []*running
	for port, r := range b.running {
		if t, ok := want[port]; !ok || t != r.target {
			stop = append(stop, r)
			delete(b.running, port)
		}
	}
	b.mu.Unlock()
	for _, r := range stop {
		r.cancel()
		<-r.done
		b.opts.Log.Info("vnc: console closed", "vmi", r.target.Namespace+"/"+r.target.VMI, "addr", r.addr)
	}
	for port, t := range want {
		b.mu.Lock()
		_, serving := b.running[port]
		b.mu.Unlock()
		if serving {
			continue
		}
		addr := net.JoinHostPort(b.opts.BindAddress, strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			b.opts.Log.Warn("vnc: cannot serve console", "vmi", t.Namespace+"/"+t.VMI, "addr", addr, "err", err)
			failed = true
			continue
		}
		rctx, cancel := context.WithCancel(ctx)
		r := &running{target: t, addr: addr, passwords: &streams.VNCPasswords{}, cancel: cancel, done: make(chan struct{})}
		log := b.opts.Log.With("vmi", t.Namespace+"/"+t.VMI, "addr", addr)
		bridge := &streams.VNCBridge{Config: b.opts.Config, Namespace: t.Namespace, VMI: t.VMI,
			Passwords: r.passwords, Events: func(e streams.VNCEvent) { log.Info("vnc: " + e.String()) }}
		go func() {
			defer close(r.done)
			if err := bridge.Serve(rctx, ln); err != nil {
				log.Warn("vnc: console bridge stopped", "err", err)
			}
		}()
		b.mu.Lock()
		b.running[port] = r
		b.mu.Unlock()
		log.Info("vnc: console served")
	}
	return failed
}

func (b *Bridges) stopAll() {
	b.mu.Lock()
	all := b.running
	b.running = map[int]*running{}
	b.mu.Unlock()
	for _, r := range all {
		r.cancel()
		<-r.done
	}
}
