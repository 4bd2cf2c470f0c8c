package agent

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/agent/applogs"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/bringup"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/configwatch"
	"github.com/sitecon/sitecon/agent/drainrequest"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/nodecred"
	"github.com/sitecon/sitecon/agent/vncbridge"
	"github.com/sitecon/sitecon/agent/workloads"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/nodecheck"
)

// Phase is where bootstrap stands (the bring-up's phases, and the agent's
// own: starting, left, no-bootstrap).
type Phase = bringup.Phase

// Bootstrap phases, in order; PhaseError when the current step keeps
// failing (package bringup says what each means).
const (
	PhaseStarting           = bringup.PhaseStarting
	PhaseWaitingLink        = bringup.PhaseWaitingLink
	PhaseConfiguring        = bringup.PhaseConfiguring
	PhaseWaitingSeed        = bringup.PhaseWaitingSeed
	PhaseCheckingMembership = bringup.PhaseCheckingMembership
	PhaseStartingK3s        = bringup.PhaseStartingK3s
	PhaseJoined             = bringup.PhaseJoined
	PhaseError              = bringup.PhaseError
	PhaseLeft               = bringup.PhaseLeft
	PhaseExternal           = bringup.PhaseExternal
)

// State is what the agent publishes about bootstrap on its local API.
type State struct {
	Node      string   `json:"node"`
	Cluster   string   `json:"cluster,omitempty"`
	ClusterID string   `json:"clusterID,omitempty"`
	Role      k3s.Role `json:"role,omitempty"`
	Phase     Phase    `json:"phase"`
	// Attempts counts tries of the current phase (seed checks, address setup).
	Attempts  int       `json:"attempts"`
	LastError string    `json:"lastError,omitempty"`
	Since     time.Time `json:"since"`
	// ClusterIP is this node's cluster address; ClusterIPReady says it is on
	// the interface and the firewall table is in place.
	ClusterIP      string `json:"clusterIP,omitempty"`
	ClusterIPReady bool   `json:"clusterIPReady"`
	// ConfigError is the last config that failed validation; the agent keeps
	// running what it applied before.
	ConfigError string `json:"configError,omitempty"`
	// ConfigNote says what the agent holds while its config file is
	// missing or cannot be read ("config missing for 12s; leaving in 18s").
	ConfigNote string `json:"configNote,omitempty"`
	// MetricsError says why metrics are not served (the port taken).
	MetricsError string `json:"metricsError,omitempty"`
	K3sStarts    int    `json:"k3sStarts"`
	// SeedAddress is the seed the k3s config joins through when the
	// cluster changed it after formation (sitecon seed).
	SeedAddress string `json:"seedAddress,omitempty"`
	// StateDir is where this agent keeps its records: `sitecon agent
	// leave` writes its request there, and refuses another directory.
	StateDir string `json:"stateDir,omitempty"`
	// Drain is the drain request an on-device service made, where it
	// stands (also on /v1/drain).
	Drain drainrequest.Status `json:"drain"`
}

