package sitebox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
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
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/sitecon/sitecon/agent/procexit"
)

func agentProcess(node string) string { return "agent-" + node }

// kill ends a site process at once (SIGKILL); nothing when it does not run.
func (s *Site) kill(name string) error {
	pid := s.pid(name)
	if pid == 0 {
		return nil
	}
	if !signalExit(pid, syscall.SIGKILL, 5*time.Second) {
		return fmt.Errorf("%s (pid %d) did not exit", name, pid)
	}
	return os.Remove(s.pidFile(name))
}

// restart starts a site process again with the command it was last started
// with (DIR/run/NAME.cmd); nothing when it runs or was never started.
func (s *Site) restart(name string) error {
	if s.running(name) {
		return nil
	}
	data, err := os.ReadFile(s.cmdFile(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var argv []string
	if err := json.Unmarshal(data, &argv); err != nil || len(argv) == 0 {
		return fmt.Errorf("%s: unreadable command in %s", name, s.cmdFile(name))
	}
	return s.StartProcess(name, argv[0], argv[1:]...)
}

// processOrder is the order Down stops processes in: node simulators and
// controllers first, etcd last, so nothing logs a storm of errors on the way.
func (s *Site) processOrder() []string {
	order := []string{}
	for _, n := range s.Nodes {
		order = append(order, "agent-"+n.Name, silentProcess(n.Name))
	}
	order = append(order, "app-chatter", "simulators")
	for _, n := range s.Nodes {
		order = append(order, RuntimeProcess(n.Name), kubeletFrontProcess(n.Name), "kwok-"+n.Name)
	}
	order = append(order, controlPlaneProcesses...)
	for _, m := range s.Etcd {
		order = append(order, etcdProcess(m.Node))
	}
	// A site started by an older sitebox ran one member named "etcd".
	return append(order, "etcd")
}

// Down stops every process the site started, by PID, and keeps the directory
// (logs stay for a look afterwards).
func (s *Site) Down() error {
	var errs []error
	for _, n := range s.Nodes {
		errs = append(errs, s.unsilence(n.Name))
		// The fronts run in this process, if anywhere here.
		s.frontsMu.Lock()
		f := s.fronts[n.Name]
		delete(s.fronts, n.Name)
		s.frontsMu.Unlock()
		if f != nil {
			errs = append(errs, f.close())
		}
		// The pods' processes outlive their runtime simulator, as
		// containers do: they end with the site.
		errs = append(errs, s.endRuntime(n.Name))
	}
	for _, name := range s.processOrder() {
		if s.running(name) {
			if err := s.stop(name); err != nil {
				errs = append(errs, err)
			}
		}
		_ = os.Remove(s.pidFile(name))
	}
	if s.Runtime != "" {
		// The site's part of the cgroup tree, emptied above.
		if base, err := cgroupBase(); err == nil {
			errs = append(errs, removeCgroupTree(filepath.Join(base, s.netnsPrefix())))
		}
	}
	if s.Bootstrap {
		// An agent stops its k3s (and that its etcd member) as it ends;
		// one killed earlier may have left its k3s behind.
		for _, n := range s.Nodes {
			errs = append(errs, s.killK3s(n.Name))
		}
		errs = append(errs, s.dropLAN(), s.unmountStateDisks())
	}
	return errors.Join(errs...)
}

func (s *Site) pidFile(name string) string { return filepath.Join(s.Dir, "run", name+".pid") }

// cmdFile holds the command a site process was started with, for restart.
func (s *Site) cmdFile(name string) string { return filepath.Join(s.Dir, "run", name+".cmd") }

// Start runs a site process detached from the caller's terminal, with its output
// in DIR/logs/NAME.log and its PID in DIR/run/NAME.pid.
func (s *Site) start(name string, args ...string) error {
	path := filepath.Join(s.BinDir, name)
	switch {
	case strings.HasPrefix(name, "kwok-"):
		path = filepath.Join(s.BinDir, "kwok")
	case strings.HasPrefix(name, "etcd-"):
		path = filepath.Join(s.BinDir, "etcd")
	}
	return s.StartProcess(name, path, args...)
}

// StartProcess starts any program as one of the site's processes.
func (s *Site) StartProcess(name, path string, args ...string) error {
	logFile, err := os.OpenFile(filepath.Join(s.Dir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = s.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if s.DieWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := spawn(cmd); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	s.exitedMu.Lock()
	if s.exited == nil {
		s.exited = map[int]chan struct{}{}
	}
	s.exited[cmd.Process.Pid] = done
	s.exitedMu.Unlock()
	// Reap it if it exits while this process lives, so it does not linger as
	// a zombie that still looks alive. How it ended goes to its log: a
	// process killed by a signal leaves no word of its own.
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(logFile, "sitebox: %s exited: %v\n", name, cmp.Or(err, error(errors.New("status 0"))))
		logFile.Close()
		close(done)
	}()
	argv, _ := json.Marshal(append([]string{path}, args...))
	if err := os.WriteFile(s.cmdFile(name), argv, 0o644); err != nil {
		return err
	}
	return os.WriteFile(s.pidFile(name), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
}

// spawnRequests carries starts to the one goroutine that forks every site
// process. Pdeathsig fires when the *thread* that forked the child exits, not
// the process (golang/go#27505), and Go ends a thread whenever a goroutine
// exits while locked to it (as network-namespace code does). Forking from a
// thread that is locked for good keeps DieWithParent meaning "when this
// process dies".
var spawnRequests = make(chan spawnRequest)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

var startSpawner = sync.OnceFunc(func() {
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		for req := range spawnRequests {
			req.done <- req.cmd.Start()
		}
	}()
})

func spawn(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil || cmd.SysProcAttr.Pdeathsig == 0 {
		return cmd.Start()
	}
	startSpawner()
	done := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd: cmd, done: done}
	return <-done
}

// exitReport says how a site process that should be running ended, with the
// end of its log: the site directory does not outlive a CI machine, so the
// reason has to travel in the error.
func (s *Site) exitReport(name string) string {
	path := filepath.Join(s.Dir, "logs", name+".log")
	if done := s.reaped(s.readPID(name)); done != nil {
		// Its reaper writes how it ended; wait for that line.
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
	}
	return fmt.Sprintf("%s exited; the end of %s:\n%s", name, path, logTail(path, 20))
}

// logTail returns the last n lines of a log file, indented, or why it cannot.
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "    (" + err.Error() + ")"
	}
	defer f.Close()
	const window = 8 << 10
	if st, err := f.Stat(); err == nil && st.Size() > window {
		_, _ = f.Seek(st.Size()-window, io.SeekStart)
	}
	data, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "    (empty)"
	}
	return "    " + strings.Join(lines, "\n    ")
}

