// Package sitebox runs a real Kubernetes control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler) on loopback with one kwok process per
// simulated node, installs the real Longhorn and KubeVirt CRDs, and injects node
// failures. It is test and demo infrastructure: nothing in the product imports it.
package sitebox

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Versions of the control plane sitebox runs; build/build.sh builds the same.
const (
	K8sVersion  = "v1.34.4"
	EtcdVersion = "v3.6.4"
	KwokVersion = "v0.8.0"
	// KubeletVersion is what the simulated nodes report: the k3s line EVE ships.
	KubeletVersion = "v1.34.4+k3s1"

	// minFreeBytes is the disk space a site needs to start: each etcd
	// member's WAL (64 MiB preallocated) and database, and the logs.
	minFreeBytes = 512 << 20

	// EtcdMembers is how many of the site's nodes run an etcd member (the
	// first ones): the servers of an edge-node cluster. Later nodes are
	// k3s agents.
	EtcdMembers = 3

	serviceClusterIP    = "10.43.0.1"
	serviceClusterRange = "10.43.0.0/16"
)

//go:embed crds/longhorn.yaml
var longhornCRDs []byte

//go:embed crds/kubevirt.yaml
var kubevirtCRDs []byte

// multusCRDs is Multus's NetworkAttachmentDefinition, which sitecon's
// Ethernet passthrough writes.
//
//go:embed crds/multus.yaml
var multusCRDs []byte

//go:embed kwok/stages.yaml
var kwokStages []byte

// Options say what site to start.
type Options struct {
	// Dir holds the site's certificates, data, logs, PIDs and kubeconfig.
	Dir string
	// Nodes is the number of simulated nodes (node-a, node-b, ...).
	Nodes int
	// BinDir holds the control-plane binaries; empty: DefaultBinDir().
	BinDir string
	// NodeMonitorGracePeriod is how long the node-lifecycle controller waits for
	// a silent node before marking it Unknown (Kubernetes default: 40s; k3s
	// uses the same). Tests shorten it to see failures quickly.
	NodeMonitorGracePeriod time.Duration
	// NodeLeaseDuration is the kubelet (kwok) node lease duration.
	NodeLeaseDuration time.Duration
	// EvictionToleration is the apiserver's default not-ready/unreachable
	// toleration added to pods that set none (Kubernetes default: 300s).
	EvictionToleration time.Duration
	// AttachDetachSyncPeriod is how often the attach/detach controller
	// checks that the volumes it believes attached still are: how soon it
	// learns that a VolumeAttachment was deleted behind its back
	// (controller-manager --attach-detach-reconcile-sync-period; Kubernetes
	// and k3s default: 1m). Tests shorten it to see a release in seconds.
	AttachDetachSyncPeriod time.Duration
	// ClusterName names the cluster in the sitecon-cluster ConfigMap.
	ClusterName string
	// DieWithParent kills the site's processes if the starting process dies,
	// so a crashed test leaves nothing running.
	DieWithParent bool
	// Simulators tunes the in-process simulators StartTestSite runs.
	Simulators SimulatorOptions
	// Bootstrap runs each node's agent as on a device (bootmode.go): in a
	// network namespace of its own, bootstrapping for real with its own
	// cluster config, and the k3s stand-in as its k3s, which runs the
	// node's etcd member. It needs root and iproute2.
	Bootstrap bool
	// KubeletFronts is a sitebox binary that runs each node's kubelet TLS
	// front (kubeletfront.go) as a site process, so that it outlives the
	// command that started the site; empty: they run in this process, for
	// as long as it runs (tests).
	KubeletFronts string
	// Runtime is a sitebox binary that runs each node's container runtime
	// simulator (runtime.go) as a site process: every pod a node's kubelet
	// runs gets a real process. Empty: pods run no process.
	Runtime string
	// StateDisks: in bootstrap mode, each node's agent state directory is
	// a small disk of its own (disk.go), which FillDisk fills.
	StateDisks bool
}

// Node is one simulated node.
type Node struct {
	Name string `json:"name"`
	UUID string `json:"uuid"`
	IP   string `json:"ip"`
	CIDR string `json:"cidr"`
	// LoopbackIP is, on a bootstrap-mode site, the node's address on this
	// machine's loopback (IP is its cluster address, inside the site's
	// namespaces): its Node's ExternalIP, which the API server prefers
	// when it dials a kubelet, so that nothing it sends leaves the machine.
	LoopbackIP string `json:"loopbackIP,omitempty"`
}

