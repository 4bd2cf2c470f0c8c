package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/bundle"
	"github.com/sitecon/sitecon/doctor"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/nodereport"
	"github.com/sitecon/sitecon/ui"
	"github.com/sitecon/sitecon/views"
)

// DefaultAgentLog is where the agent's unit has it log (--log-file in
// packaging/sitecon-agent.service).
const DefaultAgentLog = "/var/log/sitecon/agent.log"

// DefaultK3sLog is where the agent writes k3s's output unless its
// --k3s-log says otherwise.
const DefaultK3sLog = "/var/log/sitecon-k3s.log"

// bundleFlags are sitecon bundle's flags.
type bundleFlags struct {
	output                        string
	timeout, apiWait, nodeWait    time.Duration
	maxSize                       string
	nodes                         []string
	stateDir, agentLog, k3sLog    string
	k3sDataDir, agentConfig       string
	agentSocket, clusterTokenFile string
}

// newBundleFlags are the defaults, the console's included.
func newBundleFlags() *bundleFlags {
	return &bundleFlags{timeout: 90 * time.Second, apiWait: 15 * time.Second, nodeWait: 5 * time.Second, maxSize: "50Mi",
		stateDir: formation.DefaultStateDir, agentLog: DefaultAgentLog, k3sLog: DefaultK3sLog, k3sDataDir: k3s.DefaultPaths.DataDir,
		agentConfig: filepath.Join(DefaultConfigDir, "cluster.json"), agentSocket: DefaultAgentSocket}
}

