package cmd

import (
	"cmp"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/applogs"
	"github.com/sitecon/sitecon/agent/apps"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/drainrequest"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/vncbridge"
	"github.com/sitecon/sitecon/agent/workloads"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/nodecheck"
)

// DefaultAgentSocket is where the agent serves its local API.
const DefaultAgentSocket = "/run/sitecon/agent.sock"

func newAgentCmd(g *globalFlags) *cobra.Command {
	var opts agent.Options
	var k3sConfig, k3sDataDir, clusterTokenFile, stateDir, hostRoot string
	var etcd nodestate.EtcdAccess
	var gcPercent int
	var vncExpose bool
	cmd := &cobra.Command{
		Use:   "agent --config FILE",
		Short: "Run the node agent: cluster address and firewall, /status, k3s in its role",
		Long: `Run the node agent. It validates the cluster config (re-read when it
changes; an invalid one is reported and the running state kept), puts the
cluster address on the cluster interface with sitecon's firewall table, serves
GET /status on <cluster IP>:12346, writes the k3s config for this node's role,
waits for the seed when joining, and supervises k3s. A config that fails
validation is retried at every poll (what failed, an interface not created yet,
may change without the file changing). The config file absent for the whole
--config-absent-grace takes the node out (k3s stopped, address and firewall
table removed); absent for less, or unreadable for any other reason, the node
holds what it runs and says so (sitecon status, /v1/agent).

With --apps-dir the agent also runs the apps: it reads apps/*.json and
volumes/*.json there (EVE API field names; watched), gates each app on this
node by its designated node (DNId), lays out the apps it is the DNId of
(server-side apply, field manager "sitecon"), follows where Kubernetes runs
them, and publishes that on the socket (/v1/apps, /v1/volumes, /v1/events, /v1/node), in
--state-dir and on --metrics-addr.

--no-bootstrap runs only that apps part, as --node-name, against a cluster
that already exists (--kubeconfig): no address, firewall or k3s work. With
--cluster-id and --cluster-token-file its failover guard checks the lost
nodes' proofs of life, and with --status-addr it serves /status and its own
proof there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !loopbackAddress(opts.VNCBindAddress) && !vncExpose {
				return fmt.Errorf("--vnc-address %s would serve the consoles of this node's VMs (each behind a one-time password, VNC's weak DES challenge) to whoever reaches this device there; give --vnc-expose as well to do so, or leave it at %s", opts.VNCBindAddress, vncbridge.DefaultBindAddress)
			}
			if err := agent.SetGCPercent(gcPercent, cmd.Flags().Changed("gc-percent"), os.Getenv); err != nil {
				return err
			}
			log, closeLog, err := g.logger()
			if err != nil {
				return err
			}
			defer closeLog()
			if g.logFile == "" {
				log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: g.logLevel}))
			}
			opts.Log = log
			opts.Version = buildVersion
			opts.StateDir, opts.Apps.StateDir = stateDir, stateDir
			// client-go's own words (leader election, watch errors) belong
			// in the agent's log, not lost: the agent runs no terminal UI.
			klog.SetSlogLogger(log.With("from", "client-go"))
			opts.Kubeconfig = g.kubeconfig
			opts.AuditLog = g.auditLog
			opts.K3sPaths = k3s.Paths{ConfigFile: k3sConfig, DataDir: k3sDataDir}
			opts.NodeChecks.Host = nodecheck.HostAt(hostRoot)
			// k3s's own client certificates unless named; an empty
			// endpoint publishes no member list.
			k3sEtcd := nodestate.K3sEtcdAccess(k3sDataDir)
			opts.Etcd = nodestate.EtcdAccess{Endpoint: etcd.Endpoint,
				CertFile: cmp.Or(etcd.CertFile, k3sEtcd.CertFile), KeyFile: cmp.Or(etcd.KeyFile, k3sEtcd.KeyFile),
				CAFile: cmp.Or(etcd.CAFile, k3sEtcd.CAFile)}
			if opts.NoBootstrap && opts.NodeName == "" {
				return fmt.Errorf("--no-bootstrap needs --node-name")
			}
			if opts.NoBootstrap && opts.Apps.AppsDir == "" && opts.AppLogs.Dir == "" {
				return fmt.Errorf("--no-bootstrap runs only the apps part and the app logs: give --apps-dir or --app-logs-dir")
			}
			if opts.StatusAddr != "" && (opts.ClusterID == "" || clusterTokenFile == "") {
				return fmt.Errorf("--status-addr serves the proof of life: give --cluster-id and --cluster-token-file too")
			}
			if clusterTokenFile != "" {
				token, err := os.ReadFile(clusterTokenFile)
				if err != nil {
					return fmt.Errorf("--cluster-token-file: %w", err)
				}
				opts.ClusterToken = config.Secret(strings.TrimSpace(string(token)))
			}
			return agent.New(opts).Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.ConfigPath, "config", filepath.Join(DefaultConfigDir, "cluster.json"), "cluster config file (JSON, EVE API field names)")
	f.IntVar(&gcPercent, "gc-percent", agent.DefaultGCPercent, "the agent's garbage-collection target, as GOGC: the heap grows to (100+N)% of what is live before a collection; without it a GOGC in the environment stands (and reaches k3s too)")
	f.DurationVar(&opts.ConfigAbsentGrace, "config-absent-grace", 30*time.Second, "how long the config file must be absent (ENOENT) before the node leaves the cluster")
	f.StringVar(&opts.K3sBin, "k3s-bin", "k3s", "k3s binary")
	f.StringVar(&k3sConfig, "k3s-config", k3s.DefaultPaths.ConfigFile, "k3s config file")
	f.StringVar(&k3sDataDir, "k3s-data-dir", k3s.DefaultPaths.DataDir, "k3s data directory")
	f.StringVar(&hostRoot, "host-root", "/", "where the host's root file system is seen from the agent (its /proc, /sys, /etc): the node report's checks of Longhorn's prerequisites read there")
	f.BoolVar(&opts.JoinUnverifiedCA, "join-unverified-ca", false, "join a seed whose agent cannot vouch for the cluster's CA (an older sitecon) when the token pins none: the token then goes to whichever server answers at the join address; logged at every join")
	f.StringVar(&etcd.Endpoint, "etcd-endpoint", nodestate.K3sEtcdAccess("").Endpoint, "this node's etcd member, read for etcd's member list (published for the drain preflight's quorum); empty: publish none")
	f.StringVar(&etcd.CertFile, "etcd-cert", "", "etcd client certificate (default <k3s-data-dir>/server/tls/etcd/client.crt; unused for http)")
	f.StringVar(&etcd.KeyFile, "etcd-key", "", "etcd client key (default <k3s-data-dir>/server/tls/etcd/client.key)")
	f.StringVar(&etcd.CAFile, "etcd-ca", "", "etcd server CA (default <k3s-data-dir>/server/tls/etcd/server-ca.crt)")
	f.StringVar(&opts.Workloads.RunDir, "k3s-run-dir", workloads.DefaultDirs.RunDir, "k3s's containerd state: a node that leaves stops the shims serving it and takes down the mounts below it")
	f.StringVar(&opts.Workloads.PodLogDir, "pod-log-dir", workloads.DefaultDirs.PodLogDir, "the kubelet's pod log directory (NAMESPACE_NAME_UID per pod): a node cut off fences every app pod found there that it does not know as a pinned app's")
	f.StringVar(&opts.Workloads.KubeletDir, "kubelet-dir", workloads.DefaultDirs.KubeletDir, "the kubelet's directory: a node that leaves takes down the mounts below its pods/ and plugins/")
	f.StringVar(&opts.K3sLogFile, "k3s-log", DefaultK3sLog, "where k3s's output goes")
	f.StringVar(&opts.SocketPath, "socket", DefaultAgentSocket, "local API socket (mode 0600)")
	f.BoolVar(&opts.NoBootstrap, "no-bootstrap", false, "run only the apps part against an existing cluster (needs --node-name, --apps-dir)")
	f.StringVar(&opts.NodeName, "node-name", "", "this node's Kubernetes name (with --no-bootstrap)")
	f.StringVar(&opts.ClusterID, "cluster-id", "", "the cluster's id, for the proof of life (with --no-bootstrap; a device's agent takes it from its config)")
	f.StringVar(&clusterTokenFile, "cluster-token-file", "", "file holding the cluster token, for the proof of life (with --no-bootstrap)")
	f.StringVar(&opts.StatusAddr, "status-addr", "", "where to serve /status and the proof of life, host:port (with --no-bootstrap; a device's agent serves them on its cluster address)")
	f.StringVar(&opts.Apps.NodeUUID, "node-uuid", "", "this node's UUID (default: from the config, else its Node's node-uuid label)")
	f.StringVar(&opts.Apps.AppsDir, "apps-dir", "", "directory of app and volume configs (apps/*.json, volumes/*.json); empty: no apps part")
	f.StringVar(&opts.AppLogs.Dir, "app-logs-dir", "", "write the logs of the apps running on this node (their containers; a VM's serial console) here as JSON lines for the device's log service, rotated at "+
		fmt.Sprintf("%d MiB per file, %d files", applogs.DefaultMaxFileBytes>>20, applogs.DefaultMaxFiles)+"; empty: not collected")
	f.StringVar(&stateDir, "state-dir", formation.DefaultStateDir, "the agent's own directory, on persistent storage, the agent's alone (created 0700; never the config's directory): "+
		"its records of this node's membership (seed.json, formed.json, leave.json, removed.json; an upgrade moves them here once from beside the config) "+
		"and the JSON status files (apps.json, node.json, events.json, cluster.json on the leader)")
	f.StringVar(&opts.VNCBindAddress, "vnc-address", vncbridge.DefaultBindAddress, "where the consoles (VNC, 5900+vnc_display) of the VM apps running on this node are served, for the device's remote-console service (off loopback only with --vnc-expose)")
	f.BoolVar(&vncExpose, "vnc-expose", false, "let --vnc-address be off loopback")
	f.StringVar(&opts.NodeKubeconfig, "node-kubeconfig", "", "this node's own identity (never an admin's): the VM consoles are opened with it, and its key signs this node's proof of life (default: <k3s-data-dir>/agent/kubelet.kubeconfig; for the consoles on a worker, the agent's own)")
	f.StringVar(&opts.NodeKubeconfig, "vnc-kubeconfig", "", "the same as --node-kubeconfig")
	_ = f.MarkDeprecated("vnc-kubeconfig", "use --node-kubeconfig")
	f.StringVar(&opts.NodeClientCA, "node-client-ca", "", "the cluster's client CA, which issued every node's identity: the peers' signed proofs of life are checked against it (default: <k3s-data-dir>/agent/client-ca.crt)")
	f.StringVar(&opts.MetricsAddr, "metrics-addr", "127.0.0.1:9812", "Prometheus metrics address (empty: none)")
	f.DurationVar(&opts.Apps.Placement.MoveAfter, "move-after", apps.DefaultMoveAfter, "how long auto-migration apps tolerate an unreachable or not-ready node")
	f.DurationVar(&opts.Apps.FileAbsentGrace, "app-file-absent-grace", apps.DefaultFileAbsentGrace, "how long an app or volume file must be absent from its readable directory before its app or volume leaves the config (and its workload is removed); a file back within it changes nothing")
	f.DurationVar(&opts.Apps.ConflictWindow, "conflict-window", apps.DefaultConflictWindow, "how long another node's layout of an app from a disagreeing config of the same version stands before this node writes over it, when this node's config wins the tie (the losing node never does)")
	f.DurationVar(&opts.Apps.FailoverTimeout, "failover-timeout", apps.DefaultFailoverTimeout, "how long the leader times an auto app's pod on a lost node (from its first sighting there, evicted or not yet) before it may force-delete it once evicted (at least 16s unless --no-fence; the same on every node: a node cut off fences itself before it, after "+apps.DeriveFenceTimings(apps.DefaultFailoverTimeout).FenceAfter.String()+" for the default)")
	f.BoolVar(&opts.Apps.Fence.Disabled, "no-fence", false, "do not fence this node when it is cut off from the API server and every peer (only for simulated nodes, whose pods run no process here)")
	f.DurationVar(&opts.LeaderDurations.LeaseDuration, "leader-lease-duration", apps.DefaultLeaderDurations.LeaseDuration, "stats-leader lease duration")
	f.DurationVar(&opts.LeaderDurations.RenewDeadline, "leader-renew-deadline", apps.DefaultLeaderDurations.RenewDeadline, "stats-leader renew deadline")
	f.DurationVar(&opts.LeaderDurations.RetryPeriod, "leader-retry-period", apps.DefaultLeaderDurations.RetryPeriod, "stats-leader retry period")
	f.IntVar(&opts.DrainAttempts, "drain-attempts", drainrequest.DefaultAttempts, "how many times a drain the device requests is tried while its preflight holds it (the last healthy replica of a volume, etcd quorum) or its evictions fail")
	f.DurationVar(&opts.DrainRetryInterval, "drain-retry-interval", drainrequest.DefaultRetryInterval, "how long a held drain request waits before its next attempt")
	cmd.AddCommand(newAgentRenderCmd(), newAgentLeaveCmd(g), newAgentDrainRequestCmd(), newAgentVNCPasswordCmd())
	return cmd
}

func newAgentRenderCmd() *cobra.Command {
	var configPath, out, k3sBin, k3sConfig, k3sDataDir, stateDir string
	var noHostChecks bool
	cmd := &cobra.Command{
		Use:   "render --config FILE [--out DIR]",
		Short: "Show the k3s configuration and command the agent would use for this node",
		Long: `Validate the cluster config and print the k3s config files the agent would
write for this node (token redacted) and the k3s command line. Nothing on the
node changes. With --out DIR the files are written under DIR instead (token
included, mode 0600), for a closer look.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(configPath)
			if err != nil {
				return err
			}
			env := config.HostEnvironment()
			if noHostChecks {
				env.InterfaceExists = nil
			}
			v, err := config.Validate(cfg, env)
			if err != nil {
				return err
			}
			paths := k3s.Paths{ConfigFile: k3sConfig, DataDir: k3sDataDir}
			// The agent's own decisions: the seed in effect from the files
			// on this device, and whether it may ever initialise.
			records := formation.Records{Dir: stateDir}
			in, err := formation.LocalSeedInputs(records, v)
			if err != nil {
				return err
			}
			seed := formation.SeedInEffect(in)
			v = seed.Config
			initialise, err := formation.InitCheck(seed, paths.EtcdMemberDataPresent(), records.FormedMarkerFile())
			if err != nil {
				return err
			}
			k := k3s.Render(v, paths, !initialise)
			if out == "" {
				return k.PrintPlan(cmd.OutOrStdout(), v, k3sBin)
			}
			rooted := k.Rooted(out)
			if err := rooted.Write(); err != nil {
				return err
			}
			for _, f := range rooted.Files {
				fmt.Fprintln(cmd.OutOrStdout(), "wrote", f.Path)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "command:", k.CommandLine(k3sBin))
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "cluster config file (JSON, EVE API field names)")
	_ = cmd.MarkFlagRequired("config")
	cmd.Flags().StringVar(&out, "out", "", "write the files under this directory instead of printing them")
	cmd.Flags().StringVar(&k3sBin, "k3s-bin", "k3s", "k3s binary")
	cmd.Flags().StringVar(&k3sConfig, "k3s-config", k3s.DefaultPaths.ConfigFile, "k3s config file")
	cmd.Flags().StringVar(&k3sDataDir, "k3s-data-dir", k3s.DefaultPaths.DataDir, "k3s data directory (its etcd data tells a first boot from a restart)")
	cmd.Flags().BoolVar(&noHostChecks, "no-host-checks", false, "skip checks against this machine (the cluster interface exists), to check a config for another node")
	stateDirFlag(cmd, &stateDir)
	return cmd
}

// stateDirFlag gives a command that reads or writes the agent's records
// (seed record, formed and removed markers, leave request) the agent's
// --state-dir, with the agent's default.
func stateDirFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "state-dir", formation.DefaultStateDir, "the agent's state directory, where it keeps its records (the agent's --state-dir)")
}