// EtcdMember is one member of the site's etcd cluster, run for one node
// as k3s runs one inside each server. Plain http on loopback: the site's
// processes share one host.
type EtcdMember struct {
	// Name is the member's etcd name: the node's name and a suffix, as
	// k3s names its members (node-a-1a2b3c4d).
	Name       string `json:"name"`
	Node       string `json:"node"`
	ClientPort int    `json:"clientPort"`
	PeerPort   int    `json:"peerPort"`
}

// ClientURL is where the member serves etcd clients.
func (m EtcdMember) ClientURL() string { return fmt.Sprintf("http://127.0.0.1:%d", m.ClientPort) }

// PeerURL is where the member talks to the other members.
func (m EtcdMember) PeerURL() string { return fmt.Sprintf("http://127.0.0.1:%d", m.PeerPort) }

// State is what a running site records in DIR/site.json, so that later
// commands (fail, recover, down) act on the same processes.
type State struct {
	Dir    string `json:"dir"`
	BinDir string `json:"binDir"`
	// Etcd are the etcd members, one per server node.
	Etcd                   []EtcdMember `json:"etcd"`
	APIPort                int          `json:"apiPort"`
	Nodes                  []Node       `json:"nodes"`
	NodeLeaseSeconds       int          `json:"nodeLeaseSeconds"`
	NodeMonitorGracePeriod string       `json:"nodeMonitorGracePeriod"`
	EvictionToleration     int          `json:"evictionTolerationSeconds"`
	AttachDetachSyncPeriod string       `json:"attachDetachSyncPeriod,omitempty"`
	ClusterName            string       `json:"clusterName"`
	ClusterID              string       `json:"clusterID"`
	DieWithParent          bool         `json:"dieWithParent,omitempty"`
	// Bootstrap: the site's agents bootstrap for real (bootmode.go).
	Bootstrap bool `json:"bootstrap,omitempty"`
	// KubeletFronts: the binary that runs the nodes' kubelet fronts as
	// site processes; empty: they run in the process that started them.
	KubeletFronts string `json:"kubeletFronts,omitempty"`
	// Runtime: the binary that runs the nodes' container runtime
	// simulators (runtime.go); empty: none.
	Runtime string `json:"runtime,omitempty"`
	// StateDisks: the agents' state directories are disks of their own.
	StateDisks bool `json:"stateDisks,omitempty"`
}

// Site is a started (or loaded) sitebox.
type Site struct {
	State
	// SilenceHolder is a sitebox binary (its hidden silence command) that
	// holds a failed node's address silent as a site process; empty: held
	// in this process, for as long as it runs (tests).
	SilenceHolder string
	// K3sStandin is the k3s stand-in binary (test/k3sstandin) a
	// bootstrap-mode site's agents run as their k3s.
	K3sStandin string
	// AgentAppLogsDir, when set, has StartAgents' agents collect their
	// node's apps' logs there (--app-logs-dir DIR/NODE), as the demo's do.
	AgentAppLogsDir string
	// exited holds, per PID this process started, a channel closed once the
	// process has exited and its end is written to its log.
	exitedMu sync.Mutex
	exited   map[int]chan struct{}
	// holes are the failed nodes' addresses held silent in this process.
	holesMu sync.Mutex
	holes   map[string]*heldSilence
	// fronts are the nodes' kubelet fronts run in this process.
	frontsMu sync.Mutex
	fronts   map[string]*kubeletFront
	// restarts counts the restarts that leave the site's watches on
	// client-go's backoff: the API server's (StartAPIServer) and a node's
	// (PowerOn, Recover: its kubelet starts anew, perhaps while etcd has
	// no quorum). A test's hand-over (TestSite.WaitSettled) proves the
	// kubelets and simulators live again after each.
	restarts atomic.Int64
}