// Options configure an agent.
type Options struct {
	ConfigPath string
	// StateDir holds the agent's records of this node's place in its
	// cluster (Records): needed unless NoBootstrap. Never the config's
	// directory; created root-only when absent.
	StateDir   string
	K3sBin     string
	K3sPaths   k3s.Paths
	K3sLogFile string
	// Workloads are where k3s runs its containers from, which a node that
	// leaves stops (k3s's own directories by default; DataDir defaults to
	// K3sPaths.DataDir).
	Workloads workloads.Dirs
	// SocketPath is the local API's unix socket; empty: none.
	SocketPath string
	// Kubeconfig reaches this node's cluster; empty: k3s's own kubeconfig
	// once k3s has written it.
	Kubeconfig string
	// LeaderDurations time the stats-leader election (zero: defaults).
	LeaderDurations apps.LeaderDurations
	// RESTConfig, when set, is used instead of Kubeconfig (tests wrap its
	// transport to count requests).
	RESTConfig *rest.Config
	// NoBootstrap runs only the apps part against an existing cluster
	// (Kubeconfig), as NodeName: no address, firewall or k3s work.
	NoBootstrap bool
	NodeName    string
	// With NoBootstrap: the cluster's id and token, for the proof of
	// life (this node's answers and the failover guard's checks of the
	// others'), and StatusAddr, where /status and the proof are served
	// (empty: not served). A device's agent takes all three from its
	// config.
	ClusterID    string
	ClusterToken config.Secret
	StatusAddr   string
	// Apps configures the apps part; it runs when Apps.AppsDir is set.
	Apps apps.Options
	// AppLogs configures the collection of this node's apps' logs
	// (agent/applogs); it runs when AppLogs.Dir is set.
	AppLogs applogs.Options
	// VNCBindAddress is where the consoles of this node's VM apps are
	// served (agent/vncbridge; default 127.0.0.1).
	VNCBindAddress string
	// NodeKubeconfig is this node's own identity, never an admin's: the
	// consoles are opened with it, and the node's word to its peers (its
	// proof of life, that it fenced, that it reaches the API server) is
	// signed with its key (agent/nodecred). Empty: k3s's node kubeconfig
	// (K3sPaths: agent/kubelet.kubeconfig, on servers too); for the
	// consoles, the agent's own when that is its node's (a worker).
	NodeKubeconfig string
	// NodeClientCA is the cluster's client CA, which issued every node's
	// identity: a peer's signed word is checked against it. Empty: k3s's
	// (K3sPaths: agent/client-ca.crt).
	NodeClientCA string
	// Version is this agent's build, as its node report says it.
	Version string
	// NodeChecks makes the node report's own checks (Longhorn's
	// prerequisites, time sync, k3s's certificates); its K3sDataDir
	// defaults to K3sPaths.DataDir, its Host to the running system.
	NodeChecks nodecheck.Checker
	// AddressProbeInterval is how often the agent probes its cluster
	// link for another device holding its cluster address, for its node
	// report (zero: DefaultAddressProbeInterval).
	AddressProbeInterval time.Duration
	// MetricsAddr serves Prometheus metrics (empty: none).
	MetricsAddr string
	Env         config.Environment
	// InNetNS runs host-network work (addresses, firewall, listening,
	// dialling, starting k3s). Tests run it inside a network namespace.
	InNetNS func(func() error) error
	// ConfigPollInterval is how often the config file is checked for change.
	ConfigPollInterval time.Duration
	// ConfigAbsentGrace is how long the config file must be absent before
	// the node leaves the cluster (default 30 s).
	ConfigAbsentGrace time.Duration
	// SeedBackoff bounds the wait between seed checks.
	SeedBackoffMin, SeedBackoffMax time.Duration
	// JoinUnverifiedCA lets a joiner whose token pins no CA join a seed
	// whose agent cannot vouch for the cluster's CA (a seed running an
	// older sitecon), with a warning in the log at every join. Off, such a
	// joiner holds and retries.
	JoinUnverifiedCA bool
	// K3sBackoffMin bounds k3s restarts (tests shorten it).
	K3sBackoffMin time.Duration
	// MembershipTimeout bounds a returning server's question to its peers
	// whether it is still a member (default DefaultMembershipTimeout).
	MembershipTimeout time.Duration
	// LinkWait bounds one wait for the cluster interface's carrier before
	// the address probe and the membership question, retried under the
	// backoff past it (default bringup.DefaultLinkWait; tests shorten it).
	LinkWait time.Duration
	// Etcd reaches this node's etcd member, to publish etcd's member list
	// for the drain preflight's quorum (kube.EtcdPublisher); an empty
	// endpoint publishes nothing. Default: k3s's own endpoint and client
	// certificates (kube.K3sEtcdAccess).
	Etcd nodestate.EtcdAccess
	// AuditLog records the drains the device requests (each attempt, and
	// the uncordon after the boot); one that cannot be opened refuses
	// them.
	AuditLog string
	// DrainAttempts and DrainRetryInterval: a requested drain that is
	// held (the last healthy replica of a volume, etcd quorum) is tried
	// this many times, this far apart (EVE's 5 and 300 s by default).
	DrainAttempts      int
	DrainRetryInterval time.Duration
	Log                *slog.Logger
}

