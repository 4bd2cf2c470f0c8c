package cmd

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/netcfg"
	"github.com/sitecon/sitecon/ui"
	"github.com/sitecon/sitecon/views"
)

// DefaultConfigDir is where a node keeps its cluster config and token.
const DefaultConfigDir = "/persist/sitecon"

func newFormCmd(g *globalFlags) *cobra.Command {
	var (
		clusterName, iface, prefix, seed, thisNode, dir, join, stateDir string
		servers, workers                                                []string
		force, dryRun, noHostChecks, wizard                             bool
	)
	cmd := &cobra.Command{
		Use:   "form",
		Short: "Form a cluster without a controller, or join one with a bundle",
		Long: `Form a cluster on a site without a controller. On the seed node:

  sitecon form --cluster-name site1 --interface eth1 \
      --node node-a --node node-b=0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d --node node-c

generates the cluster UUID and token, gives each node an address in the
cluster prefix (default ` + formation.DefaultClusterPrefix + `; the seed gets the first),
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
				text, err := formation.ReadJoinSource(join, cmd.InOrStdin(), cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				bundle, files, err := formation.PlanJoin(text, dir, iface, force)
				if bundle.NodeName != "" {
					target = bundle.NodeName + " in " + bundle.ClusterName
				}
				if err != nil {
					return err
				}
				if dryRun {
					fmt.Fprintf(out, "would write %s and %s for %s in cluster %s (%s)\n", files.ConfigPath, files.TokenPath, bundle.NodeName, bundle.ClusterName, bundle.ClusterIPPrefix)
					return nil
				}
				if err := intend(); err != nil {
					return err
				}
				notes, err := formation.WriteJoin(bundle, files, formation.Records{Dir: stateDir})
				for _, n := range notes {
					fmt.Fprintln(out, n)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "wrote %s for %s: cluster %s, address %s, seed %s\n", files.ConfigPath, bundle.NodeName, bundle.ClusterName, bundle.ClusterIPPrefix, bundle.JoinServerIP)
				return nil
			}
			if wizard {
				target = "wizard"
				return runFormWizard(cmd, dir, force, log)
			}
			req := formation.FormRequest{ClusterName: clusterName, Interface: iface, Prefix: prefix, Seed: seed}
			for _, spec := range servers {
				name, uuid, _ := strings.Cut(spec, "=")
				req.Nodes = append(req.Nodes, formation.FormNode{Name: name, UUID: uuid})
			}
			for _, spec := range workers {
				name, uuid, _ := strings.Cut(spec, "=")
				req.Nodes = append(req.Nodes, formation.FormNode{Name: name, UUID: uuid, Worker: true})
			}
			if !noHostChecks && iface != "" {
				existing, err := netcfg.InterfacePrefixes(iface)
				if err != nil {
					return err
				}
				req.ExistingPrefixes = existing
			}
			formed, err := formation.FormCluster(req, thisNode, dir, force, dryRun, intend)
			if err != nil {
				return err
			}
			printFormed(out, formed)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&clusterName, "cluster-name", "", "cluster name")
	f.StringVar(&iface, "interface", "", "cluster interface (on --join: this node's, when it differs from the seed's)")
	f.StringVar(&prefix, "prefix", formation.DefaultClusterPrefix, "cluster prefix; must not overlap the interface's subnets")
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
	stateDirFlag(cmd, &stateDir)
	return cmd
}

// printFormed tells what forming the cluster did, the join lines last.
func printFormed(out io.Writer, f *formation.Formed) {
	for _, l := range f.Summary() {
		fmt.Fprintln(out, l)
	}
	fmt.Fprintln(out)
	if f.Written == "" {
		fmt.Fprintf(out, "would write the config for %s under its directory (dry run: nothing written, no bundles)\n", f.ThisNode)
		return
	}
	fmt.Fprintf(out, "wrote %s for %s\n\n", f.Written, f.ThisNode)
	fmt.Fprintln(out, "Join each other node with its bundle (the bundles carry the cluster token; keep them private, off command lines):")
	if f.SaveProblem != "" {
		fmt.Fprintf(out, "(the bundles could not be saved: %s)\n", f.SaveProblem)
	}
	lines := f.Lines()
	for i, l := range lines {
		// A blank line before each node's block.
		if strings.HasPrefix(l, "# ") && (i == 0 || !strings.HasPrefix(lines[i-1], "#")) {
			fmt.Fprintln(out)
		}
		fmt.Fprintln(out, l)
	}
}

// formRequest turns the wizard's input into a formation request, with the
// interface's current subnets for the overlap check.
func formRequest(in views.FormInput) (formation.FormRequest, map[string][]string) {
	req := formation.FormRequest{ClusterName: in.ClusterName, Interface: in.Interface, Prefix: in.Prefix, Seed: in.Seed}
	for list, worker := range map[string]bool{in.Servers: false, in.Workers: true} {
		for _, spec := range strings.Split(list, ",") {
			if spec = strings.TrimSpace(spec); spec != "" {
				name, uuid, _ := strings.Cut(spec, "=")
				req.Nodes = append(req.Nodes, formation.FormNode{Name: strings.TrimSpace(name), UUID: strings.TrimSpace(uuid), Worker: worker})
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
func newFormWizard(uiCtx *ui.Context, interfaces []string, dir string, force bool, formedOut **formation.Formed) *views.FormWizard {
	w := views.NewFormWizard(uiCtx, interfaces, views.FormInput{Prefix: formation.DefaultClusterPrefix})
	w.Check = func(in views.FormInput) map[string][]string {
		req, problems := formRequest(in)
		if _, err := formation.Plan(req); err != nil {
			var verr *config.ValidationError
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
		f, err := formation.FormCluster(req, in.Seed, dir, force, false, nil)
		if err != nil {
			return nil, err
		}
		*formedOut = f
		res := &views.FormResult{Summary: f.Summary(), Written: f.Written, Joins: f.Lines()}
		if f.SaveProblem == "" && len(f.Joins) > 0 {
			res.JoinsFile = filepath.Dir(f.Joins[0].File)
		}
		return res, nil
	}
	return w
}

// runFormWizard asks for the cluster in a terminal form, checks it as it is
// typed, writes this node's config (as the seed), recorded in log, and
// prints the join lines. Its keys go through the console's guard.
func runFormWizard(cmd *cobra.Command, dir string, force bool, log *audit.Log) error {
	var result *formation.Formed
	w := newFormWizard(ui.NewContext(lipgloss.DefaultRenderer(), nil, nil), interfaceNames(), dir, force, &result)
	w.Audit = log
	term, closeTerm, err := views.OpenTerminal(os.Stdout, "/dev/tty")
	if err != nil {
		return err
	}
	defer closeTerm()
	if _, err := tea.NewProgram(views.Guarded(w), append(term, tea.WithAltScreen(), tea.WithContext(cmd.Context()), tea.WithFPS(views.FramesPerSecond))...).Run(); err != nil {
		return err
	}
	if result == nil {
		fmt.Fprintln(cmd.OutOrStdout(), "no cluster formed; nothing written")
		return nil
	}
	printFormed(cmd.OutOrStdout(), result)
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
