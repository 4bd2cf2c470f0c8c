package agent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/netcfg"
)

// Phase is where bootstrap stands.
type Phase string

// Bootstrap phases, in order; PhaseError when the current step keeps failing.
const (
	PhaseStarting    Phase = "starting"
	PhaseConfiguring Phase = "configuring-address"
	PhaseWaitingSeed Phase = "waiting-for-seed"
	PhaseStartingK3s Phase = "starting-k3s"
	PhaseJoined      Phase = "joined"
	PhaseError       Phase = "error"
	PhaseLeft        Phase = "left"
	// PhaseExternal: the agent runs against a cluster it did not form
	// (--no-bootstrap); only the apps part runs.
	PhaseExternal Phase = "no-bootstrap"
)

// State is what the agent publishes about bootstrap on its local API.
type State struct {
	Node      string `json:"node"`
	Cluster   string `json:"cluster,omitempty"`
	ClusterID string `json:"clusterID,omitempty"`
	Role      Role   `json:"role,omitempty"`
	Phase     Phase  `json:"phase"`
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
}

// Options configure an agent.
type Options struct {
	ConfigPath string
	K3sBin     string
	K3sPaths   K3sPaths
	K3sLogFile string
	// SocketPath is the local API's unix socket; empty: none.
	SocketPath string
	// Kubeconfig reaches this node's cluster; empty: k3s's own kubeconfig
	// once k3s has written it.
	Kubeconfig string
	// LeaderDurations time the stats-leader election (zero: defaults).
	LeaderDurations LeaderDurations
	// RESTConfig, when set, is used instead of Kubeconfig (tests wrap its
	// transport to count requests).
	RESTConfig *rest.Config
	// NoBootstrap runs only the apps part against an existing cluster
	// (Kubeconfig), as NodeName: no address, firewall or k3s work.
	NoBootstrap bool
	NodeName    string
	// Apps configures the apps part; it runs when Apps.AppsDir is set.
	Apps AppsOptions
	// MetricsAddr serves Prometheus metrics (empty: none).
	MetricsAddr string
	Env         Environment
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
	// K3sBackoffMin bounds k3s restarts (tests shorten it).
	K3sBackoffMin time.Duration
	// Etcd reaches this node's etcd member, to publish etcd's member list
	// for the drain preflight's quorum (kube.EtcdPublisher); an empty
	// endpoint publishes nothing. Default: k3s's own endpoint and client
	// certificates (kube.K3sEtcdAccess).
	Etcd kube.EtcdAccess
	Log  *slog.Logger
}

// Agent is the node agent's bootstrap part.
type Agent struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	state   State
	applied *Validated
	// prefix is the cluster address applied to the interface.
	prefix netip.Prefix
	super  *Supervisor
	leader *StatsLeader
	apps   *AppsAgent
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
	if opts.K3sPaths == (K3sPaths{}) {
		opts.K3sPaths = DefaultK3sPaths
	}
	if opts.K3sLogFile == "" {
		opts.K3sLogFile = filepath.Join(os.TempDir(), "sitecon-k3s.log")
	}
	if opts.Env.ReadFile == nil {
		opts.Env = HostEnvironment()
	}
	if opts.Etcd == (kube.EtcdAccess{}) {
		opts.Etcd = kube.K3sEtcdAccess(opts.K3sPaths.DataDir)
	}
	return &Agent{opts: opts, log: opts.Log, state: State{Phase: PhaseStarting, Since: time.Now()}}
}

