package sitebox

import (
	"crypto/sha1"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/test/k3sstandin/sitemode"
	"github.com/sitecon/sitecon/test/sitebox/clockstep"
)

// Bootstrap mode (Options.Bootstrap, `sitebox up --bootstrap`): each node's
// agent bootstraps for real, as on a device. It runs without --no-bootstrap
// in a network namespace sitebox made for the node (its cluster address
// and firewall table go there, never on the machine's own interfaces),
// with its own cluster config from formation.Plan, its own cluster address and
// /status, and the k3s stand-in (test/k3sstandin) as its k3s. The stand-in
// runs the node's etcd member, sitebox's, from the command sitebox saved in
// DIR/run/etcd-NODE.cmd and with its data kept across restarts, and serves
// the node's API port (:6443, relayed to the site's API server): stopping
// a node's k3s takes its member down, and only the agent's own bring-up
// (the seed wait on a first join, an immediate start for a member) brings
// it back.
//
// The namespaces hang off one bridge namespace, their LAN, on which the
// cluster prefix lives; nothing of them touches the machine's namespace.
// The API server and the etcd members listen on the machine's loopback,
// which no node namespace can reach: the stand-in keeps one thread in the
// machine's namespace (sitemode.Node.HostNetns) and dials and forks from
// it, so the node's side needs no route, address or rule on the machine.
// (A unix socket crosses namespaces too, but it needs a relay on the
// machine's side for each listener: one more process per node that a power
// cut must kill and a boot start, outside the node's k3s.) The namespaces
// have no default route: whatever an agent dials off the site's LAN fails
// at once instead of leaving the machine.
// A powered-off node's namespace is deleted (its address, routes and
// firewall go, as a device's do when it loses power: the others' packets
// to it go unanswered) and made again, bare, when it powers on.

// bootPrefix is the cluster network of a bootstrap-mode site: it exists
// only inside the site's namespaces, so every site may use the same. As
// small as the nodes allow: a seed's first boot probes every address of
// it for a member before it initialises.
func bootPrefix(nodes int) string {
	switch {
	case nodes <= 13:
		return "10.244.244.0/28"
	case nodes <= 29:
		return "10.244.244.0/27"
	case nodes <= 61:
		return "10.244.244.0/26"
	}
	return "10.244.244.0/25"
}

// clusterInterface is each node namespace's interface on the LAN.
const clusterInterface = "eth1"

// BootDir is a bootstrap-mode node's disk: its cluster config
// (config/cluster.json), k3s's config and data dir, its kubeconfig.
func (s *Site) BootDir(node string) string { return filepath.Join(s.Dir, "boot", node) }

// K3sDataDir is a bootstrap-mode node's k3s data dir: the stand-in's
// record of its starts (standin-starts), the agent's PID file of its k3s
// (sitecon-k3s.pid), the etcd member's data (server/db/etcd).
func (s *Site) K3sDataDir(node string) string { return filepath.Join(s.BootDir(node), "k3s-data") }

// ClusterConfig is a bootstrap-mode node's cluster config.
func (s *Site) ClusterConfig(node string) string {
	return filepath.Join(s.BootDir(node), "config", "cluster.json")
}

// Netns is the network namespace of a bootstrap-mode node.
func (s *Site) Netns(node string) string {
	return s.netnsPrefix() + "-" + strings.TrimPrefix(node, "node-")
}

// hostNetns names the network namespace sitebox started the control plane
// in (the machine's), pinned under the site's prefix (`ip netns attach`:
// a name for it, no change to it) so that the stand-ins can enter it
// whichever process started them. PID 1's would do as well, but a
// container may forbid reading it even to root.
func (s *Site) hostNetns() string { return s.netnsPrefix() + "-host" }

// lanNetns is the namespace holding the LAN's bridge.
func (s *Site) lanNetns() string { return s.netnsPrefix() + "-lan" }

// netnsPrefix names the site's namespaces after its directory: sites side
// by side (tests) never share one.
func (s *Site) netnsPrefix() string {
	h := sha1.Sum([]byte(s.Dir))
	return fmt.Sprintf("sbx%x", h[:4])
}

