package sitebox

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/util/retry"

	"github.com/sitecon/sitecon/agent/config"
)

// Fail stops the named node's kwok: its heartbeats stop, and the real
// node-lifecycle controller marks it Unknown and taints it unreachable after
// the node-monitor grace period. A server loses its etcd member with it: two
// failed servers of three leave etcd, and so the API server, without quorum.
func (s *Site) Fail(node string) error {
	if _, err := s.node(node); err != nil {
		return err
	}
	if !s.running("kwok-" + node) {
		return fmt.Errorf("node %s is already failed", node)
	}
	if s.Bootstrap {
		return s.powerOffBoot(node)
	}
	if err := errors.Join(s.stopKubeletFront(node, false), s.stop("kwok-"+node), s.endRuntime(node)); err != nil {
		return err
	}
	// The device is lost with all it runs: its etcd member and a sitecon
	// agent started for it (StartAgents) die with it, without a word, as
	// a powered-off node's do: the member hands no leadership over, the
	// agent neither releases its stats-leader lease nor says goodbye. Its
	// cluster address goes silent: no reset, as from a host that is up.
	n, _ := s.node(node)
	return errors.Join(s.kill(etcdProcess(node)), s.kill(agentProcess(node)), s.silence(n))
}

// Recover restarts the named node's kwok; the node turns Ready again. Its
// etcd member starts again from its data directory and rejoins the others;
// its agent, if the site runs agents, starts again as it was started.
func (s *Site) Recover(node string) error {
	n, err := s.node(node)
	if err != nil {
		return err
	}
	defer s.restarts.Add(1)
	if s.running("kwok-" + node) {
		return fmt.Errorf("node %s is not failed", node)
	}
	if s.Bootstrap {
		return s.powerOnBoot(node)
	}
	if err := s.StartEtcdMember(node); err != nil {
		return err
	}
	// The device booted: its kubelet's first status carries the new boot
	// ID with Ready (kwok keeps whatever the Node says), so the ID is set
	// before the simulated kubelet starts. Set after, the Node showed
	// Ready with the old ID for a moment: a blink to the maintenance walk,
	// while Longhorn's simulator had already begun the rebuild.
	if err := s.newBootID(node); err != nil {
		return err
	}
	if err := s.startKubelet(n); err != nil {
		return err
	}
	if err := s.unsilence(node); err != nil {
		return err
	}
	return s.restart(agentProcess(node))
}

// newBootID gives the Node a new status.nodeInfo.bootID, as a kubelet
// does after the device's boot.
func (s *Site) newBootID(node string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.setBootID(ctx, node, string(uuid.NewUUID()))
}

func (s *Site) setBootID(ctx context.Context, node, id string) error {
	cs, err := s.coreClient()
	if err != nil {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil || n.Status.NodeInfo.BootID == id {
			return err
		}
		n.Status.NodeInfo.BootID = id
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// bootIDFile holds a bootstrap-mode node's boot ID, new at every power-on
// (powerOnBoot); its kubelet front reports it on the Node.
func (s *Site) bootIDFile(node string) string { return filepath.Join(s.BootDir(node), "boot_id") }

// reportBootID puts the node's boot ID (bootIDFile) on its Node, as a
// kubelet does once it reaches the API server after the device's boot:
// retried until done or until the front ends (the API server may have no
// quorum while the site powers on). No file: the first boot, whose ID the
// Node was registered with.
func (s *Site) reportBootID(node string, done <-chan struct{}) {
	data, err := os.ReadFile(s.bootIDFile(node))
	if err != nil {
		return
	}
	id := strings.TrimSpace(string(data))
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.setBootID(ctx, node, id)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-done:
			return
		case <-time.After(2 * time.Second): // the kubelet's retry, not a wait for a condition
		}
	}
}

// PowerOff cuts the power of the named nodes at once, as a site's power
// cut does: each node's kubelet (kwok), etcd member and sitecon agent die
// by SIGKILL, with no word to anyone. Powering off two of three servers, or
// all of them, leaves etcd (and so the API server, which here runs outside
// the nodes) without quorum. A node already off is left as it is.
func (s *Site) PowerOff(nodes ...string) error {
	for _, node := range nodes {
		if _, err := s.node(node); err != nil {
			return err
		}
	}
	var errs []error
	if s.Bootstrap {
		return s.powerOffBoot(nodes...)
	}
	for _, node := range nodes {
		errs = append(errs, s.stopKubeletFront(node, true), s.kill("kwok-"+node), s.endRuntime(node), s.kill(etcdProcess(node)), s.kill(agentProcess(node)))
	}
	// Then their addresses go silent, as a powered-off device's.
	for _, node := range nodes {
		n, _ := s.node(node)
		errs = append(errs, s.silence(n))
	}
	return errors.Join(errs...)
}