// LeaderState is this node's view of the stats-leader election; empty until
// the node can reach its cluster.
func (a *Agent) LeaderState() LeaderState {
	a.mu.Lock()
	leader := a.leader
	a.mu.Unlock()
	if leader == nil {
		return LeaderState{Identity: a.State().Node}
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
func (a *Agent) Apps() *AppsAgent {
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
	if a.opts.SocketPath != "" {
		srv, err := a.serveLocalAPI()
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	if a.opts.MetricsAddr != "" {
		if a.opts.Apps.Metrics == nil {
			a.opts.Apps.Metrics = NewMetrics()
		}
		// Metrics are a side service: a port taken by someone else is
		// reported and retried, never a reason to stop bootstrap or k3s.
		go a.serveMetrics(ctx)
	}
	if a.opts.NoBootstrap {
		return a.runExternal(ctx)
	}
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
	watch := configWatch{grace: a.opts.ConfigAbsentGrace}
	tick := time.NewTicker(a.opts.ConfigPollInterval)
	defer tick.Stop()
	for {
		_, statErr := os.Stat(a.opts.ConfigPath)
		stamp, _ := fileStamp(a.opts.ConfigPath)
		step := watch.next(stamp, statErr, time.Now())
		a.mu.Lock()
		a.state.ConfigNote = step.note
		a.mu.Unlock()
		switch {
		case step.leave:
			a.log.Info("cluster config absent past its grace period; leaving", "grace", watch.grace)
			stopBringUp()
			a.leave()
		case step.load:
			switch v, err := a.load(); {
			case err != nil:
				watch.loadFailed()
				a.configError(err)
			case !a.sameAsApplied(v):
				stopBringUp()
				a.mu.Lock()
				a.applied = v
				a.state.Node, a.state.Cluster, a.state.ClusterID = v.NodeName, v.ClusterName, v.ClusterID
				a.state.Role, a.state.ClusterIP, a.state.ConfigError = DecideRole(v), v.NodeIP.String(), ""
				a.mu.Unlock()
				bctx, cancel := context.WithCancel(ctx)
				current.cancel, current.done = cancel, make(chan struct{})
				go func(done chan struct{}) {
					defer close(done)
					a.bringUp(bctx, v)
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

// configWatch decides, poll by poll, what the config file's stat means.
// Only a file that is absent (ENOENT) for the whole grace period takes the
// node out: an editor's rename-save, a remount or a tool swapping the file
// leaves it absent for moments, and leaving stops k3s (on two servers at
// once, etcd's quorum). Any other stat error says nothing about intent: the
// node holds what it runs and says so. A config that failed to load is
// loaded again on every poll, since what made it fail (an interface not
// created yet, a key not readable yet) can change without the file changing.
type configWatch struct {
	grace        time.Duration
	lastStamp    string
	missingSince time.Time // zero: not missing
	left         bool
	retry        bool
}

type configStep struct {
	load, leave bool
	// note says what the agent holds and why ("config missing for 12s;
	// leaving in 18s"); empty when the file reads.
	note string
}

func (w *configWatch) next(stamp string, statErr error, now time.Time) configStep {
	switch {
	case statErr == nil:
		w.missingSince = time.Time{}
		changed := stamp != w.lastStamp || w.left
		w.lastStamp, w.left = stamp, false
		load := changed || w.retry
		w.retry = false
		return configStep{load: load}
	case errors.Is(statErr, fs.ErrNotExist):
		if w.left {
			return configStep{note: "no cluster config: not in a cluster"}
		}
		if w.missingSince.IsZero() {
			w.missingSince = now
		}
		missing := now.Sub(w.missingSince)
		if missing >= w.grace {
			w.left, w.lastStamp = true, ""
			return configStep{leave: true, note: "no cluster config: not in a cluster"}
		}
		return configStep{note: fmt.Sprintf("config missing for %s; leaving in %s unless it returns",
			missing.Round(time.Second), (w.grace - missing).Round(time.Second))}
	default:
		// Absence must be continuous to count.
		w.missingSince = time.Time{}
		return configStep{note: fmt.Sprintf("config cannot be read (%v); holding what runs", statErr)}
	}
}

// loadFailed asks for the config to be loaded again at the next poll.
func (w *configWatch) loadFailed() { w.retry = true }

// lockInstance makes sure one agent runs per node (per socket, or per
// config file without one): a second agent would take the first one's
// socket and start a second k3s. The lock is an flock, so it goes with the
// process however it ends.
func (a *Agent) lockInstance() (func(), error) {
	path := a.opts.SocketPath
	if path == "" {
		path = a.opts.ConfigPath
	}
	if path == "" {
		return func() {}, nil
	}
	path += ".lock"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agent lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("another sitecon agent already runs here (lock %s held by pid %s): stop it first",
			path, strings.TrimSpace(string(holder)))
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
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

func fileStamp(path string) (string, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return "absent", false
	}
	return st.ModTime().String() + "/" + strconv.FormatInt(st.Size(), 10), true
}

// load reads and validates the config.
func (a *Agent) load() (*Validated, error) {
	c, err := LoadConfig(a.opts.ConfigPath)
	if err != nil {
		return nil, err
	}
	return Validate(c, a.opts.Env)
}

func (a *Agent) configError(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Retried every poll: logged when the reason changes, not each time.
	if a.state.ConfigError != err.Error() {
		a.log.Error("cluster config rejected; keeping the previous one, retrying", "err", err)
	}
	a.state.ConfigError = err.Error()
	if a.applied == nil {
		a.state.Phase, a.state.Since, a.state.LastError = PhaseError, time.Now(), err.Error()
	}
}

func (a *Agent) sameAsApplied(v *Validated) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.applied == nil {
		return false
	}
	x, _ := json.Marshal(a.applied.Config)
	y, _ := json.Marshal(v.Config)
	return bytes.Equal(x, y) && a.applied.Token == v.Token
}

// leave takes this node out: k3s is stopped (by the caller), the cluster
// address and the firewall table removed.
func (a *Agent) leave() {
	a.mu.Lock()
	applied, prefix := a.applied, a.prefix
	a.applied, a.prefix = nil, netip.Prefix{}
	a.mu.Unlock()
	if applied == nil {
		return
	}
	err := a.opts.InNetNS(func() error {
		_, err := netcfg.RemoveClusterAddress(applied.ClusterInterface, prefix)
		return errors.Join(err, netcfg.RemoveFirewall())
	})
	a.mu.Lock()
	a.state.ClusterIPReady = false
	a.mu.Unlock()
	a.setPhase(PhaseLeft, err)
	a.log.Info("left the cluster", "err", err)
}

// bringUp takes a validated config to a running k3s: address and firewall,
// /status server, k3s config, the wait for the seed, k3s.
func (a *Agent) bringUp(ctx context.Context, v *Validated) {
	// One decision of the seed in effect (config and seed record here; the
	// follower decides again, from the config on disk, when the cluster
	// moves the seed).
	disk := v
	seed := a.seedInEffect(v)
	v = seed.Config
	role := DecideRole(v)
	a.setPhase(PhaseConfiguring, nil)
	a.attempt(nil)
	addressed := a.retry(ctx, func() bool {
		a.mu.Lock()
		previous := a.prefix
		a.mu.Unlock()
		err := a.opts.InNetNS(func() error {
			if _, err := netcfg.EnsureClusterAddress(v.ClusterInterface, v.Prefix, previous); err != nil {
				return err
			}
			return netcfg.ApplyFirewall(v.ClusterInterface, v.Network)
		})
		if err != nil {
			a.setPhase(PhaseError, err)
			a.attempt(err)
		}
		return err == nil
	})
	if !addressed {
		return
	}
	a.mu.Lock()
	a.prefix, a.state.ClusterIPReady = v.Prefix, true
	a.mu.Unlock()

	member := a.watchMembership(ctx, disk)
	// Every bring-up step is retried under the capped backoff: what makes
	// one fail (the address still held by a dying listener, a read-only
	// file system at boot) passes, and the node must get there by itself.
	if !a.retry(ctx, func() bool {
		err := a.serveStatus(ctx, v, member.isMember)
		if err != nil {
			a.setPhase(PhaseError, err)
			a.attempt(err)
		}
		return err == nil
	}) {
		return
	}
	// Never initialise twice: cluster-init only for the config's own seed
	// that was never part of the cluster, has no etcd data, and finds no
	// member answering on the prefix (mayInitialise); a refusal is an error
	// that holds k3s back and is checked again under the backoff.
	var k K3sConfig
	if !a.retry(ctx, func() bool {
		initialise, err := a.mayInitialise(ctx, seed)
		if err == nil {
			k = RenderK3s(v, a.opts.K3sPaths, !initialise)
			if err = k.Write(); err != nil {
				err = fmt.Errorf("write k3s config: %w", err)
			}
		}
		if err != nil {
			a.setPhase(PhaseError, err)
			a.attempt(err)
		}
		return err == nil
	}) {
		return
	}
	// The seed starts at once: there is nobody to wait for, and on a restart
	// its own /status stays empty until its k3s runs.
	if role != RoleSeed {
		a.setPhase(PhaseWaitingSeed, nil)
		probe := SeedProbe{JoinIP: v.JoinIP, ClusterID: v.ClusterID, Dial: a.dialer(), Token: v.Token.Reveal()}
		seedAnswers := a.retry(ctx, func() bool {
			err := probe.Check(ctx)
			switch {
			case err == nil:
				return true
			case errors.Is(err, ErrForeignCluster):
				// Another cluster at the join address is an error, never a
				// reason to join; the check goes on in case the site is fixed.
				a.setPhase(PhaseError, err)
			default:
				a.setPhase(PhaseWaitingSeed, err)
			}
			a.attempt(err)
			return false
		})
		if !seedAnswers {
			return
		}
	}
	a.setPhase(PhaseStartingK3s, nil)
	super := &Supervisor{
		Bin: a.opts.K3sBin, Args: k.Args, LogFile: a.opts.K3sLogFile, Log: a.log.With("component", "k3s"),
		PIDFile:    filepath.Join(a.opts.K3sPaths.DataDir, "sitecon-k3s.pid"),
		MinBackoff: a.opts.K3sBackoffMin,
		Start: func(c *exec.Cmd) error {
			return a.opts.InNetNS(c.Start)
		},
	}
	a.mu.Lock()
	a.super = super
	a.mu.Unlock()
	superDone := make(chan struct{})
	go func() {
		defer close(superDone)
		_ = super.Run(ctx)
	}()
	member.waitJoined(ctx, func() {
		a.setPhase(PhaseJoined, nil)
		a.markFormed(v, k.FirstBoot)
		// Only a member records the cluster: a node that reaches an API
		// server it never joined must not write into it.
		member.mu.Lock()
		snap := member.snap
		member.mu.Unlock()
		go a.recordCluster(ctx, snap, v)
		if DecideRole(v) != RoleAgent {
			go a.grantAgentAccess(ctx, snap)
		}
	})
	<-superDone
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (a *Agent) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		err = a.opts.InNetNS(func() error {
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
}

// serveStatus serves GET /status on the cluster address.
func (a *Agent) serveStatus(ctx context.Context, v *Validated, member Membership) error {
	var l net.Listener
	addr := net.JoinHostPort(v.NodeIP.String(), strconv.Itoa(StatusPort))
	err := a.opts.InNetNS(func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return fmt.Errorf("/status server on %s: %w", addr, err)
	}
	srv := NewStatusServer(StatusHandler(v.ClusterID, member))
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	a.log.Info("serving /status", "addr", addr)
	return nil
}

// membership follows this node's Node object through the snapshot.
type membership struct {
	a        *Agent
	node     string
	nodeUUID string
	v        *Validated
	mu       sync.Mutex
	snap     *kube.Snapshot
}

// applySeedRecord puts a seed change recorded on the device into the config,
// and drops a record that no longer applies.
func (a *Agent) applySeedRecord(v *Validated) (*Validated, bool) {
	path := SeedRecordFile(a.opts.ConfigPath)
	rec, ok, err := ReadSeedRecord(path)
	if err != nil {
		a.log.Error("seed record unreadable; joining through the config's seed", "err", err)
		return v, false
	}
	if !ok {
		return v, false
	}
	moved, applied, stale := ApplySeedRecord(v, rec)
	if stale {
		a.log.Info("seed record no longer applies; removed", "record", rec.JoinServerIP, "config", v.JoinIP)
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			a.log.Error("remove seed record", "err", err)
		}
	}
	if !applied {
		return v, false
	}
	a.log.Info("joining through the seed the cluster moved to", "seed", moved.JoinIP, "config", v.JoinIP)
	a.mu.Lock()
	a.state.SeedAddress, a.state.Role = moved.JoinIP.String(), DecideRole(moved)
	a.mu.Unlock()
	return moved, true
}

func (a *Agent) watchMembership(ctx context.Context, v *Validated) *membership {
	m := &membership{a: a, node: v.NodeName, nodeUUID: v.NodeUUID, v: v}
	go m.connect(ctx)
	return m
}

// connect starts the snapshot once a kubeconfig exists: k3s writes its own
// only after it started.
func (m *membership) connect(ctx context.Context) {
	path := m.a.opts.Kubeconfig
	if path == "" {
		path = kube.K3sKubeconfig
		// `k3s agent` writes no admin kubeconfig: a worker reaches the
		// cluster as k3s's own controllers do (the servers grant that
		// identity the agent's rules, grantAgentAccess).
		if DecideRole(m.v) == RoleAgent {
			path = K3sControllerKubeconfig(m.a.opts.K3sPaths)
		}
	}
	for {
		if _, err := os.Stat(path); err == nil {
			break
		}
		if !sleepCtx(ctx, time.Second) {
			return
		}
	}
	cfg, err := kube.LoadRESTConfig(path, "")
	if err != nil {
		m.a.log.Error("kubeconfig", "err", err)
		return
	}
	snap, err := newAgentSnapshot(cfg, m.a.log)
	if err != nil {
		m.a.log.Error("snapshot", "err", err)
		return
	}
	snap.Start(ctx)
	m.mu.Lock()
	m.snap = snap
	m.mu.Unlock()
	m.a.startClusterWork(ctx, snap, m.node, m.nodeUUID)
	// Later restarts must join through the cluster's current seed.
	follower := &SeedFollower{Config: m.v, Paths: m.a.opts.K3sPaths,
		RecordPath: SeedRecordFile(m.a.opts.ConfigPath), Log: m.a.log.With("component", "seed"),
		OnRender: func(ip netip.Addr) {
			m.a.mu.Lock()
			m.a.state.SeedAddress = ip.String()
			m.a.mu.Unlock()
		}}
	go follower.Run(ctx, snap)
}

// startClusterWork starts what needs the cluster: the stats-leader election
// (every node stands), the publication of etcd's member list (servers)
// and the apps part.
func (a *Agent) startClusterWork(ctx context.Context, snap *kube.Snapshot, node, nodeUUID string) {
	leader := &StatsLeader{Client: snap.Clients().Core, Identity: node, Durations: a.opts.LeaderDurations,
		Log: a.log.With("component", "stats-leader"), ReleaseOnCancel: true}
	a.mu.Lock()
	a.leader = leader
	applied := a.applied
	a.mu.Unlock()
	// Every server publishes what its own member sees, not the stats
	// leader alone: the leader may be a worker, which has no etcd client
	// certificates, and a server cut off from the quorum cannot write, so
	// what is published comes from the side that holds it.
	if a.opts.Etcd.Endpoint != "" && (applied == nil || DecideRole(applied) != RoleAgent) {
		publisher := &kube.EtcdPublisher{Access: a.opts.Etcd, Node: node, Client: snap.Clients().Core,
			Log: a.log.With("component", "etcd-members")}
		go publisher.Run(ctx)
	}
	go func() { _ = leader.Run(ctx) }()
	if a.opts.ConfigPath != "" {
		go RemoveBundlesOnceJoined(ctx, snap, JoinBundlesDir(a.opts.ConfigPath), a.log)
	}
	if a.opts.Apps.AppsDir == "" {
		return
	}
	opts := a.opts.Apps
	opts.NodeName, opts.NodeUUID = node, cmp.Or(opts.NodeUUID, nodeUUID)
	opts.Log = a.log.With("component", "apps")
	opts.Leader = leader.State
	apps, err := NewAppsAgent(opts, snap)
	if err != nil {
		a.log.Error("apps agent", "err", err)
		return
	}
	a.mu.Lock()
	a.apps = apps
	a.mu.Unlock()
	go func() {
		if err := apps.Run(ctx); err != nil {
			a.log.Error("apps agent stopped", "err", err)
		}
	}()
}

// runExternal runs the apps part against a cluster the agent did not form.
func (a *Agent) runExternal(ctx context.Context) error {
	if a.opts.NodeName == "" {
		return errors.New("--no-bootstrap needs --node-name")
	}
	cfg := a.opts.RESTConfig
	if cfg == nil {
		var err error
		if cfg, err = kube.LoadRESTConfig(a.opts.Kubeconfig, ""); err != nil {
			return err
		}
	}
	snap, err := newAgentSnapshot(cfg, a.log)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.state = State{Node: a.opts.NodeName, Phase: PhaseExternal, Since: time.Now()}
	a.mu.Unlock()
	snap.Start(ctx)
	a.startClusterWork(ctx, snap, a.opts.NodeName, "")
	<-ctx.Done()
	return nil
}

func (m *membership) ownNode() (*corev1.Node, bool) {
	m.mu.Lock()
	snap := m.snap
	m.mu.Unlock()
	if snap == nil || !snap.Health().Connected {
		return nil, false
	}
	return snap.Node(m.node)
}

// isMember: this node's live Node object has control-plane (or master) and
// etcd roles. Unknown (API down, not synced) is not a member.
func (m *membership) isMember() bool {
	n, ok := m.ownNode()
	if !ok {
		return false
	}
	return kube.IsEtcdMember(n) && kube.IsServer(n)
}

// waitJoined calls joined once this node's Node object is Ready.
func (m *membership) waitJoined(ctx context.Context, joined func()) {
	for {
		m.mu.Lock()
		snap := m.snap
		m.mu.Unlock()
		if snap != nil {
			changes, unsubscribe := snap.Subscribe()
			defer unsubscribe()
			for {
				if n, ok := m.ownNode(); ok && kube.NodeIsReady(n) {
					joined()
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-changes:
				}
			}
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return
		}
	}
}

// serveLocalAPI serves the agent's state on its unix socket, mode 0600.
func (a *Agent) serveLocalAPI() (*http.Server, error) {
	path := a.opts.SocketPath
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	// A socket left by a previous run would make Listen fail.
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	// serve answers GET path with what get returns, as JSON.
	serve := func(path string, get func() any) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(get())
		})
	}
	serve("/v1/agent", func() any { return a.State() })
	serve("/v1/leader", func() any { return a.LeaderState() })
	// The apps part's endpoints answer empty lists until it runs, so a
	// reader never has to tell "none" from "not yet" by an error.
	serve("/v1/apps", func() any { return orEmpty(a.Apps(), (*AppsAgent).Apps) })
	serve("/v1/volumes", func() any { return orEmpty(a.Apps(), (*AppsAgent).Volumes) })
	serve("/v1/events", func() any { return orEmpty(a.Apps(), (*AppsAgent).Timeline) })
	serve("/v1/node", func() any {
		if apps := a.Apps(); apps != nil {
			return apps.Node()
		}
		return NodeState{Node: a.State().Node, Status: NodeDown, Reason: "not connected to the cluster yet"}
	})
	srv := NewStatusServer(mux)
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

// orEmpty is list(apps), or an empty list (JSON [], not null) while the
// apps part does not run.
func orEmpty[T any](apps *AppsAgent, list func(*AppsAgent) []T) []T {
	if apps == nil {
		return []T{}
	}
	if out := list(apps); out != nil {
		return out
	}
	return []T{}
}

// ReadState asks a running agent for its state over its socket.
func ReadState(ctx context.Context, socketPath string) (State, error) {
	var st State
	return st, readLocal(ctx, socketPath, "/v1/agent", &st)
}

// ReadTimeline asks a running agent for its timeline, newest first.
func ReadTimeline(ctx context.Context, socketPath string) ([]TimelineEvent, error) {
	var events []TimelineEvent
	return events, readLocal(ctx, socketPath, "/v1/events", &events)
}

// ReadApps asks a running agent for its app states.
func ReadApps(ctx context.Context, socketPath string) ([]AppState, error) {
	var apps []AppState
	return apps, readLocal(ctx, socketPath, "/v1/apps", &apps)
}

// localClients holds one HTTP client per agent socket: a transport per
// call would leave its idle connections behind (sitecon status --watch
// reads every second).
var localClients sync.Map // socket path → *http.Client

func localClient(socketPath string) *http.Client {
	if c, ok := localClients.Load(socketPath); ok {
		return c.(*http.Client)
	}
	c, _ := localClients.LoadOrStore(socketPath, &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socketPath)
		},
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     30 * time.Second,
	}})
	return c.(*http.Client)
}

func readLocal(ctx context.Context, socketPath, path string, into any) error {
	client := localClient(socketPath)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+path, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("agent answered %s for %s", resp.Status, path)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("agent %s: %w", path, err)
	}
	return nil
}

// recordCluster makes sure the cluster's sitecon-cluster ConfigMap exists
// and names this node: seed changes and node removal work through it. It
// retries until the API answers; a ConfigMap of another cluster is reported
// and left alone.
func (a *Agent) recordCluster(ctx context.Context, snap *kube.Snapshot, v *Validated) {
	rec := kube.ClusterRecord{Name: v.ClusterName, ID: v.ClusterID, JoinServerIP: v.JoinIP.String()}
	if v.IsSeed {
		rec.SeedNode = v.NodeName
	}
	a.retry(ctx, func() bool {
		err := kube.EnsureClusterConfigMap(ctx, snap.Clients().Core, rec, v.NodeName)
		switch {
		case err == nil:
			a.log.Info("cluster record in place", "configmap", kube.ClusterConfigMapName)
		case errors.Is(err, kube.ErrForeignClusterRecord):
			a.log.Error("cluster record", "err", err)
		default:
			a.log.Debug("cluster record not written yet", "err", err)
			return false
		}
		return true
	})
}

// grantAgentAccess lets the agents of worker nodes reach the cluster: a
// k3s agent has no admin kubeconfig, only its controller identity, which
// the servers (with k3s's admin kubeconfig) grant the agent's rules.
func (a *Agent) grantAgentAccess(ctx context.Context, snap *kube.Snapshot) {
	a.retry(ctx, func() bool {
		err := kube.EnsureAgentAccess(ctx, snap.Clients().Core)
		if err != nil {
			a.log.Debug("agent access for workers not granted yet", "err", err)
			return false
		}
		a.log.Info("agent access for worker nodes in place", "clusterrole", kube.AgentRoleName, "user", kube.K3sControllerUser)
		return true
	})
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

// newAgentSnapshot is the agent's view of the cluster. The agent writes
// Events but never reads them: it does not watch them (a busy site's
// Events would be most of what it holds).
func newAgentSnapshot(cfg *rest.Config, log *slog.Logger) (*kube.Snapshot, error) {
	return kube.NewSnapshot(cfg, log.With("component", "snapshot"), kube.WithoutEvents())
}

// RemoveBundlesOnceJoined removes each join bundle forming saved in dir
// once its node is a Ready member of the cluster: the bundle carries the
// cluster token and is not needed after the join. It looks on every change
// of the snapshot (no polling) until none is left or ctx ends.
func RemoveBundlesOnceJoined(ctx context.Context, snap *kube.Snapshot, dir string, log *slog.Logger) {
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	for {
		if snap.Synced() {
			ready := map[string]bool{}
			for _, n := range snap.Data().Nodes {
				ready[n.Name] = kube.NodeIsReady(n)
			}
			removed, err := RemoveJoinedBundles(dir, func(node string) bool { return ready[node] })
			for _, node := range removed {
				log.Info("removed the join bundle of a node that has joined", "node", node, "dir", dir)
			}
			entries, rerr := os.ReadDir(dir)
			switch {
			case err != nil:
				log.Warn("join bundles", "dir", dir, "err", err)
			case errors.Is(rerr, fs.ErrNotExist):
				return // none saved on this node
			case rerr == nil && len(entries) == 0:
				_ = os.Remove(dir) // every node joined
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
	}
}