// DefaultBinDir is where build/build.sh caches the control-plane binaries:
// $SITEBOX_BIN, else under the user's cache directory.
func DefaultBinDir() string {
	if d := os.Getenv("SITEBOX_BIN"); d != "" {
		return d
	}
	cache := os.Getenv("SITEBOX_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = filepath.Join(os.TempDir(), "cache")
		}
		cache = filepath.Join(base, "sitecon", "sitebox")
	}
	return filepath.Join(cache, fmt.Sprintf("k8s-%s-etcd-%s-kwok-%s", K8sVersion, EtcdVersion, KwokVersion), "bin")
}

// MaxNodes is the most simulated nodes a site runs: the largest
// scale is 30, and each node takes one address of the site's /24.
const MaxNodes = 64

// AgentMetricsPort is the port a site agent serves its metrics on, on its
// node's own address: sites side by side (tests run in parallel) never
// share one, as they would share 127.0.0.1's.
const AgentMetricsPort = 9812

// MetricsAddr is where the node's site agent serves its metrics.
func (n Node) MetricsAddr() string {
	return net.JoinHostPort(n.IP, strconv.Itoa(AgentMetricsPort))
}

// NodeName is the name of the i-th simulated node: node-a to node-z, then
// node-aa, node-ab, ... (the order the names sort in is not the nodes').
func NodeName(i int) string {
	if i < 26 {
		return "node-" + string(rune('a'+i))
	}
	return "node-" + string(rune('a'+i/26-1)) + string(rune('a'+i%26))
}

// NodeUUID is a stable UUID for a node name, so configs naming a node's UUID
// (an app's designated node) stay valid across site restarts.
func NodeUUID(name string) string {
	h := sha1.Sum([]byte("sitebox/" + name))
	h[6] = (h[6] & 0x0f) | 0x50 // version 5
	h[8] = (h[8] & 0x3f) | 0x80 // RFC 4122 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// Kubeconfig is the admin kubeconfig of the site.
func (s *Site) Kubeconfig() string { return filepath.Join(s.Dir, "kubeconfig") }

// K3sControllerKubeconfig reaches the site as k3s's controller identity
// (system:k3s-controller), the way a k3s agent node's own kubeconfig does.
func (s *Site) K3sControllerKubeconfig() string {
	return filepath.Join(s.Dir, "k3scontroller.kubeconfig")
}

// NodeDataDirs holds, per node, the part of a k3s data dir that carries
// the node's own identity: DIR/nodes/NAME/agent/{client-kubelet.crt,
// client-kubelet.key,server-ca.crt,kubelet.kubeconfig}, as k3s writes them
// under <data-dir>/agent on every node it admits.
func (s *Site) NodeDataDirs() string { return filepath.Join(s.Dir, "nodes") }

// NodeKubeconfig reaches the site as node's own identity (system:node:NAME
// in group system:nodes): what a worker node's agent holds on a device.
func (s *Site) NodeKubeconfig(node string) string {
	return filepath.Join(s.NodeDataDirs(), node, "agent", "kubelet.kubeconfig")
}

// NodeClientCA is the CA that issued the nodes' identities, in node's
// data dir as k3s keeps it (client-ca.crt beside the kubeconfig).
func (s *Site) NodeClientCA(node string) string {
	return filepath.Join(s.NodeDataDirs(), node, "agent", "client-ca.crt")
}

// RESTConfig returns an admin config for the site.
func (s *Site) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig())
	if err != nil {
		return nil, err
	}
	// Longhorn's CRDs draw "unrecognized format" warnings on every write.
	cfg.WarningHandler = rest.NoWarnings{}
	return cfg, nil
}