func newBundleCmd(g *globalFlags) *cobra.Command {
	f := newBundleFlags()
	cmd := &cobra.Command{
		Use:   "bundle [-o FILE]",
		Short: "Collect a support bundle of the site into one archive (read only)",
		Long: `Collect what a support engineer needs into one archive (tar.gz, mode 0600):
  cluster/status.json     what sitecon status -o json says
  cluster/doctor.json     what sitecon doctor -o json says
  cluster/               nodes, events (oldest first, also as text), the etcd
                          member list the agents record, Longhorn volumes,
                          replicas and engines, KubeVirt VMIs, sitecon's
                          ConfigMaps (cluster record, placement overrides...)
  agents/NODE.json        what each node's agent answers on its cluster
                          address (GET /status, port 12346)
  local/audit.jsonl       the actions taken from this machine (--audit-log)
  local/state/, local/logs/agent.log, local/logs/k3s.log
                          on a node: the agent's state directory and the
                          tails of its log and k3s's
  manifest.json           every file, what did not arrive and why, what the
                          size cap cut, what was redacted

Each part has a deadline: a node whose agent does not answer within
--node-timeout, or a cluster API that does not answer, is listed as missing
in the manifest, and the rest still arrive (a bundle is most needed when the
cluster is down). When the API does not answer, give --node NAME=ADDRESS for
each node to still ask their agents.

Read only: nothing is created or changed in the cluster (it LISTs and GETs,
and asks the agents GET /status). Secrets never enter it: no Secret is
collected; fields holding tokens and passwords are redacted; the cluster
token (from this machine's k3s and agent files, and --cluster-token-file)
and every Secret's values are scrubbed from every file, as written and in
base64.

The exit status is 0 when the archive was written, complete or not (the
manifest and the last lines printed say what is missing); 1 when it could
not be written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBundle(cmd, g, f) },
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.output, "output", "o", "", "the archive to write (default: sitecon-bundle-<UTC time>.tar.gz here)")
	fl.DurationVar(&f.timeout, "timeout", f.timeout, "give up on whatever has not arrived after this long, and write the rest")
	fl.DurationVar(&f.apiWait, "api-timeout", f.apiWait, "the deadline of each read of the cluster API (and of the status and doctor reports' wait for it)")
	fl.DurationVar(&f.nodeWait, "node-timeout", f.nodeWait, "the deadline of each node's agent's answer")
	fl.StringVar(&f.maxSize, "max-size", f.maxSize, "cap on the files' contents (before compression); what is cut is listed in the manifest")
	fl.StringArrayVar(&f.nodes, "node", nil, "NAME=ADDRESS of a node whose agent to ask besides the Node objects' addresses (repeatable)")
	fl.StringVar(&f.stateDir, "state-dir", f.stateDir, "the agent's state directory on this node (its --state-dir)")
	fl.StringVar(&f.agentLog, "agent-log", f.agentLog, "the agent's log on this node (its --log-file)")
	fl.StringVar(&f.k3sLog, "k3s-log", f.k3sLog, "k3s's log on this node (the agent's --k3s-log)")
	fl.StringVar(&f.k3sDataDir, "k3s-data-dir", f.k3sDataDir, "k3s data directory (its token files are read to scrub the token; the doctor checks its certificates)")
	fl.StringVar(&f.agentConfig, "config", f.agentConfig, "the agent's cluster config (the token file it names is read to scrub the token)")
	fl.StringVar(&f.agentSocket, "agent-socket", f.agentSocket, "this node's agent socket")
	fl.StringVar(&f.clusterTokenFile, "cluster-token-file", "", "a file holding the cluster token, to scrub it besides the ones found on this machine")
	return cmd
}

func runBundle(cmd *cobra.Command, g *globalFlags, f *bundleFlags) error {
	if _, err := parseSize(f.maxSize); err != nil {
		return err
	}
	if _, err := parseNodeAddresses(f.nodes); err != nil {
		return err
	}
	log, closeLog, err := g.logger()
	if err != nil {
		return err
	}
	defer closeLog()
	fmt.Fprintln(cmd.ErrOrStderr(), "collecting (read only; at most", f.timeout.String()+")...")
	out, m, err := takeBundle(cmd.Context(), g, f, log)
	if err != nil {
		return err
	}
	var total int64
	for _, e := range m.Files {
		total += e.Bytes
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "wrote %s: %d file(s), %d bytes before compression\n", out, len(m.Files), total)
	for _, x := range m.Missing {
		fmt.Fprintln(w, ui.CleanLines("missing: "+x.Item+": "+x.Why))
	}
	for _, c := range m.Cut {
		fmt.Fprintln(w, ui.CleanLines(fmt.Sprintf("cut: %s (%d of %d bytes kept): %s", c.File, c.Kept, c.Bytes, c.Why)))
	}
	if m.Complete {
		fmt.Fprintln(w, "complete: every part arrived")
	}
	return nil
}

// bundleLine is what the console says of a bundle taken.
func bundleLine(path string, m bundle.Manifest) string {
	switch {
	case m.Complete:
		return "support bundle written: " + path
	case len(m.Missing) > 0:
		return fmt.Sprintf("support bundle written: %s; %d part(s) missing (its manifest.json says why)", path, len(m.Missing))
	}
	return fmt.Sprintf("support bundle written: %s; %d file(s) cut to its size cap", path, len(m.Cut))
}

// takeBundle collects a bundle as f says, within f.timeout, and writes it;
// it returns the path written and the manifest.
func takeBundle(ctx context.Context, g *globalFlags, f *bundleFlags, log *slog.Logger) (string, bundle.Manifest, error) {
	maxBytes, err := parseSize(f.maxSize)
	if err != nil {
		return "", bundle.Manifest{}, err
	}
	nodes, err := parseNodeAddresses(f.nodes)
	if err != nil {
		return "", bundle.Manifest{}, err
	}
	out := f.output
	if out == "" {
		out = "sitecon-bundle-" + time.Now().UTC().Format("20060102T150405Z") + ".tar.gz"
	}
	if st, err := os.Stat(out); err == nil && st.IsDir() {
		return "", bundle.Manifest{}, fmt.Errorf("-o %s is a directory: name the archive", out)
	}
	if abs, err := filepath.Abs(out); err == nil {
		out = abs
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()

	redactor := bundle.NewRedactor()
	tokenFiles := bundle.TokenFiles(f.k3sDataDir, f.agentConfig)
	if f.clusterTokenFile != "" {
		if _, err := os.Stat(f.clusterTokenFile); err != nil {
			return "", bundle.Manifest{}, fmt.Errorf("--cluster-token-file: %w", err)
		}
		tokenFiles = append(tokenFiles, f.clusterTokenFile)
	}
	redactor.AddTokenFiles(tokenFiles...)

	opts := bundle.Options{APIWait: f.apiWait, NodeTimeout: f.nodeWait, Nodes: nodes, Redactor: redactor,
		MaxBytes: maxBytes, Version: buildVersion,
		Local: bundle.Local{StateDir: f.stateDir, AgentLog: f.agentLog, K3sLog: f.k3sLog, AuditLog: g.auditLog, AgentSocket: f.agentSocket}}
	cfg, cfgErr := g.restConfig()
	if cfgErr != nil {
		opts.APIProblem = "the cluster config could not be loaded: " + cfgErr.Error()
	} else if opts.Clients, err = kube.NewClients(cfg); err != nil {
		opts.APIProblem = err.Error()
	}
	opts.Reports = []bundle.Source{
		{Name: "the status report (sitecon status -o json)", Deadline: f.apiWait + 5*time.Second,
			Collect: func(ctx context.Context) ([]bundle.Item, []bundle.Missing, error) {
				if cfgErr != nil {
					return nil, nil, errors.New(opts.APIProblem)
				}
				data, err := statusJSON(ctx, cfg, log, f.agentSocket, f.apiWait)
				if err != nil {
					return nil, nil, err
				}
				return []bundle.Item{{Name: "cluster/status.json", Source: "sitecon status -o json", Data: data}}, nil, nil
			}},
		{Name: "the doctor's report (sitecon doctor -o json)", Deadline: 2*f.apiWait + 10*time.Second,
			Collect: func(ctx context.Context) ([]bundle.Item, []bundle.Missing, error) {
				dopts := doctorOptions(g, log, f.k3sDataDir, f.agentSocket, f.agentConfig, f.apiWait)
				var buf bytes.Buffer
				if err := doctor.WriteJSON(&buf, doctor.Diagnose(ctx, dopts)); err != nil {
					return nil, nil, err
				}
				return []bundle.Item{{Name: "cluster/doctor.json", Source: "sitecon doctor -o json", Data: buf.Bytes()}}, nil, nil
			}},
		// What each node's agent says of itself, asked directly with the
		// cluster's key: when the cluster API does not answer, the only
		// word from the other nodes (sitecon status --config shows it).
		{Name: "each node's own report (sitecon status --config)", Deadline: nodereport.DefaultDeadline + 5*time.Second,
			Collect: func(ctx context.Context) ([]bundle.Item, []bundle.Missing, error) {
				r := nodeReports{configPath: f.agentConfig}.gather(ctx, nil)
				if r.Problem != "" && len(r.Answers) == 0 {
					return nil, nil, errors.New(r.Problem)
				}
				data, err := json.MarshalIndent(r, "", "  ")
				if err != nil {
					return nil, nil, err
				}
				return []bundle.Item{{Name: "cluster/node-reports.json", Source: "each node's agent, on its cluster address", Data: data}}, nil, nil
			}},
	}
	archive := bundle.Take(ctx, opts)
	if err := archive.WriteFile(out); err != nil {
		return "", bundle.Manifest{}, fmt.Errorf("the bundle could not be written to %s: %w", out, err)
	}
	return out, archive.Manifest, nil
}

// statusJSON is sitecon status -o json's report, read within wait.
func statusJSON(ctx context.Context, cfg *rest.Config, log *slog.Logger, agentSocket string, wait time.Duration) ([]byte, error) {
	snapCtx, stop := context.WithCancel(ctx)
	defer stop()
	snap, err := kube.NewSnapshot(cfg, log)
	if err != nil {
		return nil, err
	}
	waitCtx, cancel := context.WithTimeout(snapCtx, wait)
	defer cancel()
	snap.Start(snapCtx)
	if err := snap.WaitForSync(waitCtx); err != nil {
		return nil, apiUnreadable(cfg.Host, wait, "--api-timeout", err)
	}
	now := time.Now()
	report := views.NewStatusReport(snap.Status(), readAgentSummary(ctx, agentSocket), now)
	var buf bytes.Buffer
	if err := views.WriteStatus(&buf, report, now, views.FormatJSON); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// parseSize reads --max-size: a quantity (50Mi, 200M, 1Gi) of bytes.
func parseSize(s string) (int64, error) {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("--max-size %q: want a size such as 50Mi or 200M: %w", s, err)
	}
	n, ok := q.AsInt64()
	if !ok || n <= 0 {
		return 0, fmt.Errorf("--max-size %q: want a positive number of bytes", s)
	}
	return n, nil
}

// parseNodeAddresses reads --node NAME=ADDRESS flags.
func parseNodeAddresses(flags []string) ([]bundle.NodeAddress, error) {
	var out []bundle.NodeAddress
	for _, f := range flags {
		name, addr, ok := strings.Cut(f, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--node %q: want NAME=ADDRESS", f)
		}
		if _, err := netip.ParseAddr(addr); err != nil {
			return nil, fmt.Errorf("--node %q: %q is not an IP address", f, addr)
		}
		out = append(out, bundle.NodeAddress{Node: name, Address: addr})
	}
	return out, nil
}
