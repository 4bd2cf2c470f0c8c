package sitebox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// A node's kubelet port is a TLS front (this file) before its kwok: kwok
// v0.8.0 serves the kubelet API without asking for a client certificate,
// and a kubelet does ask (k3s runs it with --client-ca-file). The front
// serves the node's kubelet certificate, requires a client certificate
// the site's CA signed (the API server presents its
// --kubelet-client-certificate) and relays what it receives to the node's
// kwok, which serves on the node's address at kubeletBackendPort; the
// node's status names the front's port (KubeletPort).
//
// Besides, the front ends a container's log follows when the container
// restarts (RestartContainer), as a kubelet's follow of a container
// instance ends when the instance does: kwok follows a file until its
// reader leaves.

// kubeletBackendPort is where a node's kwok serves, on the node's own
// address, behind its front.
const kubeletBackendPort = 10251

func kubeletFrontProcess(node string) string { return "kubelet-" + node }

// kubeletFront is one node's front.
type kubeletFront struct {
	srv  *http.Server
	done chan struct{}

	mu sync.Mutex
	// follows are the log follows being relayed, per pod/container
	// (followKey); opened counts the follows ever opened, per the same key.
	follows map[string]map[*relayedFollow]struct{}
	opened  map[string]int
}

// relayedFollow is one follow being relayed; cut ends it.
type relayedFollow struct {
	cancel context.CancelFunc
	cut    chan struct{}
	once   sync.Once
}

func (f *relayedFollow) end() {
	f.once.Do(func() {
		close(f.cut)
		f.cancel()
	})
}

func followKey(namespace, pod, container string) string {
	return namespace + "/" + pod + "/" + container
}

// kubeletFrontTLS is the front's TLS: the node's kubelet serving
// certificate, and client certificates of the site's CA only.
func (s *Site) kubeletFrontTLS(n Node) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(s.pki("kubelet-"+n.Name+".crt"), s.pki("kubelet-"+n.Name+".key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(s.pki("ca.crt"))
	if err != nil {
		return nil, err
	}
	clients := x509.NewCertPool()
	if !clients.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", s.pki("ca.crt"))
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clients,
		MinVersion:   tls.VersionTLS12,
		// The exec, attach and port-forward upgrades are HTTP/1.1's.
		NextProtos: []string{"http/1.1"},
	}, nil
}

// listenKubeletFront starts node n's front on its kubelet address.
func (s *Site) listenKubeletFront(n Node) (*kubeletFront, error) {
	cfg, err := s.kubeletFrontTLS(n)
	if err != nil {
		return nil, fmt.Errorf("kubelet front of %s: %w", n.Name, err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(kubeletAddr(n), strconv.Itoa(KubeletPort)))
	if err != nil {
		return nil, fmt.Errorf("kubelet front of %s: %w", n.Name, err)
	}
	logFile, err := os.OpenFile(filepath.Join(s.Dir, "logs", kubeletFrontProcess(n.Name)+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		ln.Close()
		return nil, err
	}
	backend := &url.URL{Scheme: "http", Host: net.JoinHostPort(kubeletAddr(n), strconv.Itoa(kubeletBackendPort))}
	errLog := log.New(logFile, "", log.LstdFlags)
	f := &kubeletFront{done: make(chan struct{}), follows: map[string]map[*relayedFollow]struct{}{}, opened: map[string]int{}}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(backend)
			r.Out.Host = r.In.Host
		},
		// Log lines and exec output as they come.
		FlushInterval: -1,
		ModifyResponse: func(res *http.Response) error {
			if follow, ok := res.Request.Context().Value(followCtxKey{}).(*relayedFollow); ok {
				res.Body = &cutBody{ReadCloser: res.Body, cut: follow.cut}
			}
			return nil
		},
		ErrorLog: errLog,
	}
	f.srv = &http.Server{
		Handler:           f.handler(proxy),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          errLog,
	}
	go s.reportBootID(n.Name, f.done)
	go func() {
		defer close(f.done)
		defer logFile.Close()
		err := f.srv.Serve(tls.NewListener(ln, cfg))
		if !errors.Is(err, http.ErrServerClosed) {
			errLog.Printf("kubelet front of %s: %v", n.Name, err)
		}
	}()
	return f, nil
}

type followCtxKey struct{}

// handler relays every request; a container log follow is registered so
// that a restart of its container ends it.
func (f *kubeletFront) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := followOf(r)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		follow := &relayedFollow{cancel: cancel, cut: make(chan struct{})}
		f.mu.Lock()
		if f.follows[key] == nil {
			f.follows[key] = map[*relayedFollow]struct{}{}
		}
		f.follows[key][follow] = struct{}{}
		f.opened[key]++
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			delete(f.follows[key], follow)
			f.mu.Unlock()
			cancel()
		}()
		next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, followCtxKey{}, follow)))
	})
}