// Agent is the node agent's bootstrap part.
type Agent struct {
	opts Options
	log  *slog.Logger

	// bringUp runs one bring-up per applied config (Run).
	bringUp *bringup.Runner

	// writers are the goroutines that write in the state directories (the
	// fence watch and its publisher, the apps part, the app logs): Run
	// returns only once they have ended, so that nothing of this agent
	// writes there after it (a restart, or a test removing the directory,
	// would race a write).
	writers sync.WaitGroup

	mu      sync.Mutex
	state   State
	applied *config.Validated
	// prefix is the cluster address applied to the interface.
	prefix netip.Prefix
	super  *k3s.Supervisor
	leader *apps.StatsLeader
	apps   *apps.Controller
	// vnc serves this node's VM consoles once the node is in its cluster
	// and its identity is known; vncWhyNot says why not until then.
	vnc       *vncbridge.Bridges
	vncWhyNot error
	// drains runs the drains the device requests.
	drains *drainrequest.Runner
	// etcdSeen is this node's etcd member's view, observed in the
	// background for the node report.
	etcdSeen etcdSeen
	// nodeChecksSeen is the last round of the node checks, served to
	// the reports asked within nodeChecksFresh of it.
	nodeChecksSeen nodeChecksSeen
	// addressSeen is the last ARP probe for this node's cluster address,
	// made in the background for the node report (netreport.go).
	addressSeen addressSeen
	// snap is the cluster cache of the running cluster work: the node
	// report names the nodes last seen in it.
	snap *kube.Snapshot
	// token is since when this node applies its cluster token
	// (tokenage.go), for the node report; nil with no config applied.
	token *nodestate.TokenReport
	// fence is the current bring-up's fence watch (startFence), under mu.
	fence *apps.FenceWatch
	// life is this node's contact with the quorum and its fence, kept by
	// the fence watch and signed into its proof of life.
	life *config.LifeStatus
	// nodeWord signs this node's word to its peers with its own
	// credential and checks theirs (agent/nodecred).
	nodeWord *nodecred.Credential
}

// New prepares an agent.
func New(opts Options) *Agent {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.InNetNS == nil {
		opts.InNetNS = func(fn func() error) error { return fn() }
	}
	if opts.ConfigPollInterval == 0 {
		opts.ConfigPollInterval = 2 * time.Second
	}
	if opts.ConfigAbsentGrace == 0 {
		opts.ConfigAbsentGrace = 30 * time.Second
	}
	if opts.SeedBackoffMin == 0 {
		opts.SeedBackoffMin = time.Second
	}
	if opts.SeedBackoffMax == 0 {
		opts.SeedBackoffMax = 30 * time.Second
	}
	if opts.K3sBin == "" {
		opts.K3sBin = "k3s"
	}
	if opts.K3sPaths == (k3s.Paths{}) {
		opts.K3sPaths = k3s.DefaultPaths
	}
	if opts.NodeChecks.K3sDataDir == "" {
		opts.NodeChecks.K3sDataDir = opts.K3sPaths.DataDir
	}
	if opts.K3sLogFile == "" {
		opts.K3sLogFile = filepath.Join(os.TempDir(), "sitecon-k3s.log")
	}
	if opts.Env.ReadFile == nil {
		opts.Env = config.HostEnvironment()
	}
	if opts.Workloads.DataDir == "" {
		opts.Workloads.DataDir = opts.K3sPaths.DataDir
	}
	opts.Workloads = opts.Workloads.WithDefaults()
	if opts.Etcd == (nodestate.EtcdAccess{}) {
		opts.Etcd = nodestate.K3sEtcdAccess(opts.K3sPaths.DataDir)
	}
	if opts.NodeClientCA == "" {
		opts.NodeClientCA = k3s.ClientCA(opts.K3sPaths)
	}
	a := &Agent{opts: opts, log: opts.Log, state: State{Phase: PhaseStarting, Since: time.Now(), StateDir: opts.StateDir},
		life:     config.NewLifeStatus(!opts.Apps.Fence.Disabled, opts.Apps.EffectiveFailoverTimeout()),
		nodeWord: nodecred.New(cmp.Or(opts.NodeKubeconfig, k3s.NodeKubeconfig(opts.K3sPaths)), opts.NodeClientCA)}
	a.drains = newDrainRunner(opts)
	a.bringUp = bringup.New(bringup.Options{
		Records: a.records(), K3sBin: opts.K3sBin, K3sPaths: opts.K3sPaths, K3sLogFile: opts.K3sLogFile,
		K3sBackoffMin: opts.K3sBackoffMin, Workloads: opts.Workloads, Kubeconfig: opts.Kubeconfig, Etcd: opts.Etcd,
		InNetNS: opts.InNetNS, JoinUnverifiedCA: opts.JoinUnverifiedCA, MembershipTimeout: opts.MembershipTimeout,
		LinkWait: opts.LinkWait, Log: opts.Log, Report: a.nodeReport, Life: a.life, NodeWord: a.nodeWord,
		FailoverTimeout: publishedTimeout(opts.Apps),
	}, bringUpHost{a})
	return a
}