// Up starts a site and returns once the API server is ready, the CRDs are
// established and every node is Ready. The processes keep running after Up
// returns; Down stops them.
func Up(ctx context.Context, opts Options) (_ *Site, err error) {
	if opts.Nodes < 1 || opts.Nodes > MaxNodes {
		return nil, fmt.Errorf("--nodes must be between 1 and %d, got %d", MaxNodes, opts.Nodes)
	}
	if opts.Dir == "" {
		return nil, errors.New("a site directory is required (--dir)")
	}
	if opts.Bootstrap {
		if err := checkBootstrapHost(); err != nil {
			return nil, err
		}
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if prev, err := Load(dir); err == nil {
		if prev.running("kube-apiserver") {
			return nil, fmt.Errorf("a site is already running in %s: run 'sitebox down --dir %s' first", dir, dir)
		}
		// A half-dead earlier site (a crash between its starts) may have left
		// processes behind: stop them before their PID files are wiped.
		_ = prev.Down()
	}
	bin := opts.BinDir
	if bin == "" {
		bin = DefaultBinDir()
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("control-plane binary %s missing in %s: run 'make sitebox' (it builds them once)", b, bin)
		}
	}
	// A previous site's data in the same directory would resurrect its objects.
	for _, sub := range []string{"etcd", "pki", "nodes", "logs", "run", "boot", "state", "podlogs"} {
		if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
			return nil, err
		}
	}
	for _, sub := range []string{"logs", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	// A full disk makes etcd exit at once (it preallocates a 64 MiB WAL):
	// say that, not "etcd exited".
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err == nil {
		if free := fs.Bavail * uint64(fs.Bsize); free < minFreeBytes {
			return nil, fmt.Errorf("only %d MiB free on the filesystem of %s; a site needs %d MiB (etcd preallocates its WAL): free some space", free>>20, dir, minFreeBytes>>20)
		}
	}
	withDefault := func(d, def time.Duration) time.Duration {
		if d <= 0 {
			return def
		}
		return d
	}
	members := min(opts.Nodes, EtcdMembers)
	ports, err := freePorts(1 + 2*members)
	if err != nil {
		return nil, err
	}
	// The nodes' cluster addresses are on this machine: the agents'
	// failover guard dials them.
	nodeNetwork, err := pickNodeNetwork(opts.Nodes)
	if err != nil {
		return nil, err
	}
	clusterName := opts.ClusterName
	if clusterName == "" {
		clusterName = "sitebox"
	}
	site := &Site{State: State{
		Dir:                    dir,
		BinDir:                 bin,
		APIPort:                ports[0],
		NodeLeaseSeconds:       int(withDefault(opts.NodeLeaseDuration, 40*time.Second).Seconds()),
		NodeMonitorGracePeriod: withDefault(opts.NodeMonitorGracePeriod, 40*time.Second).String(),
		EvictionToleration:     int(withDefault(opts.EvictionToleration, 300*time.Second).Seconds()),
		AttachDetachSyncPeriod: withDefault(opts.AttachDetachSyncPeriod, time.Minute).String(),
		ClusterName:            clusterName,
		ClusterID:              randomUUID(),
		DieWithParent:          opts.DieWithParent,
		Bootstrap:              opts.Bootstrap,
		KubeletFronts:          opts.KubeletFronts,
		Runtime:                opts.Runtime,
		StateDisks:             opts.StateDisks && opts.Bootstrap,
	}}
	for i := range opts.Nodes {
		name := NodeName(i)
		site.Nodes = append(site.Nodes, Node{
			Name: name,
			UUID: NodeUUID(name),
			// On loopback, where the node's agent answers /status and
			// its proof of life (StartAgents, or a test's own agent).
			IP:   nodeAddr(nodeNetwork, i).String(),
			CIDR: fmt.Sprintf("10.42.%d.0/24", i),
		})
		if i < members {
			site.Etcd = append(site.Etcd, EtcdMember{
				Name: name + "-" + NodeUUID(name)[:8], Node: name,
				ClientPort: ports[1+2*i], PeerPort: ports[2+2*i],
			})
		}
	}
	defer func() {
		if err != nil {
			_ = site.Down()
		}
	}()
	if err := (pki{dir: filepath.Join(dir, "pki")}).generate(site.Nodes); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	if err := site.writeFiles(); err != nil {
		return nil, err
	}
	if err := site.writeClusterToken(); err != nil {
		return nil, err
	}
	if site.Bootstrap {
		if err := site.planBootstrap(); err != nil {
			return nil, err
		}
		if err := site.writeBootFiles(); err != nil {
			return nil, err
		}
	}
	if err := site.save(); err != nil {
		return nil, err
	}
	if err := site.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := site.startAPIServer(ctx); err != nil {
		return nil, err
	}
	cfg, err := site.RESTConfig()
	if err != nil {
		return nil, err
	}
	if err := site.startControllers(); err != nil {
		return nil, err
	}
	if err := site.bootstrapObjects(ctx, cfg); err != nil {
		return nil, err
	}
	for _, n := range site.Nodes {
		if err := site.startKubelet(n); err != nil {
			return nil, err
		}
	}
	if err := site.waitNodesReady(ctx, cfg); err != nil {
		return nil, err
	}
	if site.Bootstrap {
		if err := site.makeLAN(); err != nil {
			return nil, err
		}
	}
	return site, nil
}