// readPID is the PID recorded for a site process, 0 when there is none.
func (s *Site) readPID(name string) int {
	data, err := os.ReadFile(s.pidFile(name))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0
	}
	return pid
}

// reaped is closed once this process's child pid has exited; nil when pid
// is not a child of this process.
func (s *Site) reaped(pid int) <-chan struct{} {
	s.exitedMu.Lock()
	defer s.exitedMu.Unlock()
	if done, ok := s.exited[pid]; ok {
		return done
	}
	return nil
}

// pid returns the PID of a site process if it is alive and still the process
// the site started, else 0.
func (s *Site) pid(name string) int {
	pid := s.readPID(name)
	if pid <= 0 {
		return 0
	}
	// A child of this process is alive until its reaper has waited for it,
	// and its PID cannot be reused before that: ask the reaper, not /proc.
	// (Right after exec, /proc/PID/cmdline can still read empty: the
	// kernel closes the exec pipe Start waits on before it sets up the new
	// image's arguments.)
	if done := s.reaped(pid); done != nil {
		select {
		case <-done:
			return 0
		default:
			return pid
		}
	}
	// Started by another sitebox command (site.json): alive, and its command
	// line names the site directory, or the PID was reused by something
	// else and must never be signalled.
	cmdline, ok := liveCmdline(pid)
	if !ok || !bytes.Contains(cmdline, []byte(s.Dir)) {
		return 0
	}
	return pid
}

func (s *Site) running(name string) bool { return s.pid(name) != 0 }

// liveCmdline is the command line of pid while any thread of it lives:
// once its main thread has ended /proc shows a zombie without a command
// line, while its other threads still hold its ports (procexit).
func liveCmdline(pid int) ([]byte, bool) {
	p, err := procexit.Open(pid)
	if err != nil {
		return nil, false
	}
	defer p.Close()
	var cmdline []byte
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/cmdline", pid))
	for _, path := range append([]string{fmt.Sprintf("/proc/%d/cmdline", pid)}, tasks...) {
		if c, err := os.ReadFile(path); err == nil && len(c) > 0 {
			cmdline = c
			break
		}
	}
	// Alive after /proc was read: what was read was the handle's process
	// (one that ended and was reaped could have left its number to
	// another).
	if p.Ended(0) {
		return nil, false
	}
	return cmdline, true
}

// stop sends SIGTERM, waits up to 10 s for the process to exit, then SIGKILL.
func (s *Site) stop(name string) error {
	pid := s.pid(name)
	if pid == 0 {
		return nil
	}
	if !signalExit(pid, syscall.SIGTERM, 10*time.Second) && !signalExit(pid, syscall.SIGKILL, 5*time.Second) {
		return fmt.Errorf("%s (pid %d) did not exit", name, pid)
	}
	return os.Remove(s.pidFile(name))
}

// signalExit sends sig to pid and reports whether every thread of it has
// ended within d (procexit: /proc calls a process gone once its main
// thread has ended, while its other threads still hold its ports).
func signalExit(pid int, sig syscall.Signal, d time.Duration) bool {
	p, err := procexit.Open(pid)
	if err != nil {
		return true // no such process
	}
	defer p.Close()
	_ = p.Signal(sig)
	return p.Ended(d)
}

// waitHTTP waits until url answers 200.
func (s *Site) waitHTTP(ctx context.Context, name, url string, transport *http.Transport) error {
	client := &http.Client{Timeout: 2 * time.Second}
	if transport != nil {
		client.Transport = transport
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		if !s.running(name) {
			return false, errors.New(s.exitReport(name))
		}
		resp, err := client.Get(url)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s not ready (%s): %w", name, last, err)
	}
	return nil
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = (b[6] & 0x0f) | 0x40
	b[8] = (b[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