// publishedTimeout is the failover timeout this agent offers as the
// cluster's when the record has none: its own, unless it runs without
// fencing (then none: a timeout no fence derives from is no cluster's).
func publishedTimeout(o apps.Options) time.Duration {
	if o.Fence.Disabled {
		return 0
	}
	return o.EffectiveFailoverTimeout()
}

// records are the agent's records, in its state directory.
func (a *Agent) records() formation.Records { return formation.Records{Dir: a.opts.StateDir} }

// LeaderState is this node's view of the stats-leader election; empty until
// the node can reach its cluster.
func (a *Agent) LeaderState() apps.LeaderState {
	a.mu.Lock()
	leader := a.leader
	a.mu.Unlock()
	if leader == nil {
		return apps.LeaderState{Identity: a.State().Node}
	}
	return leader.State()
}

// State returns the published state.
func (a *Agent) State() State {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.state
	if a.super != nil {
		st.K3sStarts, _ = a.super.Stats()
	}
	st.Drain = a.drains.Status()
	return st
}

func (a *Agent) setPhase(p Phase, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state.Phase != p {
		a.state.Phase, a.state.Since, a.state.Attempts = p, time.Now(), 0
		a.log.Info("bootstrap phase", "phase", p)
	}
	a.state.LastError = ""
	if err != nil {
		a.state.LastError = err.Error()
	}
}

func (a *Agent) attempt(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state.Attempts++
	a.state.LastError = ""
	if err != nil {
		a.state.LastError = err.Error()
	}
}

// Apps is the apps part, nil until the agent reaches its cluster (or when
// no apps directory is configured).
func (a *Agent) Apps() *apps.Controller {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.apps
}

