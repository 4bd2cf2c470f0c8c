package formation

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/sitecon/sitecon/agent/config"
)

// Formed is what forming a cluster did: the plan, this node's files, and
// the join lines for the others.
type Formed struct {
	Plan     *FormPlan
	ThisNode string
	Written  string // this node's config path; empty on a dry run
	Joins    []JoinLine
	// SaveProblem is why the bundles could not be saved (they are printed).
	SaveProblem string
}

// Lines are the join instructions for every other node: comments, then the
// bundle alone on its line, ready to paste into 'sitecon form --join -'.
func (f *Formed) Lines() []string {
	var out []string
	for _, j := range f.Joins {
		out = append(out, "# "+j.Node+": on "+j.Node+" run 'sitecon form --join -', paste the bundle below, then Ctrl-D")
		if j.File != "" {
			out = append(out, "#   or copy "+j.File+" there and run 'sitecon form --join "+filepath.Base(j.File)+"'")
		}
		out = append(out, j.Bundle)
	}
	return out
}

// JoinLine is one other node's bundle, and the file it was saved in.
type JoinLine struct{ Node, Bundle, File string }

// FormCluster plans the cluster and writes this node's config (unless
// dryRun). It refuses to move a node that belongs to another cluster.
// intend, when set, records the intent once the plan holds and before the
// first file is written; its error stops everything.
func FormCluster(req FormRequest, thisNode, dir string, force, dryRun bool, intend func() error) (*Formed, error) {
	plan, err := Plan(req)
	if err != nil {
		return nil, err
	}
	if thisNode == "" {
		thisNode = plan.Nodes[0].NodeName // the seed
	}
	var mine *JoinBundle
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
	if err := CheckOverwrite(files.ConfigPath, plan.ClusterID, force); err != nil {
		return nil, err
	}
	f := &Formed{Plan: plan, ThisNode: thisNode}
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
	f.Written = files.ConfigPath
	texts := map[string]string{}
	for _, n := range plan.Nodes {
		if n.NodeName == thisNode {
			continue
		}
		bundle, err := n.Encode()
		if err != nil {
			return nil, err
		}
		f.Joins = append(f.Joins, JoinLine{Node: n.NodeName, Bundle: bundle})
		texts[n.NodeName] = bundleFileText(n, bundle)
	}
	// Saved root-only beside the config, for copying to each node as a
	// file; the agent removes each once its node has joined. The config is
	// written already: a failure here is reported, the bundles are still
	// printed.
	paths, err := SaveJoinBundles(JoinBundlesDir(files.ConfigPath), texts)
	if err != nil {
		f.SaveProblem = err.Error()
	}
	for i := range f.Joins {
		f.Joins[i].File = paths[f.Joins[i].Node]
	}
	return f, nil
}

// bundleFileText is a saved bundle file: what it is, then the bundle.
func bundleFileText(n JoinBundle, bundle string) string {
	return fmt.Sprintf("# join bundle for %s in cluster %s (%s): it carries the cluster token, keep it private\n# on %s: sitecon form --join THIS-FILE\n%s\n",
		n.NodeName, n.ClusterName, n.ClusterID, n.NodeName, bundle)
}

// ReadJoinSource reads the bundle --join names: "-" is stdin, anything else
// a file holding it (a saved .bundle file, or the lines forming printed).
// A bundle given on the command line itself still works, with a warning:
// it is now in the shell's history and visible to every user in ps.
func ReadJoinSource(join string, stdin io.Reader, stderr io.Writer) (string, error) {
	if strings.HasPrefix(strings.TrimSpace(join), BundlePrefix) {
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
	text, err := BundleFromText(string(data))
	if err != nil {
		return "", fmt.Errorf("the join bundle from %s: %w", what, err)
	}
	return text, nil
}

func (f *Formed) Summary() []string {
	p := f.Plan
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

// CheckJoinsExisting refuses a bundle made on a running cluster that names
// the new node's own address as the join address: the node could only
// initialise a second cluster with the same ID and token there. A formation
// bundle may do so (the seed's own, when another node formed the cluster).
func CheckJoinsExisting(b JoinBundle) error {
	own, err := netip.ParsePrefix(b.ClusterIPPrefix)
	if err != nil || !b.ExistingCluster || own.Addr().String() != b.JoinServerIP {
		return nil
	}
	return fmt.Errorf("this bundle joins %s to an existing cluster (%s) through %s, its own address: it has no seed to join and must never initialise the cluster again; "+
		"on a live member move the seed (sitecon seed NODE) and make a new bundle (sitecon node replace or sitecon join-info)", b.NodeName, b.ClusterName, b.JoinServerIP)
}

// CheckOverwrite refuses to replace a node's config for another cluster
// unless forced: that would silently move the node to another cluster.
func CheckOverwrite(path, clusterID string, force bool) error {
	existing, err := config.Load(path)
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

// PlanJoin decodes a join bundle and checks it for this node: the files
// it would write under dir (iface: this node's cluster interface, when it
// differs from the seed's). A node of another cluster is not moved unless
// forced. The bundle is returned as far as it decoded, for the record.
func PlanJoin(text, dir, iface string, force bool) (JoinBundle, NodeFiles, error) {
	bundle, err := DecodeBundle(text)
	if err != nil {
		return JoinBundle{}, NodeFiles{}, err
	}
	if err := CheckJoinsExisting(bundle); err != nil {
		return bundle, NodeFiles{}, err
	}
	files, err := bundle.Files(dir, iface)
	if err != nil {
		return bundle, NodeFiles{}, err
	}
	return bundle, files, CheckOverwrite(files.ConfigPath, bundle.ClusterID, force)
}

// WriteJoin writes a joining node's files, and its records in the agent's
// state directory (records). A bundle made on a running cluster marks the
// node formed first: an agent that sees the config must already know the
// node never initialises this cluster. Records an older agent kept beside
// the config are copied first (Records.Upgrade), so that none of them comes
// back after this join; notes say what that did.
func WriteJoin(bundle JoinBundle, files NodeFiles, records Records) (notes []string, err error) {
	if err := records.Prepare(files.ConfigPath); err != nil {
		return nil, err
	}
	// The config's directory is the real one (the config goes there
	// now), so it is read even before the config is there.
	if notes, _, err = records.upgrade(files.ConfigPath, true); err != nil {
		return notes, err
	}
	// A technician giving a removed device a fresh bundle brings it back:
	// the removed marker goes first.
	if err := os.Remove(records.RemovedMarkerFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return notes, fmt.Errorf("clear the removed marker: %w", err)
	}
	// The upgrade left the original beside the config (for a rollback to
	// the release that reads it there); this join brings the device back
	// under that release too, as its own join did. Upgrade checked it is
	// a removed marker, not something else kept there.
	if old := filepath.Join(filepath.Dir(files.ConfigPath), removedMarkerName); old != filepath.Clean(files.ConfigPath) {
		if err := os.Remove(old); err != nil && !errors.Is(err, os.ErrNotExist) {
			return notes, fmt.Errorf("clear the removed marker an earlier agent kept beside the config: %w", err)
		}
	}
	if bundle.ExistingCluster {
		if err := MarkFormed(records.FormedMarkerFile(), FormedMarker{ClusterID: bundle.ClusterID,
			NodeName: bundle.NodeName, How: "given a join bundle made on the running cluster"}); err != nil {
			return notes, err
		}
	}
	return notes, files.Write()
}