// checkBootstrapHost refuses bootstrap mode where it cannot work: it needs
// root and iproute2 for the namespaces.
func checkBootstrapHost() error {
	if os.Geteuid() != 0 {
		return errors.New("bootstrap mode runs each node's agent in a network namespace: it needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("bootstrap mode needs iproute2 (ip) for the nodes' network namespaces")
	}
	return nil
}

// planBootstrap forms the site's cluster offline, as a technician's
// formation would: every node's cluster config on its disk, the site's
// cluster id and token taken from it, each node's address its cluster
// address (the agents' failover guard probes it, inside the namespaces).
func (s *Site) planBootstrap() error {
	var nodes []formation.FormNode
	for i, n := range s.Nodes {
		nodes = append(nodes, formation.FormNode{Name: n.Name, UUID: n.UUID, Worker: i >= EtcdMembers})
	}
	plan, err := formation.Plan(formation.FormRequest{ClusterName: s.ClusterName, Interface: clusterInterface, Prefix: bootPrefix(len(nodes)), Nodes: nodes})
	if err != nil {
		return fmt.Errorf("form the site's cluster: %w", err)
	}
	s.ClusterID = plan.ClusterID
	if err := os.WriteFile(s.ClusterTokenFile(), []byte(plan.Token.Reveal()+"\n"), 0o600); err != nil {
		return err
	}
	for i, b := range plan.Nodes {
		addr, err := netip.ParsePrefix(b.ClusterIPPrefix)
		if err != nil {
			return err
		}
		s.Nodes[i].IP, s.Nodes[i].LoopbackIP = addr.Addr().String(), s.Nodes[i].IP
		configDir := filepath.Dir(s.ClusterConfig(b.NodeName))
		if err := os.MkdirAll(configDir, 0o700); err != nil {
			return err
		}
		files, err := b.Files(configDir, "")
		if err != nil {
			return err
		}
		if err := files.Write(); err != nil {
			return err
		}
	}
	return nil
}

// writeBootFiles writes each node's kubeconfig (the API port of its own
// k3s, https://127.0.0.1:6443 in its namespace: a server's with the admin
// identity k3s writes on a server, a worker's with its node's own) and the
// stand-in's description of the node's side of the site.
func (s *Site) writeBootFiles() error {
	for _, n := range s.Nodes {
		kubeconfig, err := os.ReadFile(s.Kubeconfig())
		if err != nil {
			return err
		}
		conf := sitemode.Node{HostNetns: filepath.Join("/run/netns", s.hostNetns()), APIServer: fmt.Sprintf("127.0.0.1:%d", s.APIPort), ServerCA: s.pki("ca.crt"), ServerCAKey: s.pki("ca.key"),
			NodeKubeconfig: filepath.Join(s.BootDir(n.Name), "node-identity.kubeconfig"), NodeClientCA: s.NodeClientCA(n.Name)}
		identity, err := os.ReadFile(s.NodeKubeconfig(n.Name))
		if err != nil {
			return err
		}
		identity = []byte(strings.Replace(string(identity), fmt.Sprintf("https://127.0.0.1:%d", s.APIPort), "https://127.0.0.1:6443", 1))
		if err := os.WriteFile(conf.NodeKubeconfig, identity, 0o600); err != nil {
			return err
		}
		if m, ok := s.EtcdMemberOf(n.Name); ok {
			conf.Etcd = &sitemode.Etcd{CommandFile: s.cmdFile(etcdProcess(n.Name)), PIDFile: s.pidFile(etcdProcess(n.Name)),
				LogFile: filepath.Join(s.Dir, "logs", etcdProcess(n.Name)+".log"), Client: strings.TrimPrefix(m.ClientURL(), "http://")}
			for _, other := range s.Etcd {
				conf.Etcd.Members = append(conf.Etcd.Members, strings.TrimPrefix(other.ClientURL(), "http://"))
			}
		} else if kubeconfig, err = os.ReadFile(s.NodeKubeconfig(n.Name)); err != nil {
			return err
		}
		kubeconfig = []byte(strings.Replace(string(kubeconfig), fmt.Sprintf("https://127.0.0.1:%d", s.APIPort), "https://127.0.0.1:6443", 1))
		if err := os.WriteFile(filepath.Join(s.BootDir(n.Name), "kubeconfig"), kubeconfig, 0o600); err != nil {
			return err
		}
		data, err := json.MarshalIndent(conf, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(s.BootDir(n.Name), "standin.json"), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// netnsExists reports whether a named namespace exists.
func netnsExists(name string) bool {
	_, err := os.Stat(filepath.Join("/run/netns", name))
	return err == nil
}

// makeLAN names the machine's namespace and makes the LAN's bridge
// namespace and every node's namespace.
func (s *Site) makeLAN() error {
	if !netnsExists(s.hostNetns()) {
		if err := ipCmd("netns", "attach", s.hostNetns(), strconv.Itoa(os.Getpid())); err != nil {
			return err
		}
	}
	lan := s.lanNetns()
	if !netnsExists(lan) {
		if err := ipCmd("netns", "add", lan); err != nil {
			return err
		}
		if err := ipCmd("-n", lan, "link", "add", "br0", "type", "bridge"); err != nil {
			return err
		}
		if err := ipCmd("-n", lan, "link", "set", "br0", "up"); err != nil {
			return err
		}
	}
	for i := range s.Nodes {
		if err := s.bootNetns(i); err != nil {
			return err
		}
	}
	return nil
}

// bootNetns makes the i-th node's namespace as a device's network is when
// it boots: eth1 up on the LAN, no address, no firewall table.
func (s *Site) bootNetns(i int) error {
	ns := s.Netns(s.Nodes[i].Name)
	if netnsExists(ns) {
		return nil
	}
	port := "p" + strconv.Itoa(i)
	for _, args := range [][]string{
		{"netns", "add", ns},
		// Made in the namespaces themselves: the machine's never sees it.
		{"link", "add", port, "netns", s.lanNetns(), "type", "veth", "peer", "name", clusterInterface, "netns", ns},
		{"-n", s.lanNetns(), "link", "set", port, "master", "br0", "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "link", "set", clusterInterface, "up"},
	} {
		if err := ipCmd(args...); err != nil {
			return err
		}
	}
	return nil
}

// dropNetns deletes the i-th node's namespace with its LAN port (deleted
// first: a namespace goes away in the background, its port with it, and a
// power-on right after must find the name free).
func (s *Site) dropNetns(i int) error {
	ns := s.Netns(s.Nodes[i].Name)
	if !netnsExists(ns) {
		return nil
	}
	if netnsExists(s.lanNetns()) {
		_ = ipCmd("-n", s.lanNetns(), "link", "del", "p"+strconv.Itoa(i))
	}
	return ipCmd("netns", "del", ns)
}

// dropLAN deletes every namespace of the site.
func (s *Site) dropLAN() error {
	var errs []error
	for i := range s.Nodes {
		errs = append(errs, s.dropNetns(i))
	}
	if netnsExists(s.lanNetns()) {
		errs = append(errs, ipCmd("netns", "del", s.lanNetns()))
	}
	// Only the name: the machine's namespace stays as it is.
	if netnsExists(s.hostNetns()) {
		errs = append(errs, ipCmd("netns", "del", s.hostNetns()))
	}
	return errors.Join(errs...)
}

// startBootAgents starts every node's agent in its namespace, the seed
// last, as on a site where it is the last device to boot: the joiners'
// wait for its /status is then there to see.
func (s *Site) startBootAgents(sitecon, appsDir string, timings AgentTimings) error {
	if s.K3sStandin == "" {
		return errors.New("bootstrap mode runs the k3s stand-in as each node's k3s: set Site.K3sStandin (sitebox up --k3s-standin)")
	}
	standin, err := filepath.Abs(s.K3sStandin)
	if err != nil {
		return err
	}
	// A sitecon built with the clock overlay reads its node's clock step
	// (StepClock); its k3s inherits the variable.
	clocked, err := clockstep.Reads(sitecon)
	if err != nil {
		return err
	}
	order := slices.Clone(s.Nodes)
	slices.Reverse(order)
	for _, n := range order {
		i := slices.IndexFunc(s.Nodes, func(m Node) bool { return m.Name == n.Name })
		boot := s.BootDir(n.Name)
		env := []string{sitemode.Env + "=" + filepath.Join(boot, "standin.json")}
		if clocked {
			env = append(env, clockstep.EnvVar+"="+s.clockStepFile(n.Name))
		}
		args := append(append([]string{"netns", "exec", s.Netns(n.Name), "env"}, env...),
			sitecon, "agent", "--config", s.ClusterConfig(n.Name),
			"--k3s-bin", standin, "--k3s-config", filepath.Join(boot, "k3s", "config.yaml"),
			"--k3s-data-dir", s.K3sDataDir(n.Name), "--k3s-log", filepath.Join(s.Dir, "logs", "k3s-"+n.Name+".log"),
			"--k3s-run-dir", filepath.Join(boot, "run", "k3s"), "--kubelet-dir", filepath.Join(boot, "kubelet"),
			"--pod-log-dir", s.PodLogDir(n.Name),
			"--kubeconfig", filepath.Join(boot, "kubeconfig"),
			"--apps-dir", appsDir, "--state-dir", s.StateDir(n.Name),
			"--socket", s.AgentSocket(n.Name),
			// Its own loopback: every node's agent may take the default port.
			"--metrics-addr", "127.0.0.1:9812",
			"--move-after", timings.MoveAfter.String(), "--failover-timeout", timings.FailoverTimeout.String(),
			// The fence is on, as on a device: the leader lets a lost
			// node's pods go only when that node fences (kwok's pods
			// run no process here, so it stops nothing).
			"--log-file", filepath.Join(s.Dir, "logs", "agent-"+n.Name+".log"),
		)
		// Where k3s serves its etcd on a server (the stand-in relays it).
		if _, ok := s.EtcdMemberOf(n.Name); ok {
			args = append(args, "--etcd-endpoint", "http://127.0.0.1:2379")
		} else {
			args = append(args, "--etcd-endpoint=")
		}
		if err := s.bootNetns(i); err != nil {
			return err
		}
		if err := s.mountStateDisk(n.Name); err != nil {
			return err
		}
		if err := s.StartProcess(agentProcess(n.Name), "ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// killK3s kills a bootstrap-mode node's k3s stand-in (SIGKILL), found by
// the PID file its agent keeps; a PID that no longer names a process of
// this site is left alone.
func (s *Site) killK3s(node string) error {
	pid := s.k3sPID(node)
	if pid == 0 {
		return nil
	}
	if !signalExit(pid, syscall.SIGKILL, 5*time.Second) {
		return fmt.Errorf("%s's k3s (pid %d) did not exit", node, pid)
	}
	return nil
}

// k3sPID is the PID of a bootstrap-mode node's k3s stand-in, from the PID
// file its agent keeps; 0 when none runs, or the PID no longer names a
// process of this site.
func (s *Site) k3sPID(node string) int {
	data, err := os.ReadFile(filepath.Join(s.K3sDataDir(node), "sitecon-k3s.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0
	}
	if cmdline, ok := liveCmdline(pid); !ok || !strings.Contains(string(cmdline), s.Dir) {
		return 0
	}
	return pid
}

// powerOffBoot cuts the power of bootstrap-mode nodes at once: every
// node's etcd member, k3s, agent and kubelet die by SIGKILL, then each
// node's network goes with its namespace.
func (s *Site) powerOffBoot(nodes ...string) error {
	var errs []error
	for _, node := range nodes {
		errs = append(errs, s.kill(etcdProcess(node)), s.killK3s(node), s.kill(agentProcess(node)), s.stopKubeletFront(node, true), s.kill("kwok-"+node), s.endRuntime(node))
	}
	for _, node := range nodes {
		errs = append(errs, s.dropNetns(slices.IndexFunc(s.Nodes, func(n Node) bool { return n.Name == node })))
	}
	return errors.Join(errs...)
}

// powerOnBoot boots a bootstrap-mode node: its namespace bare, its kubelet,
// its agent (which brings up the address, /status, k3s and with it the
// etcd member, as its bring-up decides). Nothing for a node that runs.
func (s *Site) powerOnBoot(node string) error {
	i := slices.IndexFunc(s.Nodes, func(n Node) bool { return n.Name == node })
	if f, err := s.StagedFaults(); err != nil {
		return err
	} else if !netnsExists(s.Netns(node)) && (f.cutGroup(node) != nil || len(f.Paused[node]) > 0) {
		return fmt.Errorf("node %s is cut off or paused (sitebox heal first): a device booting into a staged fault is not staged here", node)
	}
	if err := s.bootNetns(i); err != nil {
		return err
	}
	// A new boot, with an ID of its own, which its kubelet reports.
	if !s.running("kwok-" + node) {
		if err := config.WriteFileAtomic(s.bootIDFile(node), []byte(string(uuid.NewUUID())+"\n"), 0o644); err != nil {
			return err
		}
	}
	if err := s.startKubelet(s.Nodes[i]); err != nil {
		return err
	}
	return s.restart(agentProcess(node))
}