// followOf names the container a request follows the log of:
// GET /containerLogs/NAMESPACE/POD/CONTAINER?follow=true.
func followOf(r *http.Request) (string, bool) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) != 4 || parts[0] != "containerLogs" {
		return "", false
	}
	if follow, _ := strconv.ParseBool(r.URL.Query().Get("follow")); !follow {
		return "", false
	}
	return followKey(parts[1], parts[2], parts[3]), true
}

// endFollows ends the log follows of a container being relayed, as its
// kubelet ends them when the container instance they follow ends, and
// says how many follows of it were opened so far.
func (f *kubeletFront) endFollows(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for follow := range f.follows[key] {
		follow.end()
	}
	return f.opened[key]
}

// followsOpened is how many follows of a container were opened so far.
func (f *kubeletFront) followsOpened(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opened[key]
}

func (f *kubeletFront) close() error {
	f.mu.Lock()
	for _, follows := range f.follows {
		for follow := range follows {
			follow.end()
		}
	}
	f.mu.Unlock()
	err := f.srv.Close()
	<-f.done
	return err
}

// cutBody ends a relayed follow's body cleanly once it is cut: the reader
// sees the log end, as when a kubelet's follow of an instance that ended
// does, not a broken stream.
type cutBody struct {
	io.ReadCloser
	cut <-chan struct{}
}

func (b *cutBody) Read(p []byte) (int, error) {
	select {
	case <-b.cut:
		return 0, io.EOF
	default:
	}
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		select {
		case <-b.cut:
			return n, io.EOF
		default:
		}
	}
	return n, err
}

// startKubeletFront starts node n's front: as a site process when the
// site has a binary for it (KubeletFronts), so that it outlives the
// command that started the site, else in this process. Nothing when it
// runs.
func (s *Site) startKubeletFront(n Node) error {
	if s.KubeletFronts != "" {
		if s.running(kubeletFrontProcess(n.Name)) {
			return nil
		}
		if err := s.StartProcess(kubeletFrontProcess(n.Name), s.KubeletFronts, "kubelet-front", "--dir", s.Dir, "--node", n.Name); err != nil {
			return err
		}
		return s.waitListening(kubeletFrontProcess(n.Name), net.JoinHostPort(kubeletAddr(n), strconv.Itoa(KubeletPort)))
	}
	s.frontsMu.Lock()
	defer s.frontsMu.Unlock()
	if s.fronts[n.Name] != nil {
		return nil
	}
	f, err := s.listenKubeletFront(n)
	if err != nil {
		return err
	}
	if s.fronts == nil {
		s.fronts = map[string]*kubeletFront{}
	}
	s.fronts[n.Name] = f
	return nil
}

// stopKubeletFront stops node's front; kill: at once, as a power cut.
func (s *Site) stopKubeletFront(node string, kill bool) error {
	s.frontsMu.Lock()
	f := s.fronts[node]
	delete(s.fronts, node)
	s.frontsMu.Unlock()
	var err error
	if f != nil {
		err = f.close()
	}
	stop := s.stop
	if kill {
		stop = s.kill
	}
	return errors.Join(err, stop(kubeletFrontProcess(node)))
}

// startKubelet starts node n's kubelet: its kwok and its front.
func (s *Site) startKubelet(n Node) error {
	if !s.running("kwok-" + n.Name) {
		if err := s.startKwok(n); err != nil {
			return err
		}
	}
	if err := s.startRuntime(n); err != nil {
		return err
	}
	return s.startKubeletFront(n)
}

// waitListening waits until a site process accepts connections at addr.
func (s *Site) waitListening(name, addr string) error {
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return true, nil
		}
		last = err
		if !s.running(name) {
			return false, errors.New(s.exitReport(name))
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("%s does not listen on %s (last: %v): %w", name, addr, last, err)
	}
	return nil
}

// ServeKubeletFront runs node's kubelet front of the site in dir until
// ctx ends: the sitebox binary's hidden kubelet-front command, a site
// process (startKubeletFront).
func ServeKubeletFront(ctx context.Context, dir, node string) error {
	site, err := Load(dir)
	if err != nil {
		return err
	}
	n, err := site.node(node)
	if err != nil {
		return err
	}
	f, err := site.listenKubeletFront(n)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return f.close()
	case <-f.done:
		return fmt.Errorf("kubelet front of %s stopped", node)
	}
}

// front is node's front in this process, if it runs here.
func (s *Site) front(node string) (*kubeletFront, bool) {
	s.frontsMu.Lock()
	defer s.frontsMu.Unlock()
	f, ok := s.fronts[node]
	return f, ok
}
