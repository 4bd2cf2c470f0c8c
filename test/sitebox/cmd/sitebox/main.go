// Command sitebox runs a real local Kubernetes control plane with simulated
// EVE nodes, for sitecon's tests and demo.
//
//	sitebox up --nodes 3 --dir DIR     start a site; returns once it is ready
//	sitebox up --agents SITECON --bootstrap --dir DIR   agents that bootstrap for real, each in its own network namespace, the k3s stand-in running its etcd member
//	sitebox fail node-b --dir DIR      lose node-b: its kubelet (kwok), etcd member and agent stop, its address goes silent
//	sitebox recover node-b --dir DIR   start them again (the member rejoins with its data)
//	sitebox power-off all --dir DIR    a power cut: every node's kubelet, etcd member and agent killed at once, their addresses silent
//	sitebox power-on node-c node-a ... the devices boot again, in the order given
//	sitebox cut node-b node-c --dir DIR  (bootstrap mode) cut a group off from the rest and the API server; also drop, pause, resume, heal, faults
//	sitebox down --dir DIR             stop everything the site started
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/test/sitebox"
)

func main() {
	klog.SetLogger(logr.Discard())
	if err := root().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "sitebox:", err)
		os.Exit(1)
	}
}

func root() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:           "sitebox",
		Short:         "A real local Kubernetes control plane with simulated EVE nodes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cmd.PersistentFlags().StringVar(&dir, "dir", envOr("SITEBOX_DIR", ".sitebox"), "site directory (certificates, data, logs, PIDs, kubeconfig); env SITEBOX_DIR")

	var opts sitebox.Options
	var noSimulators, demo, runtime, stateDisks bool
	var agents, standin string
	var agentTimings sitebox.AgentTimings
	up := &cobra.Command{
		Use:   "up",
		Short: "Start a site and return once every node is Ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Dir = dir
			if opts.Bootstrap && agents == "" {
				return fmt.Errorf("--bootstrap is how the agents start: give --agents too")
			}
			start := time.Now()
			// Ctrl-C while starting stops what already runs (Up cleans up
			// after a failed start), instead of leaving it behind.
			sigCtx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(sigCtx, 3*time.Minute)
			defer cancel()
			// The nodes' kubelet fronts outlive this command: site
			// processes of this binary.
			self, err := os.Executable()
			if err != nil {
				return err
			}
			opts.KubeletFronts = self
			if runtime {
				opts.Runtime = self
			}
			opts.StateDisks = stateDisks
			site, err := sitebox.Up(ctx, opts)
			if err != nil {
				return err
			}
			appsDir := filepath.Join(site.Dir, "apps")
			if demo {
				if err := sitebox.WriteDemoApps(appsDir); err != nil {
					_ = site.Down()
					return fmt.Errorf("demo site: %w", err)
				}
			}
			if agents != "" {
				if site.K3sStandin = standin; standin == "" {
					// make sitebox builds it beside sitebox.
					site.K3sStandin = filepath.Join(filepath.Dir(self), "k3sstandin")
				}
				if err := os.MkdirAll(appsDir, 0o755); err != nil {
					_ = site.Down()
					return err
				}
				if demo && !site.Bootstrap {
					// As on a device: each node's agent writes its apps'
					// logs for the log service.
					site.AgentAppLogsDir = filepath.Join(site.Dir, "applogs")
				}
				if err := site.StartAgents(agents, appsDir, agentTimings); err != nil {
					_ = site.Down()
					return fmt.Errorf("agents: %w", err)
				}
				fmt.Printf("agents: one per node, apps from %s, sockets %s\n", appsDir, site.AgentSocket("NODE"))
				if !site.Bootstrap {
					if err := site.WriteNodeConfigs(); err != nil {
						_ = site.Down()
						return fmt.Errorf("node configs: %w", err)
					}
					fmt.Printf("  each node's cluster config (sitecon --config, for the nodes' own reports): %s\n", site.NodeConfigFile("NODE"))
					if site.AgentAppLogsDir != "" {
						fmt.Printf("  the apps' logs each node's agent collects (--app-logs-dir): %s\n", filepath.Join(site.AgentAppLogsDir, "NODE"))
					}
				}
				if site.Bootstrap {
					fmt.Printf("  bootstrapping for real: configs %s, namespaces %s (ip netns exec %s ...)\n",
						site.ClusterConfig("NODE"), site.Netns("NODE"), site.Netns(site.Nodes[0].Name))
				}
			}
			if !noSimulators {
				if err := site.StartProcess("simulators", self, "simulate", "--dir", site.Dir); err != nil {
					_ = site.Down()
					return err
				}
				if demo {
					// The demo's apps log a line every few seconds.
					if err := site.StartProcess("app-chatter", self, "chatter", "--dir", site.Dir); err != nil {
						_ = site.Down()
						return err
					}
				}
			}
			fmt.Printf("site up in %.1fs: %d nodes, kubeconfig %s\n", time.Since(start).Seconds(), len(site.Nodes), site.Kubeconfig())
			fmt.Printf("  export KUBECONFIG=%s\n", site.Kubeconfig())
			return nil
		},
	}
	up.Flags().IntVar(&opts.Nodes, "nodes", 3, "number of simulated nodes (node-a, node-b, ...)")
	up.Flags().BoolVar(&stateDisks, "state-disks", false, "in bootstrap mode, give each node's agent state directory a small disk of its own (an ext4 image on a loop device), which fill-disk fills")
	up.Flags().BoolVar(&runtime, "runtime", false, "run a real process (sleep) for every pod a node's kubelet runs, in a cgroup named after the pod, as containerd does: the agents' fence stops them as on a device")
	up.Flags().StringVar(&opts.BinDir, "bin", "", "control-plane binaries (default: the build cache, env SITEBOX_BIN)")
	// The defaults are what a device runs: the controller-manager settings
	// the agent renders for k3s, the kubelet's and the API server's own
	// defaults (k3s changes neither), the agent's failover timings.
	up.Flags().DurationVar(&opts.NodeMonitorGracePeriod, "node-monitor-grace-period", k3s.NodeMonitorGracePeriod, "how long a silent node stays Ready (controller-manager)")
	up.Flags().DurationVar(&opts.NodeLeaseDuration, "node-lease-duration", 40*time.Second, "simulated kubelet node-lease duration")
	up.Flags().DurationVar(&opts.EvictionToleration, "eviction-toleration", 300*time.Second, "default not-ready/unreachable toleration of pods (apiserver)")
	up.Flags().DurationVar(&opts.AttachDetachSyncPeriod, "attach-detach-sync-period", k3s.AttachDetachSyncPeriod, "how often the attach/detach controller re-reads VolumeAttachments (controller-manager)")
	up.Flags().StringVar(&opts.ClusterName, "cluster-name", "sitebox", "cluster name recorded in the sitecon-cluster ConfigMap")
	up.Flags().BoolVar(&demo, "demo", false, "write the demo site's app and volume configs to DIR/apps (two VMs, three containers, two pinned, one with a host Ethernet port passed through)")
	up.Flags().StringVar(&agents, "agents", "", "sitecon binary: run one agent per node (--no-bootstrap unless --bootstrap) on DIR/apps")
	up.Flags().BoolVar(&opts.Bootstrap, "bootstrap", false, "with --agents: each node's agent bootstraps for real, in a network namespace of its own (root), with its own cluster config, cluster address and /status, and the k3s stand-in as its k3s, which runs the node's etcd member: power-off/power-on then stage a real power cut")
	up.Flags().StringVar(&standin, "k3s-standin", "", "with --bootstrap: the k3s stand-in binary (default: k3sstandin beside sitebox, as make sitebox builds it)")
	up.Flags().DurationVar(&agentTimings.MoveAfter, "move-after", sitebox.ShippedAgentTimings.MoveAfter, "agents: how long auto-migration apps tolerate a lost node")
	up.Flags().DurationVar(&agentTimings.FailoverTimeout, "failover-timeout", sitebox.ShippedAgentTimings.FailoverTimeout, "agents: how long the failover guard times a lost node's pod before it may force-delete it")
	up.Flags().BoolVar(&noSimulators, "no-simulators", false, "do not run the Longhorn, KubeVirt and kube-vip simulators")

	down := &cobra.Command{
		Use:   "down",
		Short: "Stop every process the site started",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			site, err := loadSite(dir)
			if err != nil {
				return err
			}
			return site.Down()
		},
	}
	fail := &cobra.Command{
		Use:   "fail NODE",
		Short: "Fail a node: stop its simulated kubelet, its etcd member (two of three failed: no quorum) and its agent; its address goes silent",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			site, err := loadSite(dir)
			if err != nil {
				return err
			}
			return site.Fail(args[0])
		},
	}
	recover := &cobra.Command{
		Use:   "recover NODE",
		Short: "Recover a failed node: start its simulated kubelet and its etcd member again",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			site, err := loadSite(dir)
			if err != nil {
				return err
			}
			return site.Recover(args[0])
		},
	}
	powerOff := &cobra.Command{
		Use:   "power-off NODE...|all",
		Short: "Cut the power of nodes at once: their simulated kubelet, etcd member and agent are killed (two of three servers off: no quorum)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			site, err := loadSite(dir)
			if err != nil {
				return err
			}
			return site.PowerOff(nodesOf(site, args)...)
		},
	}
	powerOn := &cobra.Command{
		Use:   "power-on NODE...|all",
		Short: "Power nodes on again, one after the other in the order given: etcd member from its data, kubelet, agent",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			site, err := loadSite(dir)
			if err != nil {
				return err
			}
			for _, n := range nodesOf(site, args) {
				if err := site.PowerOn(n); err != nil {
					return fmt.Errorf("%s: %w", n, err)
				}
				fmt.Printf("%s powered on\n", n)
			}
			return nil
		},
	}
	var rebuild, vmBoot time.Duration
	simulate := &cobra.Command{
		Use:    "simulate",
		Short:  "Run the Longhorn, KubeVirt and kube-vip simulators against a site (started by up)",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			site, err := sitebox.Load(dir)
			if err != nil {
				return err
			}
			cfg, err := site.RESTConfig()
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewTextHandler(os.Stderr, nil))
			return sitebox.RunSimulators(ctx, cfg, sitebox.SimulatorOptions{RebuildTime: rebuild, VMBootTime: vmBoot, PKIDir: filepath.Join(site.Dir, "pki")}, log)
		},
	}
	simulate.Flags().DurationVar(&rebuild, "rebuild-time", 3*time.Second, "how long a simulated replica rebuild takes (real Longhorn: minutes, with the data)")
	simulate.Flags().DurationVar(&vmBoot, "vm-boot-time", 0, "how long a VM takes to boot once its launcher pod is Ready (real virt-handler: seconds)")
	var chatterEvery time.Duration
	chatter := &cobra.Command{
		Use:    "chatter",
		Short:  "Make the site's running apps write log lines (started by up --demo)",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			site, err := sitebox.Load(dir)
			if err != nil {
				return err
			}
			cfg, err := site.RESTConfig()
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return site.RunAppChatter(ctx, cs, chatterEvery, slog.New(slog.NewTextHandler(os.Stderr, nil)))
		},
	}
	chatter.Flags().DurationVar(&chatterEvery, "every", 3*time.Second, "how often each app logs a line")
	var silentAddr string
	silence := &cobra.Command{
		Use:    "silence",
		Short:  "Hold a failed node's address silent until stopped (started by fail)",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return sitebox.HoldSilent(ctx, silentAddr)
		},
	}
	silence.Flags().StringVar(&silentAddr, "addr", "", "address to hold silent, host:port")
	var frontNode string
	kubeletFront := &cobra.Command{
		Use:    "kubelet-front",
		Short:  "Serve a node's kubelet port: TLS with client certificates of the site's CA, relayed to its kwok (started by up)",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return sitebox.ServeKubeletFront(ctx, dir, frontNode)
		},
	}
	kubeletFront.Flags().StringVar(&frontNode, "node", "", "the node whose kubelet port to serve")
	cmd.AddCommand(up, down, fail, recover, powerOff, powerOn, simulate, chatter, silence, kubeletFront)
	cmd.AddCommand(faultCommands(&dir)...)
	return cmd
}

// loadSite loads the site in dir; a node it fails is held silent by this
// binary, in a site process that outlives the command.
func loadSite(dir string) (*sitebox.Site, error) {
	site, err := sitebox.Load(dir)
	if err != nil {
		return nil, err
	}
	if site.SilenceHolder, err = os.Executable(); err != nil {
		return nil, err
	}
	return site, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// nodesOf are the nodes named on a command line; "all" is every node of
// the site (power cuts, cuts staged by hand).
func nodesOf(site *sitebox.Site, args []string) []string {
	if len(args) == 1 && args[0] == "all" {
		var all []string
		for _, n := range site.Nodes {
			all = append(all, n.Name)
		}
		return all
	}
	return args
}
