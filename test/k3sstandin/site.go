package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/sitecon/sitecon/agent/procexit"
	"github.com/sitecon/sitecon/test/k3sstandin/sitemode"
)

// In sitebox's bootstrap mode the stand-in is a node's k3s for real: it
// runs the node's etcd member (sitebox's, from its data dir, so it outlives
// every restart) and serves the node's API endpoint (:6443, relayed to the
// site's API server), so stopping the node's k3s takes its member down and
// the agent's bring-up is what brings it back. The node runs in its own
// network namespace; the API server and the members listen in the
// machine's. The stand-in reaches them from one thread that it moves into
// the machine's namespace for good: sockets keep the namespace they were
// made in, and a process forked from that thread starts in it.

// hostThread runs functions on an OS thread in the machine's network
// namespace.
type hostThread struct{ do chan func() }

func enterHost(path string) (*hostThread, error) {
	h := &hostThread{do: make(chan func())}
	entered := make(chan error, 1)
	go func() {
		// Never unlocked: the thread stays in the machine's namespace, and
		// the member's Pdeathsig (the signal its parent's death sends) is
		// tied to the thread that forked it.
		runtime.LockOSThread()
		ns, err := netns.GetFromPath(path)
		if err == nil {
			err = netns.Set(ns)
			ns.Close()
		}
		entered <- err
		if err != nil {
			return
		}
		for f := range h.do {
			f()
		}
	}()
	if err := <-entered; err != nil {
		return nil, fmt.Errorf("enter the machine's network namespace %s: %w", path, err)
	}
	return h, nil
}

func (h *hostThread) run(f func()) {
	done := make(chan struct{})
	h.do <- func() { f(); close(done) }
	<-done
}

func (h *hostThread) dial(addr string) (conn net.Conn, err error) {
	h.run(func() { conn, err = net.DialTimeout("tcp", addr, 5*time.Second) })
	return conn, err
}

// relay accepts on l (in the node's namespace) and joins each connection
// to a new one to target (in the machine's).
func (h *hostThread) relay(l net.Listener, target string) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer in.Close()
			out, err := h.dial(target)
			if err != nil {
				return
			}
			defer out.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
			go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
			<-done
		}()
	}
}

// siteNode is the stand-in's work in sitebox's bootstrap mode; stop ends
// it (the member stopped as k3s stops its etcd). exited is closed if the
// member dies on its own: k3s dies with its etcd.
type siteNode struct {
	member *exec.Cmd
	exited chan struct{}
}

func runSiteNode(confPath, sub, dataDir, nodeIP string) (*siteNode, error) {
	conf, err := sitemode.Read(confPath)
	if err != nil {
		return nil, err
	}
	host, err := enterHost(conf.HostNetns)
	if err != nil {
		return nil, err
	}
	s := &siteNode{exited: make(chan struct{})}
	if conf.NodeKubeconfig != "" {
		identity, err := os.ReadFile(conf.NodeKubeconfig)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Join(dataDir, "agent"), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dataDir, "agent", "kubelet.kubeconfig"), identity, 0o600); err != nil {
			return nil, err
		}
		// And the CA that issued it, beside it, as k3s keeps it on
		// every node: the agents check each other's signed word with it.
		if conf.NodeClientCA != "" {
			clientCA, err := os.ReadFile(conf.NodeClientCA)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(dataDir, "agent", "client-ca.crt"), clientCA, 0o644); err != nil {
				return nil, err
			}
		}
	}
	// The node's own processes reach the site's API server on
	// 127.0.0.1:6443 (an agent's k3s load balancer is there too). A
	// server's answers there only once its etcd member runs from the data
	// k3s keeps, as k3s's API server needs its etcd: an agent that sees
	// its k3s's API has etcd data behind it.
	serveAPI := func() error {
		api, err := net.Listen("tcp", "127.0.0.1:6443")
		if err != nil {
			return err
		}
		go host.relay(api, conf.APIServer)
		return nil
	}
	if sub != "server" || conf.Etcd == nil {
		if err := serveAPI(); err != nil {
			return nil, err
		}
		return s, nil
	}
	ca, err := os.ReadFile(conf.ServerCA)
	if err != nil {
		return nil, err
	}
	// On the cluster address a server's API port answers as k3s's does for
	// a node that is joining: TLS, and /cacerts with the cluster's CA
	// (sitebox's), which joiners check against the CA the seed's agent
	// vouches for. Nothing else dials it: every node's kubeconfig names
	// 127.0.0.1:6443.
	if nodeIP != "" {
		site := &clusterCA{pem: ca}
		cert, err := site.servingCert(nodeIP)
		if err != nil {
			return nil, err
		}
		l, err := tls.Listen("tcp", net.JoinHostPort(nodeIP, "6443"), &tls.Config{Certificates: []tls.Certificate{cert}})
		if err != nil {
			return nil, err
		}
		// No bootstrap data here: sitebox gives every server the CA's key.
		go func() { _ = http.Serve(l, site.apiHandler("")) }()
	}
	tlsDir := filepath.Join(dataDir, "server", "tls")
	if err := os.MkdirAll(tlsDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tlsDir, "server-ca.crt"), ca, 0o600); err != nil {
		return nil, err
	}
	// Every server holds the CA's key (k3s's bootstrap data carries it to
	// joined servers); the agents' membership answers are signed with a
	// key derived from it.
	if conf.ServerCAKey != "" {
		key, err := os.ReadFile(conf.ServerCAKey)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(tlsDir, "server-ca.key"), key, 0o600); err != nil {
			return nil, err
		}
	}
	if err := s.startMember(host, *conf.Etcd, dataDir); err != nil {
		return nil, err
	}
	if err := serveAPI(); err != nil {
		s.stop()
		return nil, err
	}
	etcd, err := net.Listen("tcp", "127.0.0.1:2379")
	if err != nil {
		s.stop()
		return nil, err
	}
	go host.relay(etcd, conf.Etcd.Client)
	for _, member := range conf.Etcd.Members {
		l, err := net.Listen("tcp", member)
		if err != nil {
			s.stop()
			return nil, fmt.Errorf("relay etcd member %s: %w", member, err)
		}
		go host.relay(l, member)
	}
	return s, nil
}