// PowerOn starts a powered-off node again, as its device boots: its etcd
// member from its data directory, its kubelet, and its agent if the site
// runs agents.
// Nodes may be powered on in any order; a node that runs is left as it is.
func (s *Site) PowerOn(node string) error {
	n, err := s.node(node)
	if err != nil {
		return err
	}
	defer s.restarts.Add(1)
	if s.Bootstrap {
		return s.powerOnBoot(node)
	}
	// The member is started, not waited for: a member that comes back
	// alone serves no client (not even /livez) until it finds a quorum,
	// which the nodes powered on after it bring.
	if _, ok := s.EtcdMemberOf(node); ok {
		quorate := s.etcdQuorate()
		if err := s.restart(etcdProcess(node)); err != nil {
			return err
		}
		if err := s.afterQuorumReturns(quorate); err != nil {
			return err
		}
	}
	if err := s.startKubelet(n); err != nil {
		return err
	}
	if err := s.unsilence(node); err != nil {
		return err
	}
	return s.restart(agentProcess(node))
}

// KillAgent kills only the node's sitecon agent (SIGKILL), as a crash or
// the OOM killer does: its k3s, kubelet and etcd member run on. Nothing
// for a node whose agent does not run.
func (s *Site) KillAgent(node string) error {
	if _, err := s.node(node); err != nil {
		return err
	}
	return s.kill(agentProcess(node))
}

// RestartAgent starts the node's agent again with the command it was last
// started with, as its service manager does after a crash; nothing for an
// agent that runs.
func (s *Site) RestartAgent(node string) error {
	if _, err := s.node(node); err != nil {
		return err
	}
	return s.restart(agentProcess(node))
}

// RestartAgentWith starts a killed agent again with flags added to its
// command (a new --failover-timeout, --no-fence: its last value wins), as
// a technician's changed service file does; later restarts and power-ons
// keep them. Nothing for an agent that runs.
func (s *Site) RestartAgentWith(node string, flags ...string) error {
	if _, err := s.node(node); err != nil {
		return err
	}
	name := agentProcess(node)
	if s.running(name) {
		return nil
	}
	if len(flags) > 0 {
		data, err := os.ReadFile(s.cmdFile(name))
		if err != nil {
			return fmt.Errorf("%s's agent: its command: %w", node, err)
		}
		var argv []string
		if err := json.Unmarshal(data, &argv); err != nil || len(argv) == 0 {
			return fmt.Errorf("%s: unreadable command in %s", name, s.cmdFile(name))
		}
		data, _ = json.Marshal(append(argv, flags...))
		if err := config.WriteFileAtomic(s.cmdFile(name), data, 0o644); err != nil {
			return err
		}
	}
	return s.restart(name)
}

// StopEtcdMember stops only the node's etcd member (SIGKILL): the node
// stays Ready, as when etcd fails on a server whose kubelet still reports.
// Nothing for a node without a member.
func (s *Site) StopEtcdMember(node string) error {
	if _, err := s.node(node); err != nil {
		return err
	}
	return s.kill(etcdProcess(node))
}

// StartEtcdMember starts a stopped member again from its data directory
// and returns once it serves (whether it has a leader depends on the other
// members); nothing when it runs or the node has none.
func (s *Site) StartEtcdMember(node string) error {
	m, ok := s.EtcdMemberOf(node)
	if !ok || s.running(etcdProcess(node)) {
		return nil
	}
	quorate := s.etcdQuorate()
	if err := s.restart(etcdProcess(node)); err != nil {
		return err
	}
	// /livez answers without a quorum: the member itself is up.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.waitHTTP(ctx, etcdProcess(node), m.ClientURL()+"/livez", nil); err != nil {
		return err
	}
	return s.afterQuorumReturns(quorate)
}

// Freeze stops the named node's kubelet (its kwok process, SIGSTOP) without
// ending it, and Thaw lets it go on (SIGCONT): a blink of the node's link
// as its kubelet lives it, heartbeats stopped and resumed where they were.
// (Fail and Recover restart kwok, which then waits out its own lease.)
func (s *Site) Freeze(node string) error { return s.signalKwok(node, syscall.SIGSTOP) }

// Thaw lets a frozen node's kubelet go on (see Freeze).
func (s *Site) Thaw(node string) error { return s.signalKwok(node, syscall.SIGCONT) }

func (s *Site) signalKwok(node string, sig syscall.Signal) error {
	if _, err := s.node(node); err != nil {
		return err
	}
	pid := s.pid("kwok-" + node)
	if pid == 0 {
		return fmt.Errorf("node %s is failed: no kubelet to signal", node)
	}
	return syscall.Kill(pid, sig)
}

// RegisterNode creates node's Node object again, as the kubelet of a
// device joined anew (after sitecon node remove) registers it at its
// start; nothing when it is there.
func (s *Site) RegisterNode(ctx context.Context, node string) error {
	n, err := s.node(node)
	if err != nil {
		return err
	}
	cs, err := s.coreClient()
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, s.nodeObject(n), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register node %s: %w", node, err)
	}
	return nil
}