// Run runs the agent until ctx ends: it applies the config, re-reads it when
// it changes, and serves the local API.
func (a *Agent) Run(ctx context.Context) error {
	unlock, err := a.lockInstance()
	if err != nil {
		return err
	}
	defer unlock()
	// The writers end with Run's context, also when Run returns early.
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		a.writers.Wait()
	}()
	// Writes a kill cut off left their temporary files (k3s's config's
	// hold the token); with the lock held nothing of this agent writes yet.
	dirs := []string{a.opts.StateDir, a.opts.Apps.StateDir}
	if a.opts.AppLogs.Dir != "" {
		dirs = append(dirs, filepath.Join(a.opts.AppLogs.Dir, "positions"))
	}
	if !a.opts.NoBootstrap {
		// k3s's config and PID file are the agent's only when it runs k3s.
		p := a.opts.K3sPaths
		dirs = append(dirs, filepath.Dir(p.ConfigFile), p.DropInDir(), p.DataDir)
	}
	slices.Sort(dirs)
	for _, dir := range slices.Compact(dirs) {
		if dir == "" {
			continue
		}
		removed, err := config.RemoveStaleTemps(dir)
		for _, path := range removed {
			a.log.Info("removed the temporary file of a write cut off by the agent's end", "path", path)
		}
		if err != nil {
			a.log.Warn("temporary files of cut-off writes", "dir", dir, "err", err)
		}
	}
	if a.opts.SocketPath != "" {
		srv, err := a.serveLocalAPI()
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	if a.opts.MetricsAddr != "" {
		if a.opts.Apps.Metrics == nil {
			a.opts.Apps.Metrics = apps.NewMetrics()
		}
		// Metrics are a side service: a port taken by someone else is
		// reported and retried, never a reason to stop bootstrap or k3s.
		go a.serveMetrics(ctx)
	}
	// The node report's view of etcd, kept whatever the cluster API's state.
	go a.observeEtcd(ctx)
	if a.opts.NoBootstrap {
		return a.runExternal(ctx)
	}
	// The node report's probe for another holder of the cluster address
	// (a node with a cluster interface: not one run with --no-bootstrap).
	go a.observeAddress(ctx)
	// current is the bring-up of the applied config, stopped before another
	// config is applied or the node leaves.
	var current struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	stopBringUp := func() {
		if current.cancel != nil {
			current.cancel()
			<-current.done
			current.cancel = nil
		}
	}
	defer stopBringUp()
	watch := configwatch.Watch{Grace: a.opts.ConfigAbsentGrace}
	tick := time.NewTicker(a.opts.ConfigPollInterval)
	defer tick.Stop()
	records := a.records()
	upgraded, recordsErr := false, ""
	for {
		// Nothing is read from the records before the state directory is
		// the agent's alone and the old place has been read once; until
		// then the agent holds (nothing runs yet) and says why.
		if !upgraded {
			err := records.Prepare(a.opts.ConfigPath)
			if err == nil {
				var notes []string
				notes, upgraded, err = records.Upgrade(a.opts.ConfigPath)
				for _, n := range notes {
					a.log.Info("records upgrade", "did", n)
				}
			}
			if err != nil {
				if err.Error() != recordsErr {
					a.log.Error("holding: the agent's records are not usable", "err", err)
				}
				recordsErr = err.Error()
				a.setPhase(PhaseError, err)
				if !sleepCtx(ctx, a.opts.ConfigPollInterval) {
					return nil
				}
				continue
			}
			if recordsErr != "" {
				a.setPhase(PhaseStarting, nil)
				recordsErr = ""
			}
			if _, err := os.Stat(a.opts.ConfigPath); !upgraded && err == nil {
				// The config arrived after the upgrade looked (a mount
				// coming up): read the records beside it before the
				// config is loaded.
				continue
			}
		}
		stamp, statErr := configwatch.Stat(a.opts.ConfigPath)
		step := watch.Next(stamp, statErr, configwatch.ReadLeave(a.opts.ConfigPath, records.LeaveRequestFile()), time.Now())
		a.mu.Lock()
		a.state.ConfigNote = step.Note
		a.mu.Unlock()
		switch {
		case step.Leave:
			a.log.Info("leaving the cluster", "why", step.Note)
			stopBringUp()
			if !a.leave(ctx) {
				watch.LeaveFailed()
			}
		case step.Load:
			switch v, err := a.load(); {
			case err != nil:
				watch.LoadFailed()
				a.configError(err)
			case !a.sameAsApplied(v):
				stopBringUp()
				a.mu.Lock()
				a.applied = v
				a.state.Node, a.state.Cluster, a.state.ClusterID = v.NodeName, v.ClusterName, v.ClusterID
				// The role is the bring-up's to say: it follows the seed in
				// effect, which the config alone does not know.
				a.state.Role, a.state.ClusterIP, a.state.ConfigError = "", v.NodeIP.String(), ""
				a.mu.Unlock()
				a.noteAppliedToken(v)
				bctx, cancel := context.WithCancel(ctx)
				current.cancel, current.done = cancel, make(chan struct{})
				go func(done chan struct{}) {
					defer close(done)
					a.bringUp.Run(bctx, v)
				}(current.done)
			default:
				a.mu.Lock()
				a.state.ConfigError = ""
				a.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// serveMetrics serves Prometheus metrics until ctx ends, retrying the
// listen under the capped backoff while the address is taken.
func (a *Agent) serveMetrics(ctx context.Context) {
	var srv *http.Server
	a.retry(ctx, func() bool {
		s, addr, err := a.opts.Apps.Metrics.Serve(a.opts.MetricsAddr)
		a.mu.Lock()
		a.state.MetricsError = ""
		if err != nil {
			a.state.MetricsError = fmt.Sprintf("metrics on %s: %v (retrying)", a.opts.MetricsAddr, err)
		}
		a.mu.Unlock()
		if err != nil {
			a.log.Warn("metrics not served; retrying", "addr", a.opts.MetricsAddr, "err", err)
			return false
		}
		srv = s
		a.log.Info("serving metrics", "addr", addr.String())
		return true
	})
	if srv != nil {
		<-ctx.Done()
		_ = srv.Close()
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// retry runs try until it reports done, waiting between tries from
// SeedBackoffMin, doubling up to SeedBackoffMax; false when ctx ended first.
func (a *Agent) retry(ctx context.Context, try func() (done bool)) bool {
	backoff := a.opts.SeedBackoffMin
	for !try() {
		if !sleepCtx(ctx, backoff) {
			return false
		}
		backoff = min(backoff*2, a.opts.SeedBackoffMax)
	}
	return true
}