// startMember starts the node's etcd member from sitebox's saved command,
// after stopping the one sitebox itself started for the site's first
// moments (or one a crashed stand-in left), and links its data dir where
// k3s keeps its etcd data, so the agent sees a node that has been a member.
func (s *siteNode) startMember(host *hostThread, e sitemode.Etcd, dataDir string) error {
	data, err := os.ReadFile(e.CommandFile)
	if err != nil {
		return err
	}
	var argv []string
	if err := json.Unmarshal(data, &argv); err != nil || len(argv) == 0 {
		return fmt.Errorf("%s: no command line", e.CommandFile)
	}
	var memberData string
	for _, a := range argv {
		if v, ok := strings.CutPrefix(a, "--data-dir="); ok {
			memberData = v
		}
	}
	if memberData == "" {
		return fmt.Errorf("%s: no --data-dir", e.CommandFile)
	}
	stopRunning(e.PIDFile, memberData, 10*time.Second)
	link := filepath.Join(dataDir, "server", "db", "etcd")
	if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(link), 0o700); err != nil {
			return err
		}
		if err := os.Symlink(memberData, link); err != nil {
			return err
		}
	}
	logFile, err := os.OpenFile(e.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The member dies with its k3s, however k3s ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	host.run(func() { err = cmd.Start() })
	if err != nil {
		return fmt.Errorf("start etcd member: %w", err)
	}
	s.member = cmd
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(os.Stderr, "k3sstandin: etcd member exited: %v\n", err)
		close(s.exited)
	}()
	tmp := e.PIDFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, e.PIDFile)
}

// stop stops the member as k3s stops its etcd: SIGTERM, then SIGKILL.
func (s *siteNode) stop() {
	if s == nil || s.member == nil {
		return
	}
	_ = s.member.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.member.Process.Kill()
		<-s.exited
	}
}

// stopRunning stops the process in pidFile if it still runs the member
// of memberData (a reused PID is left alone): SIGTERM, then SIGKILL after
// termWithin (etcd's graceful stop can wait on its clients' watches). It
// returns only once every thread of the member has ended (procexit says
// why /proc cannot tell): a member started before that on the same ports
// exits at once.
func stopRunning(pidFile, memberData string, termWithin time.Duration) {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return
	}
	member, err := procexit.Open(pid)
	if err != nil {
		return // no such process
	}
	defer member.Close()
	// Checked after the handle is taken, so the handle is the member.
	if !runsMember(pid, memberData) {
		return
	}
	for _, step := range []struct {
		sig    syscall.Signal
		within time.Duration
	}{{syscall.SIGTERM, termWithin}, {syscall.SIGKILL, 5 * time.Second}} {
		if member.Signal(step.sig) != nil || member.Ended(step.within) {
			return
		}
	}
}

// runsMember says whether any thread of pid still runs memberData's
// member: the main thread's command line is gone once it has ended, the
// others' are not.
func runsMember(pid int, memberData string) bool {
	// The whole argument: another member's data dir may start with this
	// one's.
	want := "--data-dir=" + memberData + "\x00"
	paths, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/cmdline", pid))
	for _, p := range append([]string{fmt.Sprintf("/proc/%d/cmdline", pid)}, paths...) {
		if cmdline, err := os.ReadFile(p); err == nil && strings.Contains(string(cmdline), want) {
			return true
		}
	}
	return false
}
