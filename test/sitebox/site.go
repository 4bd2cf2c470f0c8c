// Package sitebox runs a real Kubernetes control plane (etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler) on loopback with one kwok process per
// simulated node, installs the real Longhorn and KubeVirt CRDs, and injects node
// failures. It is test and demo infrastructure: nothing in the product imports it.
package sitebox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha1"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/sitecon/sitecon/kube"
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
	// exited holds, per PID this process started, a channel closed once the
	// process has exited and its end is written to its log.
	exitedMu sync.Mutex
	exited   map[int]chan struct{}
	// holes are the failed nodes' addresses held silent in this process.
	holesMu sync.Mutex
	holes   map[string]*heldSilence
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

// NodeName is the name of the i-th simulated node: node-a, node-b, ...
func NodeName(i int) string { return "node-" + string(rune('a'+i)) }

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
	if opts.Nodes < 1 || opts.Nodes > 26 {
		return nil, fmt.Errorf("--nodes must be between 1 and 26, got %d", opts.Nodes)
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
	for _, sub := range []string{"etcd", "pki", "nodes", "logs", "run", "boot", "state"} {
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
	var names []string
	for _, n := range site.Nodes {
		names = append(names, n.Name)
	}
	if err := (pki{dir: filepath.Join(dir, "pki")}).generate(names); err != nil {
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
		if err := site.startKwok(n); err != nil {
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
---
%s`, s.NodeLeaseSeconds, kwokStages)
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
		} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// startEtcd starts every member at once (a new cluster forms only once a
// quorum of its members runs) and waits until each serves with a leader.
func (s *Site) startEtcd(ctx context.Context) error {
	var initial []string
	for _, m := range s.Etcd {
		initial = append(initial, m.Name+"="+m.PeerURL())
	}
	for _, m := range s.Etcd {
		if err := s.start(etcdProcess(m.Node),
			"--name="+m.Name,
			"--data-dir="+filepath.Join(s.Dir, "etcd", m.Node),
			"--listen-client-urls="+m.ClientURL(), "--advertise-client-urls="+m.ClientURL(),
			"--listen-peer-urls="+m.PeerURL(), "--initial-advertise-peer-urls="+m.PeerURL(),
			"--initial-cluster="+strings.Join(initial, ","),
			// The token keeps a member from joining another site's
			// cluster on a reused port. A restart (Recover) keeps its
			// data directory, and etcd ignores the initial-* flags then.
			"--initial-cluster-token="+s.ClusterID,
			"--initial-cluster-state=new",
			"--listen-metrics-urls=",
			"--log-level=warn",
			// Test data: losing it on a host crash costs nothing, and fsync is
			// most of etcd's latency on a shared disk.
			"--unsafe-no-fsync",
			// k3s's own timings (500 ms, 5 s) would make a lost leader
			// cost the API server seconds; etcd's defaults (100 ms, 1 s)
			// risk elections when the three members, the API server and
			// the tests share two busy cores. In between:
			"--heartbeat-interval=250", "--election-timeout=2500",
		); err != nil {
			return err
		}
	}
	for _, m := range s.Etcd {
		if err := s.waitHTTP(ctx, etcdProcess(m.Node), m.ClientURL()+"/health", nil); err != nil {
			return err
		}
	}
	return nil
}

// etcdProcess names the site process of a node's etcd member.
func etcdProcess(node string) string { return "etcd-" + node }

// EtcdEndpoints are the client URLs of every member.
func (s *Site) EtcdEndpoints() []string {
	var out []string
	for _, m := range s.Etcd {
		out = append(out, m.ClientURL())
	}
	return out
}

// EtcdMemberOf is the etcd member the node runs; false for a node without one.
func (s *Site) EtcdMemberOf(node string) (EtcdMember, bool) {
	for _, m := range s.Etcd {
		if m.Node == node {
			return m, true
		}
	}
	return EtcdMember{}, false
}

func (s *Site) startAPIServer(ctx context.Context) error {
	tol := strconv.Itoa(s.EvictionToleration)
	args := []string{
		"--etcd-servers=" + strings.Join(s.EtcdEndpoints(), ","),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", s.APIPort),
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + s.pki("apiserver.crt"), "--tls-private-key-file=" + s.pki("apiserver.key"),
		"--client-ca-file=" + s.pki("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + s.pki("sa.pub"),
		"--service-account-signing-key-file=" + s.pki("sa.key"),
		"--service-cluster-ip-range=" + serviceClusterRange,
		"--authorization-mode=Node,RBAC",
		// As k3s runs its API server: a kubelet's identity changes only
		// its own Node and the pods bound to it.
		"--enable-admission-plugins=NodeRestriction",
		// k3s allows privileged pods (KubeVirt's and Longhorn's need it).
		"--allow-privileged=true",
		"--default-not-ready-toleration-seconds=" + tol,
		"--default-unreachable-toleration-seconds=" + tol,
		"--profiling=false",
	}
	if s.Bootstrap {
		// A bootstrap-mode node's InternalIP is its cluster address, in
		// the site's namespaces: the API server dials its loopback one.
		args = append(args, "--kubelet-preferred-address-types=ExternalIP,InternalIP,Hostname")
	}
	if err := s.start("kube-apiserver", args...); err != nil {
		return err
	}
	tlsCfg, err := s.adminTLS()
	if err != nil {
		return err
	}
	return s.waitHTTP(ctx, "kube-apiserver", fmt.Sprintf("https://127.0.0.1:%d/readyz", s.APIPort), tlsCfg)
}

func (s *Site) adminTLS() (*http.Transport, error) {
	cfg, err := s.RESTConfig()
	if err != nil {
		return nil, err
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	return &http.Transport{TLSClientConfig: tlsConfig}, nil
}

func (s *Site) startControllers() error {
	kubeconfig := "--kubeconfig=" + s.Kubeconfig()
	if err := s.start("kube-controller-manager", kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--service-account-private-key-file="+s.pki("sa.key"),
		"--root-ca-file="+s.pki("ca.crt"),
		"--cluster-signing-cert-file="+s.pki("ca.crt"),
		"--cluster-signing-key-file="+s.pki("ca.key"),
		"--use-service-account-credentials=false",
		"--node-monitor-grace-period="+s.NodeMonitorGracePeriod,
		"--node-monitor-period=1s",
		// The attach/detach controller runs as in k3s (it is on by
		// default): it attaches Longhorn volumes through VolumeAttachments
		// on nodes that ask for it, and holds a volume on a lost node that
		// last reported it in use. Only how often it re-reads the
		// VolumeAttachments is the site's to choose.
		"--attach-detach-reconcile-sync-period="+cmp.Or(s.AttachDetachSyncPeriod, "1m0s"),
		"--profiling=false",
	); err != nil {
		return err
	}
	return s.start("kube-scheduler", kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--profiling=false",
	)
}

func (s *Site) kwokArgs(n Node) []string {
	return []string{
		"--kubeconfig=" + s.Kubeconfig(),
		"--config=" + filepath.Join(s.Dir, "kwok.yaml"),
		"--manage-single-node=" + n.Name,
		"--node-ip=" + n.IP,
		"--cidr=" + n.CIDR,
		"--node-lease-duration-seconds=" + strconv.Itoa(s.NodeLeaseSeconds),
	}
}

func (s *Site) startKwok(n Node) error {
	return s.start("kwok-"+n.Name, s.kwokArgs(n)...)
}

// bootstrapObjects creates what a k3s cluster with Longhorn and KubeVirt has
// before sitecon looks at it: namespaces, CRDs, the simulated nodes, the
// kube-vip Lease and the sitecon-cluster ConfigMap formation would write.
func (s *Site) bootstrapObjects(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, ns := range []string{"kube-system", "longhorn-system", "kubevirt", "cdi", kube.AppNamespace} {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	if err := installCRDs(ctx, cfg, longhornCRDs, kubevirtCRDs); err != nil {
		return err
	}
	clients, err := kube.NewClients(cfg)
	if err != nil {
		return err
	}
	// Longhorn's driver deployer registers its CSI driver as one that
	// needs attaching: the attach/detach controller attaches its volumes
	// through VolumeAttachments (with no CSIDriver object it would too, as
	// the default; the object says so out loud).
	if _, err := cs.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: longhornProvisioner},
		Spec:       storagev1.CSIDriverSpec{AttachRequired: ptr.To(true), PodInfoOnMount: ptr.To(true)},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("CSIDriver %s: %w", longhornProvisioner, err)
	}
	if err := installKubevirtAdmission(ctx, cs, clients.KubeVirt); err != nil {
		return fmt.Errorf("kubevirt admission simulator: %w", err)
	}
	if err := createSystemWorkloads(ctx, cs); err != nil {
		return err
	}
	for _, n := range s.Nodes {
		if _, err := cs.CoreV1().Nodes().Create(ctx, s.nodeObject(n), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	now := metav1.NewMicroTime(time.Now())
	if _, err := cs.CoordinationV1().Leases(kube.VIPLeaseNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: kube.VIPLeaseName},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(s.Nodes[0].Name),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kube-vip lease: %w", err)
	}
	// A bootstrap-mode site's agents record their cluster themselves.
	if s.Bootstrap {
		return nil
	}
	var names []string
	for _, n := range s.Nodes {
		names = append(names, n.Name)
	}
	_, err = cs.CoreV1().ConfigMaps(kube.AppNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: kube.ClusterConfigMapName},
		Data: map[string]string{
			kube.ClusterKeyName:         s.ClusterName,
			kube.ClusterKeyID:           s.ClusterID,
			kube.ClusterKeyJoinServerIP: s.Nodes[0].IP,
			kube.ClusterKeyVIPAddress:   vipAddr(netip.MustParsePrefix(s.NodePrefix())).String(),
			kube.ClusterKeyNodes:        strings.Join(names, ","),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("cluster configmap: %w", err)
	}
	return nil
}

// nodeObject is a Node as k3s on EVE registers it: a server (control
// plane, etcd) when the site runs an etcd member for it, else an agent.
// Nodes may set their status on create, so capacity and the kubelet version
// are there from the start (kwok keeps what is set).
func (s *Site) nodeObject(n Node) *corev1.Node {
	labels := map[string]string{
		"kubernetes.io/hostname": n.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		kube.LabelNodeUUID:       n.UUID,
		"type":                   "kwok",
	}
	if _, server := s.EtcdMemberOf(n.Name); server {
		labels["node-role.kubernetes.io/control-plane"] = "true"
		labels[kube.LabelEtcd] = "true"
		labels["node-role.kubernetes.io/master"] = "true"
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   n.Name,
			Labels: labels,
			Annotations: map[string]string{
				// kwok manages only nodes carrying this annotation.
				"kwok.x-k8s.io/node": "fake",
				// What a kubelet (k3s's included) sets at registration
				// with --enable-controller-attach-detach (its default): the
				// attach/detach controller attaches and detaches this
				// node's volumes, and manages no node without it.
				ControllerManagedAttachAnnotation: "true",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: n.CIDR},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:              resource.MustParse("4"),
				corev1.ResourceMemory:           resource.MustParse("8Gi"),
				corev1.ResourcePods:             resource.MustParse("110"),
				corev1.ResourceEphemeralStorage: resource.MustParse("128Gi"),
			},
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:              resource.MustParse("4"),
				corev1.ResourceMemory:           resource.MustParse("7Gi"),
				corev1.ResourcePods:             resource.MustParse("110"),
				corev1.ResourceEphemeralStorage: resource.MustParse("120Gi"),
			},
			Addresses: nodeAddresses(n),
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:          KubeletVersion,
				ContainerRuntimeVersion: "containerd://2.0.5-k3s1",
				OperatingSystem:         "linux",
				Architecture:            "amd64",
				OSImage:                 "EVE (sitebox simulated node)",
			},
		},
	}
}

func nodeAddresses(n Node) []corev1.NodeAddress {
	addrs := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.IP}}
	if n.LoopbackIP != "" {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: n.LoopbackIP})
	}
	return append(addrs, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.Name})
}

// installCRDs creates every CRD in the YAML streams and waits until each is established.
func installCRDs(ctx context.Context, cfg *rest.Config, streams ...[]byte) error {
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var names []string
	for _, stream := range streams {
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
		for {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := dec.Decode(&crd); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("decode CRD: %w", err)
			}
			if crd.Name == "" {
				continue
			}
			if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("CRD %s: %w", crd.Name, err)
			}
			names = append(names, crd.Name)
		}
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, name := range names {
			crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			established := false
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					established = true
				}
			}
			if !established {
				return false, nil
			}
		}
		return true, nil
	})
}

func (s *Site) waitNodesReady(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var notReady []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		notReady = notReady[:0]
		for _, n := range s.Nodes {
			node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil || !kube.NodeIsReady(node) {
				notReady = append(notReady, n.Name)
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("nodes not Ready in time: %s (see %s/logs/kwok-*.log)", strings.Join(notReady, ", "), s.Dir)
	}
	return nil
}

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
	if err := s.stop("kwok-" + node); err != nil {
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
	if err := s.startKwok(n); err != nil {
		return err
	}
	if err := s.unsilence(node); err != nil {
		return err
	}
	return s.restart(agentProcess(node))
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
		errs = append(errs, s.kill("kwok-"+node), s.kill(etcdProcess(node)), s.kill(agentProcess(node)))
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
		if err := s.restart(etcdProcess(node)); err != nil {
			return err
		}
	}
	if !s.running("kwok-" + node) {
		if err := s.startKwok(n); err != nil {
			return err
		}
	}
	if err := s.unsilence(node); err != nil {
		return err
	}
	return s.restart(agentProcess(node))
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
	if err := s.restart(etcdProcess(node)); err != nil {
		return err
	}
	// /livez answers without a quorum: the member itself is up.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return s.waitHTTP(ctx, etcdProcess(node), m.ClientURL()+"/livez", nil)
}

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

// controlPlaneProcesses are what one k3s server process runs beside etcd:
// they stop and start together, as a k3s restart or crash stops them.
var controlPlaneProcesses = []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver"}

// StopAPIServer stops the API server with the controller-manager and the
// scheduler, as a k3s restart or a crash does (k3s runs the three in one
// process).
func (s *Site) StopAPIServer() error {
	var errs []error
	for _, name := range controlPlaneProcesses {
		if s.running(name) {
			errs = append(errs, s.stop(name))
		}
	}
	return errors.Join(errs...)
}

// StartAPIServer starts a stopped API server again, waits until it is
// ready, and then starts the controller-manager and the scheduler again. A
// controller left running through the outage would come back on client-go's
// re-list backoff, up to 30 s after the server: started with it, it watches
// from the first moment, as k3s's do.
func (s *Site) StartAPIServer(ctx context.Context) error {
	if s.running("kube-apiserver") {
		return errors.New("kube-apiserver is already running")
	}
	if err := s.startAPIServer(ctx); err != nil {
		return err
	}
	for _, name := range controlPlaneProcesses {
		if name == "kube-apiserver" {
			continue
		}
		if s.running(name) {
			if err := s.stop(name); err != nil {
				return err
			}
		}
		if err := s.restart(name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	s.restarts.Add(1)
	return nil
}

// processOrder is the order Down stops processes in: node simulators and
// controllers first, etcd last, so nothing logs a storm of errors on the way.
func (s *Site) processOrder() []string {
	order := []string{}
	for _, n := range s.Nodes {
		order = append(order, "agent-"+n.Name, silentProcess(n.Name))
	}
	order = append(order, "simulators")
	for _, n := range s.Nodes {
		order = append(order, "kwok-"+n.Name)
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
	}
	for _, name := range s.processOrder() {
		if s.running(name) {
			if err := s.stop(name); err != nil {
				errs = append(errs, err)
			}
		}
		_ = os.Remove(s.pidFile(name))
	}
	if s.Bootstrap {
		// An agent stops its k3s (and that its etcd member) as it ends;
		// one killed earlier may have left its k3s behind.
		for _, n := range s.Nodes {
			errs = append(errs, s.killK3s(n.Name))
		}
		errs = append(errs, s.dropLAN())
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
	if !alive(pid) {
		return 0
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte(s.Dir)) {
		return 0
	}
	return pid
}

func (s *Site) running(name string) bool { return s.pid(name) != 0 }

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || (stat[i+2] != 'Z' && stat[i+2] != 'X')
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

// signalExit sends sig to pid and reports whether it exits within d.
func signalExit(pid int, sig syscall.Signal, d time.Duration) bool {
	_ = syscall.Kill(pid, sig)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return waitExit(ctx, pid)
}

func waitExit(ctx context.Context, pid int) bool {
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return !alive(pid), nil
	})
	return err == nil
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

// createSystemWorkloads stands up the pods a k3s cluster with Longhorn and
// KubeVirt runs in its system namespaces, so per-namespace health has
// something real to count: per-node DaemonSets lose a pod with their node,
// Deployments move.
func createSystemWorkloads(ctx context.Context, cs kubernetes.Interface) error {
	podSpec := func(name string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: name, Image: "registry.local/" + name}}},
		}
	}
	selector := func(name string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	}
	daemonSets := map[string][]string{
		"kube-system":     {"svclb-traefik", "kube-vip"},
		"longhorn-system": {"longhorn-manager", "longhorn-csi-plugin", "engine-image"},
		"kubevirt":        {"virt-handler"},
	}
	for ns, names := range daemonSets {
		for _, name := range names {
			_, err := cs.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       appsv1.DaemonSetSpec{Selector: selector(name), Template: podSpec(name)},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("daemonset %s/%s: %w", ns, name, err)
			}
		}
	}
	deployments := map[string][]string{
		"kube-system":     {"coredns", "metrics-server"},
		"longhorn-system": {"longhorn-driver-deployer"},
		"kubevirt":        {"virt-api", "virt-controller"},
		"cdi":             {"cdi-deployment", "cdi-apiserver"},
	}
	for ns, names := range deployments {
		for _, name := range names {
			_, err := cs.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       appsv1.DeploymentSpec{Replicas: ptr.To[int32](1), Selector: selector(name), Template: podSpec(name)},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("deployment %s/%s: %w", ns, name, err)
			}
		}
	}
	return nil
}
