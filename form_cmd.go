package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/netcfg"
	"github.com/sitecon/sitecon/ui"
	"github.com/sitecon/sitecon/views"
)

// DefaultConfigDir is where a node keeps its cluster config and token.
const DefaultConfigDir = "/persist/sitecon"

func newFormCmd(g *globalFlags) *cobra.Command {
	var (
		clusterName, iface, prefix, seed, thisNode, dir, join string
		servers, workers                                      []string
		force, dryRun, noHostChecks, wizard                   bool
	)
	cmd := &cobra.Command{
		Use:   "form",
		Short: "Form a cluster without a controller, or join one with a bundle",
		Long: `Form a cluster on a site without a controller. On the seed node:

  sitecon form --cluster-name site1 --interface eth1 \
      --node node-a --node node-b=0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d --node node-c

generates the cluster UUID and token, gives each node an address in the
cluster prefix (default ` + agent.DefaultClusterPrefix + `; the seed gets the first),
writes this node's config under --dir, and prints one join bundle per other
node (also saved, root-only, under join-bundles/ in --dir; the seed's agent
removes each once its node has joined). On each of them, either

  sitecon form --join -            (paste the bundle, then Ctrl-D)
  sitecon form --join FILE         (the node's .bundle file, copied over)

The bundles carry the cluster token: treat them like the token itself, and
keep them off command lines (shell history, ps).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			out := cmd.OutOrStdout()
			configPath := filepath.Join(dir, "cluster.json")
			action, target := "form", clusterName
			if join != "" {
				action, target = "join", "bundle"
			}
			if g.readOnly && !dryRun {
				return fmt.Errorf("read-only mode (--readonly or SITECON_READONLY): %s not run", action)
			}
			// Writing a node's cluster config is an action like any other:
			// its intent on disk before the first file is written, its
			// outcome after, and not taken if it cannot be recorded. The
			// wizard records its own (the cluster is known only once it is
			// submitted).
			var log *audit.Log
			var entry *audit.Entry
			if !dryRun {
				// err is the named result: the outcome below is the one
				// returned, failures included.
				if log, err = audit.Open(g.auditLog); err != nil {
					return err
				}
				defer func() {
					if wizard && join == "" {
						return
					}
					outcome := audit.OutcomeDone
					if err != nil {
						outcome = audit.OutcomeFailed
					}
					var werr error
					if entry != nil {
						entry.Rec.Target = target
						werr = entry.End(outcome, err)
					} else {
						// Stopped before anything was written.
						rec := audit.Record{Action: action, Target: target, Outcome: outcome, Detail: "config " + configPath}
						if err != nil {
							rec.Error = err.Error()
						}
						werr = log.Write(rec)
					}
					if werr != nil {
						err = errors.Join(err, fmt.Errorf("audit log: %w", werr))
					}
				}()
			}
			intend := func() error {
				if log == nil {
					return nil
				}
				e, err := log.Begin(audit.Record{Action: action, Target: target, Detail: "config " + configPath})
				if err != nil {
					return fmt.Errorf("%s not done: its intent cannot be recorded: %w", action, err)
				}
				entry = e
				return nil
			}
			if join != "" {
				text, err := readJoinSource(join, cmd.InOrStdin(), cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				bundle, err := agent.DecodeBundle(text)
				if err != nil {
					return err
				}
				target = bundle.NodeName + " in " + bundle.ClusterName
				if err := checkJoinsExisting(bundle); err != nil {
					return err
				}
				files, err := bundle.Files(dir, iface)
				if err != nil {
					return err
				}
				if err := checkOverwrite(configPath, bundle.ClusterID, force); err != nil {
					return err
				}
				if dryRun {
					fmt.Fprintf(out, "would write %s and %s for %s in cluster %s (%s)\n", files.ConfigPath, files.TokenPath, bundle.NodeName, bundle.ClusterName, bundle.ClusterIPPrefix)
					return nil
				}
				if err := intend(); err != nil {
					return err
				}
				if bundle.ExistingCluster {
					// Marked before the config is written: an agent that
					// sees the config must already know the node never
					// initialises this cluster.
					if err := agent.MarkFormed(agent.FormedMarkerFile(files.ConfigPath), agent.FormedMarker{ClusterID: bundle.ClusterID,
						NodeName: bundle.NodeName, How: "given a join bundle made on the running cluster"}); err != nil {
						return err
					}
				}
				if err := files.Write(); err != nil {
					return err
				}
				fmt.Fprintf(out, "wrote %s for %s: cluster %s, address %s, seed %s\n", files.ConfigPath, bundle.NodeName, bundle.ClusterName, bundle.ClusterIPPrefix, bundle.JoinServerIP)
				return nil
			}
			if wizard {
				target = "wizard"
				return runFormWizard(cmd, dir, force, log)
			}
			req := agent.FormRequest{ClusterName: clusterName, Interface: iface, Prefix: prefix, Seed: seed}
			for _, spec := range servers {
				name, uuid, _ := strings.Cut(spec, "=")
				req.Nodes = append(req.Nodes, agent.FormNode{Name: name, UUID: uuid})
			}
			for _, spec := range workers {
				name, uuid, _ := strings.Cut(spec, "=")
				req.Nodes = append(req.Nodes, agent.FormNode{Name: name, UUID: uuid, Worker: true})
			}
			if !noHostChecks && iface != "" {
				existing, err := netcfg.InterfacePrefixes(iface)
				if err != nil {
					return err
				}
				req.ExistingPrefixes = existing
			}
			formed, err := formCluster(req, thisNode, dir, force, dryRun, intend)
			if err != nil {
				return err
			}
			formed.print(out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&clusterName, "cluster-name", "", "cluster name")
	f.StringVar(&iface, "interface", "", "cluster interface (on --join: this node's, when it differs from the seed's)")
	f.StringVar(&prefix, "prefix", agent.DefaultClusterPrefix, "cluster prefix; must not overlap the interface's subnets")
	f.StringVar(&seed, "seed", "", "seed server (default: the first --node)")
	f.StringArrayVar(&servers, "node", nil, "a server node, NAME or NAME=UUID (repeat)")
	f.StringArrayVar(&workers, "worker", nil, "a worker node, NAME or NAME=UUID (repeat)")
	f.StringVar(&thisNode, "this-node", "", "which node this one is (default: the seed)")
	f.StringVar(&dir, "dir", DefaultConfigDir, "where this node's cluster.json and token are written")
	f.StringVar(&join, "join", "", "join with a bundle printed by 'sitecon form' on the seed: - reads it from stdin, else a file holding it")
	f.BoolVar(&force, "force", false, "replace this node's config for another cluster")
	f.BoolVar(&dryRun, "dry-run", false, "print the plan and write nothing")
	f.BoolVar(&noHostChecks, "no-host-checks", false, "skip the overlap check against the interface's addresses")
	f.BoolVar(&wizard, "wizard", false, "ask for everything in a form on the terminal, checked as you type")
	return cmd
}

// formed is what forming a cluster did: the plan, this node's files, and
// the join lines for the others.
type formed struct {
	plan     *agent.FormPlan
	thisNode string
	written  string // this node's config path; empty on a dry run
	joins    []joinLine
	// saveProblem is why the bundles could not be saved (they are printed).
	saveProblem string
}

// lines are the join instructions for every other node: comments, then the
// bundle alone on its line, ready to paste into 'sitecon form --join -'.
func (f *formed) lines() []string {
	var out []string
	for _, j := range f.joins {
		out = append(out, "# "+j.node+": on "+j.node+" run 'sitecon form --join -', paste the bundle below, then Ctrl-D")
		if j.file != "" {
			out = append(out, "#   or copy "+j.file+" there and run 'sitecon form --join "+filepath.Base(j.file)+"'")
		}
		out = append(out, j.bundle)
	}
	return out
}

// joinLine is one other node's bundle, and the file it was saved in.
type joinLine struct{ node, bundle, file string }

// formCluster plans the cluster and writes this node's config (unless
// dryRun). It refuses to move a node that belongs to another cluster.
// intend, when set, records the intent once the plan holds and before the
// first file is written; its error stops everything.
func formCluster(req agent.FormRequest, thisNode, dir string, force, dryRun bool, intend func() error) (*formed, error) {
	plan, err := agent.Plan(req)
	if err != nil {
		return nil, err
	}
	if thisNode == "" {
		thisNode = plan.Nodes[0].NodeName // the seed
	}
	var mine *agent.JoinBundle
	for i := range plan.Nodes {
		if plan.Nodes[i].NodeName == thisNode {
			mine = &plan.Nodes[i]
		}
	}
	if mine == nil {
		return nil, fmt.Errorf("--this-node %s is not one of the nodes", thisNode)
	}
	files, err := mine.Files(dir, "")
	if err != nil {
		return nil, err
	}
	if err := checkOverwrite(files.ConfigPath, plan.ClusterID, force); err != nil {
		return nil, err
	}
	f := &formed{plan: plan, thisNode: thisNode}
	if dryRun {
		return f, nil
	}
	if intend != nil {
		if err := intend(); err != nil {
			return nil, err
		}
	}
	if err := files.Write(); err != nil {
		return nil, err
	}
	f.written = files.ConfigPath
	texts := map[string]string{}
	for _, n := range plan.Nodes {
		if n.NodeName == thisNode {
			continue
		}
		bundle, err := n.Encode()
		if err != nil {
			return nil, err
		}
		f.joins = append(f.joins, joinLine{node: n.NodeName, bundle: bundle})
		texts[n.NodeName] = bundleFileText(n, bundle)
	}
	// Saved root-only beside the config, for copying to each node as a
	// file; the agent removes each once its node has joined. The config is
	// written already: a failure here is reported, the bundles are still
	// printed.
	paths, err := agent.SaveJoinBundles(agent.JoinBundlesDir(files.ConfigPath), texts)
	if err != nil {
		f.saveProblem = err.Error()
	}
	for i := range f.joins {
		f.joins[i].file = paths[f.joins[i].node]
	}
	return f, nil
}

// bundleFileText is a saved bundle file: what it is, then the bundle.
func bundleFileText(n agent.JoinBundle, bundle string) string {
	return fmt.Sprintf("# join bundle for %s in cluster %s (%s): it carries the cluster token, keep it private\n# on %s: sitecon form --join THIS-FILE\n%s\n",
		n.NodeName, n.ClusterName, n.ClusterID, n.NodeName, bundle)
}

// readJoinSource reads the bundle --join names: "-" is stdin, anything else
// a file holding it (a saved .bundle file, or the lines forming printed).
// A bundle given on the command line itself still works, with a warning:
// it is now in the shell's history and visible to every user in ps.
func readJoinSource(join string, stdin io.Reader, stderr io.Writer) (string, error) {
	if strings.HasPrefix(strings.TrimSpace(join), agent.BundlePrefix) {
		fmt.Fprintln(stderr, "warning: the join bundle was given on the command line: it carries the cluster token and is now in your shell history "+
			"and visible in ps; next time use 'sitecon form --join -' (paste, then Ctrl-D) or 'sitecon form --join FILE'")
		return join, nil
	}
	var data []byte
	var err error
	what := join
	if join == "-" {
		what = "stdin"
		// A bundle is a few hundred bytes; a megabyte is plenty.
		data, err = io.ReadAll(io.LimitReader(stdin, 1<<20))
	} else {
		data, err = os.ReadFile(join)
	}
	if err != nil {
		return "", fmt.Errorf("reading the join bundle from %s: %w", what, err)
	}
	text, err := agent.BundleFromText(string(data))
	if err != nil {
		return "", fmt.Errorf("the join bundle from %s: %w", what, err)
	}
	return text, nil
}

func (f *formed) summary() []string {
	p := f.plan
	out := []string{fmt.Sprintf("cluster %s (%s), seed %s at %s", p.Nodes[0].ClusterName, p.ClusterID, p.Nodes[0].NodeName, p.Nodes[0].JoinServerIP), ""}
	for _, n := range p.Nodes {
		role := "server"
		if n.IsWorkerNode {
			role = "worker"
		}
		if n.NodeName == p.Nodes[0].NodeName {
			role = "seed server"
		}
		out = append(out, fmt.Sprintf("%-12s %-12s %-18s %s", n.NodeName, role, n.ClusterIPPrefix, n.NodeUUID))
	}
	return out
}

func (f *formed) print(out io.Writer) {
	for _, l := range f.summary() {
		fmt.Fprintln(out, l)
	}
	fmt.Fprintln(out)
	if f.written == "" {
		fmt.Fprintf(out, "would write the config for %s under its directory (dry run: nothing written, no bundles)\n", f.thisNode)
		return
	}
	fmt.Fprintf(out, "wrote %s for %s\n\n", f.written, f.thisNode)
	fmt.Fprintln(out, "Join each other node with its bundle (the bundles carry the cluster token; keep them private, off command lines):")
	if f.saveProblem != "" {
		fmt.Fprintf(out, "(the bundles could not be saved: %s)\n", f.saveProblem)
	}
	lines := f.lines()
	for i, l := range lines {
		// A blank line before each node's block.
		if strings.HasPrefix(l, "# ") && (i == 0 || !strings.HasPrefix(lines[i-1], "#")) {
			fmt.Fprintln(out)
		}
		fmt.Fprintln(out, l)
	}
}

// checkJoinsExisting refuses a bundle made on a running cluster that names
// the new node's own address as the join address: the node could only
// initialise a second cluster with the same ID and token there. A formation
// bundle may do so (the seed's own, when another node formed the cluster).
func checkJoinsExisting(b agent.JoinBundle) error {
	own, err := netip.ParsePrefix(b.ClusterIPPrefix)
	if err != nil || !b.ExistingCluster || own.Addr().String() != b.JoinServerIP {
		return nil
	}
	return fmt.Errorf("this bundle joins %s to an existing cluster (%s) through %s, its own address: it has no seed to join and must never initialise the cluster again; "+
		"on a live member move the seed (sitecon seed NODE) and make a new bundle (sitecon node replace or sitecon join-info)", b.NodeName, b.ClusterName, b.JoinServerIP)
}

// checkOverwrite refuses to replace a node's config for another cluster
// unless forced: that would silently move the node to another cluster.
func checkOverwrite(path, clusterID string, force bool) error {
	existing, err := agent.LoadConfig(path)
	if errors.Is(err, os.ErrNotExist) || force {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s exists and cannot be read (%v): use --force to replace it", path, err)
	}
	if existing.ClusterID != clusterID {
		return fmt.Errorf("%s already makes this node a member of cluster %s (%s): use --force to replace it", path, existing.ClusterName, existing.ClusterID)
	}
	return nil
}

// formRequest turns the wizard's input into a formation request, with the
// interface's current subnets for the overlap check.
func formRequest(in views.FormInput) (agent.FormRequest, map[string][]string) {
	req := agent.FormRequest{ClusterName: in.ClusterName, Interface: in.Interface, Prefix: in.Prefix, Seed: in.Seed}
	for list, worker := range map[string]bool{in.Servers: false, in.Workers: true} {
		for _, spec := range strings.Split(list, ",") {
			if spec = strings.TrimSpace(spec); spec != "" {
				name, uuid, _ := strings.Cut(spec, "=")
				req.Nodes = append(req.Nodes, agent.FormNode{Name: strings.TrimSpace(name), UUID: strings.TrimSpace(uuid), Worker: worker})
			}
		}
	}
	problems := map[string][]string{}
	if req.Interface != "" {
		existing, err := netcfg.InterfacePrefixes(req.Interface)
		if err != nil {
			problems[views.FieldInterface] = append(problems[views.FieldInterface], err.Error())
		}
		req.ExistingPrefixes = existing
	}
	return req, problems
}

// newFormWizard builds the wizard over this device's interfaces; *formedOut
// is set once the cluster is formed.
func newFormWizard(uiCtx *ui.Context, interfaces []string, dir string, force bool, formedOut **formed) *views.FormWizard {
	w := views.NewFormWizard(uiCtx, interfaces, views.FormInput{Prefix: agent.DefaultClusterPrefix})
	w.Check = func(in views.FormInput) map[string][]string {
		req, problems := formRequest(in)
		if _, err := agent.Plan(req); err != nil {
			var verr *agent.ValidationError
			if errors.As(err, &verr) {
				for _, p := range verr.Problems {
					problems[p.Field] = append(problems[p.Field], p.Problem+" — "+p.Fix)
				}
			} else {
				problems[views.FieldNodes] = append(problems[views.FieldNodes], err.Error())
			}
		}
		return problems
	}
	w.Submit = func(in views.FormInput) (*views.FormResult, error) {
		req, _ := formRequest(in)
		// The wizard records the intent itself, before Submit.
		f, err := formCluster(req, in.Seed, dir, force, false, nil)
		if err != nil {
			return nil, err
		}
		*formedOut = f
		res := &views.FormResult{Summary: f.summary(), Written: f.written, Joins: f.lines()}
		if f.saveProblem == "" && len(f.joins) > 0 {
			res.JoinsFile = filepath.Dir(f.joins[0].file)
		}
		return res, nil
	}
	return w
}

// runFormWizard asks for the cluster in a terminal form, checks it as it is
// typed, writes this node's config (as the seed), recorded in log, and
// prints the join lines. Its keys go through the console's guard.
func runFormWizard(cmd *cobra.Command, dir string, force bool, log *audit.Log) error {
	var result *formed
	w := newFormWizard(ui.NewContext(lipgloss.DefaultRenderer(), nil, nil), interfaceNames(), dir, force, &result)
	w.Audit = log
	if _, err := tea.NewProgram(views.Guarded(w), tea.WithAltScreen(), tea.WithContext(cmd.Context())).Run(); err != nil {
		return err
	}
	if result == nil {
		fmt.Fprintln(cmd.OutOrStdout(), "no cluster formed; nothing written")
		return nil
	}
	result.print(cmd.OutOrStdout())
	return nil
}

// interfaceNames are this device's network interfaces, for the wizard.
func interfaceNames() []string {
	var names []string
	if ifaces, err := net.Interfaces(); err == nil {
		for _, i := range ifaces {
			names = append(names, i.Name)
		}
	}
	return names
}