// Load reads the state of a site started earlier in dir.
func Load(dir string) (*Site, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(dir, "site.json"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no site in %s (start one with 'sitebox up --dir %s')", dir, dir)
		}
		return nil, err
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("%s/site.json: %w", dir, err)
	}
	return &Site{State: st}, nil
}

func (s *Site) save() error {
	data, err := json.MarshalIndent(s.State, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.Dir, "site.json"), data, 0o644)
}

func (s *Site) pki(name string) string { return filepath.Join(s.Dir, "pki", name) }

func (s *Site) writeFiles() error {
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: sitebox
  cluster:
    server: https://127.0.0.1:%d
    certificate-authority: %s
users:
- name: admin
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: sitebox
  context: {cluster: sitebox, user: admin}
current-context: sitebox
`, s.APIPort, s.pki("ca.crt"), s.pki("admin.crt"), s.pki("admin.key"))
	if err := os.WriteFile(s.Kubeconfig(), []byte(kubeconfig), 0o600); err != nil {
		return err
	}
	controller := strings.NewReplacer(s.pki("admin.crt"), s.pki("k3s-controller.crt"), s.pki("admin.key"), s.pki("k3s-controller.key"),
		"name: admin", "name: k3s-controller", "user: admin}", "user: k3s-controller}").Replace(kubeconfig)
	if err := os.WriteFile(s.K3sControllerKubeconfig(), []byte(controller), 0o600); err != nil {
		return err
	}
	if err := s.writeNodeIdentities(); err != nil {
		return err
	}
	logsConfig, err := s.kwokLogsConfig()
	if err != nil {
		return err
	}
	// kwok needs its parallelism spelled out when run standalone.
	kwokConfig := fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeLeaseDurationSeconds: %d
  nodeLeaseParallelism: 2
  podPlayStageParallelism: 4
  nodePlayStageParallelism: 2
  podsOnNodeSyncParallelism: 2
  enablePodsOnNodeSyncListPager: true
  # The kubelet API (container logs): kubelet.go.
  enableDebuggingHandlers: true
---
%s
---
%s`, s.NodeLeaseSeconds, kwokStages, logsConfig)
	return os.WriteFile(filepath.Join(s.Dir, "kwok.yaml"), []byte(kwokConfig), 0o644)
}

// writeNodeIdentities lays out each node's identity as k3s keeps it in
// the agent directory of its data dir. The kubeconfig carries the
// certificates inline, so the directory can be copied into a stand-in's
// data dir as it is.
func (s *Site) writeNodeIdentities() error {
	ca, err := os.ReadFile(s.pki("ca.crt"))
	if err != nil {
		return err
	}
	for _, n := range s.Nodes {
		dir := filepath.Dir(s.NodeKubeconfig(n.Name))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		cert, err := os.ReadFile(s.pki("node-" + n.Name + ".crt"))
		if err != nil {
			return err
		}
		key, err := os.ReadFile(s.pki("node-" + n.Name + ".key"))
		if err != nil {
			return err
		}
		kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:%d
    certificate-authority-data: %s
users:
- name: user
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: local
  context: {cluster: local, user: user}
current-context: local
`, s.APIPort, base64.StdEncoding.EncodeToString(ca), base64.StdEncoding.EncodeToString(cert), base64.StdEncoding.EncodeToString(key))
		for name, data := range map[string][]byte{
			"client-kubelet.crt": cert, "client-kubelet.key": key, "server-ca.crt": ca, "kubelet.kubeconfig": []byte(kubeconfig),
			// The CA that issued the nodes' identities, which each
			// node's agent checks its peers' signed word against
			// (sitebox's one CA issues every certificate).
			"client-ca.crt": ca,
		} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Site) node(name string) (Node, error) {
	var names []string
	for _, n := range s.Nodes {
		if n.Name == name {
			return n, nil
		}
		names = append(names, n.Name)
	}
	return Node{}, fmt.Errorf("unknown node %q (this site has %s)", name, strings.Join(names, ", "))
}
