package cmd

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/sitecon/sitecon/agent"
	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
	"github.com/sitecon/sitecon/agent/localapi"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/kube/safety"
	"github.com/sitecon/sitecon/ui"
)

func newAgentLeaveCmd(g *globalFlags) *cobra.Command {
	f, d := &actionFlags{}, &drainFlags{}
	var configPath, k3sDataDir, stateDir, agentSocket string
	var etcd nodestate.EtcdAccess
	cmd := &cobra.Command{
		Use:   "leave --config FILE",
		Short: "Take this node out of its cluster on purpose: preflight, drain, etcd member removed, containers stopped",
		Long: `Take this node out of its cluster, its work first:

  1. the preflight a removal of this node gets (sitecon node remove; not
     its refusal of the node it runs on, nor its warning for a Ready one):
     refused when etcd would lose quorum with this node's member gone (it
     says the arithmetic) or its member list cannot be counted on (it says
     what it read), when the node holds the only up-to-date copy of a
     volume, when it is the last server, or when it is the seed in effect
     (move it first: sitecon seed NODE); a warning when the members left
     no longer tolerate a failure. A cluster that cannot be read leaves
     quorum and volumes unknown: refused too;
  2. the node is cordoned and drained as sitecon drain does it (its pods
     evicted, disruption budgets and Longhorn respected, the volumes
     watched): its apps start elsewhere while it is still there;
  3. its etcd member is removed (a server): the member list read through
     this node's etcd, the removal asked of the members that stay;
  4. the leave request is written in the agent's state directory
     (--state-dir, leave.json; the one the agent answering on
     --agent-socket reads, refused otherwise, or an agent too old to say
     it; with no agent answering, --state-dir must be given). An agent run
     with --no-bootstrap reads no request and did not start k3s: refused
     before anything changes (drain the node, stop its k3s, then sitecon
     node remove it from another node). At its next config poll the agent
     stops k3s, then the containers k3s leaves running, then removes the
     cluster address and the firewall table, and stays out until the
     request is removed (then it joins again from its config).

Nothing changes when the preflight refuses, --force or not. --force goes
on past its warnings, with the node name typed (--confirm NODE with
--yes); past a cluster that cannot be read it only writes the request.
Recorded in the audit log, before and after.

A config file that is merely missing, or unreadable, never takes a node
out: it must be gone for --config-absent-grace, or this request written.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The agent first: one run with --no-bootstrap may have no
			// cluster config to read, and its mode is the reason to say.
			agentRuns, err := sameStateDir(cmd.Context(), agentSocket, stateDir, cmd.Flags().Changed("state-dir"))
			if err != nil {
				return err
			}
			cfg, err := config.Load(configPath)
			if err != nil {
				return err
			}
			node := cfg.NodeName
			records := formation.Records{Dir: stateDir}
			request := records.LeaveRequestFile()
			k3sEtcd := nodestate.K3sEtcdAccess(k3sDataDir)
			access := nodestate.EtcdAccess{Endpoint: etcd.Endpoint,
				CertFile: cmp.Or(etcd.CertFile, k3sEtcd.CertFile), KeyFile: cmp.Or(etcd.KeyFile, k3sEtcd.KeyFile),
				CAFile: cmp.Or(etcd.CAFile, k3sEtcd.CAFile)}
			force := d.force
			a, err := beginAction(cmd, g, f, "leave", node)
			if err != nil && (!force || g.readOnly) {
				return fmt.Errorf("%w\nthe cluster cannot be read, so quorum and volume copies are unknown: nothing written (--force leaves anyway)", err)
			}
			if err != nil {
				// Forced past a cluster that cannot be read: recorded as such.
				log, lerr := audit.Open(g.auditLog)
				if lerr != nil {
					return lerr
				}
				a = &action{cmd: cmd, flags: f, recorder: flow.Recorder{Log: log}}
				fmt.Fprintf(a.out(), "the cluster cannot be read (%v): leaving without a preflight or a drain (--force)\n", err)
			}
			rec := a.recorder.Open("leave", node)
			var p safety.Preflight
			if a.snap != nil {
				// A removal's preflight (safety.PurposeLeave): the member
				// goes, so quorum is judged on the members left; the node's
				// disks leave the cluster, so a last copy there is refused;
				// and the seed rule (flow.CheckDrain).
				p, err = flow.CheckDrain(cmd.Context(), a.snap, "leave", node, node, d.DrainOptions)
				if err != nil {
					return a.ended(rec, audit.OutcomeFailed, err)
				}
				printPreflight(a.out(), p)
				rec.SetPreflight(flow.PreflightSummary(p))
				if stops := leaveStops(p, force); len(stops) > 0 {
					return a.done(rec.Refuse(stops...))
				}
			}
			if f.dryRun {
				fmt.Fprintf(a.out(), "would drain %s, remove its etcd member and write %s: it leaves its cluster at the agent's next poll\n", node, request)
				return a.done(rec.DryRun())
			}
			typed := ""
			if force {
				typed = node
			}
			if err := a.confirm(rec, fmt.Sprintf("%s leaves cluster %s: drained, its etcd member removed, k3s and its containers stopped, its cluster address gone.", node, cfg.ClusterName), typed); err != nil {
				return err
			}
			// The request goes where the agent reads it, its state
			// directory, which must be the agent's alone. Made ready only
			// now, confirmed: a declined leave changes nothing. Records an
			// older agent kept beside the config move there first, unless
			// an agent runs: it moved its own, from beside its own config.
			if err := records.Prepare(configPath); err != nil {
				return a.ended(rec, audit.OutcomeFailed, err)
			}
			if !agentRuns {
				notes, _, err := records.Upgrade(configPath)
				for _, n := range notes {
					fmt.Fprintln(a.out(), n)
				}
				if err != nil {
					return a.ended(rec, audit.OutcomeFailed, err)
				}
			}
			writeRequest := func(_ context.Context, progress func(string)) error {
				if err := formation.WriteLeaveRequest(request, formation.LeaveRequest{ClusterID: cfg.ClusterID, NodeName: node, At: time.Now().UTC(), By: audit.CurrentUser()}); err != nil {
					return err
				}
				progress("leave request written: " + request)
				return nil
			}
			done := node + " leaves at the agent's next poll (k3s, then its containers, then its address); remove " + request + " to join again"
			if a.snap == nil {
				leave := &flow.Action{Record: rec, Done: done, Change: writeRequest}
				if err := a.run(leave); err != nil {
					return err
				}
				fmt.Fprintln(a.out(), leave.Done)
				return nil
			}
			nodes := a.snap.Data().Nodes
			leave := flow.NewLeave(rec, a.snap, p, d.DrainOptions, func(ctx context.Context, progress func(string)) error {
				if n, ok := a.snap.Node(node); !ok || kube.IsEtcdMember(n) {
					member, err := nodestate.RemoveEtcdMember(ctx, access, node, nodes)
					if err != nil {
						return fmt.Errorf("%w; %s stays drained and cordoned, in the cluster (sitecon uncordon %s takes it back)", err, node, node)
					}
					if member != "" {
						progress(fmt.Sprintf("etcd member %s removed", member))
					}
				}
				return writeRequest(ctx, progress)
			})
			leave.Done = done
			if err := a.run(&leave.Action); err != nil {
				return err
			}
			fmt.Fprintln(a.out(), leave.Done)
			return nil
		},
	}
	f.register(cmd)
	d.register(cmd)
	cmd.Flags().StringVar(&configPath, "config", filepath.Join(DefaultConfigDir, "cluster.json"), "this node's cluster config")
	cmd.Flags().StringVar(&k3sDataDir, "k3s-data-dir", k3s.DefaultPaths.DataDir, "k3s data directory (its etcd client certificate)")
	stateDirFlag(cmd, &stateDir)
	cmd.Flags().StringVar(&etcd.Endpoint, "etcd-endpoint", nodestate.K3sEtcdAccess("").Endpoint, "this node's etcd member, through which the member list is read (the removal is asked of the members that stay)")
	cmd.Flags().StringVar(&etcd.CertFile, "etcd-cert", "", "etcd client certificate (default <k3s-data-dir>/server/tls/etcd/client.crt; unused for http)")
	cmd.Flags().StringVar(&etcd.KeyFile, "etcd-key", "", "etcd client key (default <k3s-data-dir>/server/tls/etcd/client.key)")
	cmd.Flags().StringVar(&etcd.CAFile, "etcd-ca", "", "etcd server CA (default <k3s-data-dir>/server/tls/etcd/server-ca.crt)")
	cmd.Flags().StringVar(&agentSocket, "agent-socket", DefaultAgentSocket, "this node's agent socket: the request goes to the state directory that agent reads")
	return cmd
}

// sameStateDir refuses a state directory other than the one the agent on
// this node reads: a leave that drained the node and removed its etcd
// member, then wrote its request where the agent never looks, would leave
// k3s running without its member. An agent answering on socket says its
// state directory. One that answers without it either runs --no-bootstrap
// (its phase says so: it keeps no records by design, and reads no leave
// request) or is older than this sitecon (it reads its records beside its
// config); both are refused, each with its own reason. With no agent
// answering (stopped, or its socket elsewhere) the directory is taken only
// when given (given): the agent reads it when it starts, and the default
// may not be the one it is started with. agentRuns: an agent answered.
func sameStateDir(ctx context.Context, socket, dir string, given bool) (agentRuns bool, err error) {
	st, err := localapi.Get[agent.State](ctx, socket, localapi.PathAgent)
	switch {
	case err != nil && !given:
		return false, fmt.Errorf("no agent answers on %s (%v), so where it keeps its records is unknown: nothing done; "+
			"give --state-dir as the agent is started with (its --state-dir, default %s), or --agent-socket", socket, err, formation.DefaultStateDir)
	case err != nil:
		return false, nil
	case st.Phase == agent.PhaseExternal:
		return true, noBootstrapAgent(socket, st.Node)
	case st.StateDir == "":
		return true, fmt.Errorf("the agent on this node (%s) does not say where it keeps its records: it is older than this sitecon and reads its records beside its config, not in %s; "+
			"nothing done: restart the agent first (this release's agent moves its records to its state directory), then leave again", socket, dir)
	}
	if filepath.Clean(st.StateDir) == filepath.Clean(dir) {
		return true, nil
	}
	a, aerr := os.Stat(st.StateDir)
	b, berr := os.Stat(dir)
	if aerr == nil && berr == nil && os.SameFile(a, b) {
		return true, nil
	}
	return true, fmt.Errorf("the agent on this node (%s) keeps its records in %s, not %s: nothing done; give --state-dir %s",
		socket, ui.Clean(st.StateDir), dir, ui.Clean(st.StateDir))
}

// noBootstrapAgent is why a leave cannot be done beside an agent run with
// --no-bootstrap, and what to do instead. The leave's last step is the
// agent's: at its config poll it reads the request and stops k3s, the
// containers and the address. This agent started none of them and polls
// no config; a leave that drained the node and removed its etcd member
// would leave k3s running without it, with nothing of sitecon's to stop
// it. Drain and remove judge the same rules from another node.
func noBootstrapAgent(socket, node string) error {
	node = cmp.Or(ui.Clean(node), "NODE")
	return fmt.Errorf("the agent on this node (%s) runs --no-bootstrap: it did not start k3s here and keeps no record of this node's place in a cluster "+
		"(it has no state directory by design), so it reads no leave request and nothing would stop k3s once its etcd member is gone: nothing done. "+
		"Take %s out as its k3s was started: sitecon drain %s, stop k3s there, then from another node sitecon node remove %s", socket, node, node, node)
}

// leaveStops says why a leave judged by p does not go on (none: it goes
// on); force is --force. Refusals are final, as a remove's are: a leave
// that strands the last copy of a volume or etcd's quorum is not forced.
// (The drain's re-check before it cordons would stop it anyway, Reconfirm,
// saying the cluster changed: it did not.)
func leaveStops(p safety.Preflight, force bool) []string {
	if p.Refused() || (p.NeedsForce() && !force) {
		return append(append([]string{}, p.Refusals...), p.Warnings...)
	}
	return nil
}
