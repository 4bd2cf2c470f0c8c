package bundle

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
)

// Options say what a bundle is taken from.
type Options struct {
	// Clients reach the cluster; nil when its config could not be
	// loaded, and APIProblem says why.
	Clients    *kube.Clients
	APIProblem string
	// APIWait bounds each read of the cluster.
	APIWait time.Duration
	// NodeTimeout bounds each node's agent's answer.
	NodeTimeout time.Duration
	// Nodes are addresses to ask besides (or instead of, by node name)
	// the Node objects' InternalIPs: the way to reach the agents when
	// the cluster API does not answer.
	Nodes []NodeAddress
	// Reports are made by the caller (the status report, the doctor's)
	// and run beside the cluster's reads, first in the bundle.
	Reports []Source
	Local   Local
	// Dial opens the connections to the agents (nil: a plain dialer).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Redactor scrubs the files; the cluster's Secrets' values are added
	// to it before any file is written.
	Redactor *Redactor
	MaxBytes int64
	Version  string
}

// Take collects a bundle: the reports, the cluster's objects, every
// node's agent, this machine's files, each within its deadline, scrubbed
// and capped. It never fails: what did not arrive is listed as missing.
func Take(ctx context.Context, opts Options) *Archive {
	now := time.Now().UTC()
	r := opts.Redactor
	if r == nil {
		r = NewRedactor()
	}
	// The reports wait for the cluster on their own: they start at once,
	// beside the reads of the nodes and Secrets below (with the API down
	// each read waits its whole deadline).
	type collected struct {
		items   []Item
		missing []Missing
	}
	reports := make(chan collected, 1)
	go func() {
		items, missing := Collect(ctx, opts.Reports)
		reports <- collected{items, missing}
	}()
	var notes []string
	var missing []Missing
	var sources []Source
	nodes := opts.Nodes
	if opts.Clients == nil {
		missing = append(missing, Missing{Item: "the cluster's objects (nodes, events, etcd members, Longhorn, VMIs, ConfigMaps)", Why: opts.APIProblem})
	} else {
		// The nodes first: their addresses say where the agents are. A
		// cluster that does not give them gives nothing else either: its
		// reads are listed as missing once, with why.
		readCtx, cancel := context.WithTimeout(ctx, opts.APIWait)
		nodeList, err := opts.Clients.Core.CoreV1().Nodes().List(readCtx, metav1.ListOptions{})
		cancel()
		if err != nil {
			why := fmt.Sprintf("the cluster API at %s could not be read (waited up to %s): %v", opts.Clients.Config.Host, opts.APIWait, err)
			if hint := kube.APIDownHint(err.Error()); hint != "" {
				why += " (check: " + hint + ")"
			}
			missing = append(missing, Missing{Item: "the cluster's objects (nodes, events, etcd members, Longhorn, VMIs, ConfigMaps)", Why: why})
		} else {
			nodes = mergeNodes(NodeAddresses(nodeList.Items), opts.Nodes)
			readCtx, cancel := context.WithTimeout(ctx, opts.APIWait)
			if body, err := opts.Clients.Core.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(readCtx); err != nil {
				// An API server whose etcd lost quorum still answers
				// from its cache.
				notes = append(notes, fmt.Sprintf("the API server answered but does not say it is ready (%v%s): what it served may be old", err, readyzFailures(body)))
			}
			cancel()
			readCtx, cancel = context.WithTimeout(ctx, opts.APIWait)
			n, err := secretValues(readCtx, opts.Clients, r)
			cancel()
			if err != nil {
				notes = append(notes, "the cluster's Secrets could not be read to scrub their values ("+err.Error()+"): the fields that hold tokens and passwords were still redacted, and the cluster token wherever this machine holds it")
			} else {
				notes = append(notes, fmt.Sprintf("the values of the cluster's %d Secrets were scrubbed from every file; no Secret was collected", n))
			}
			sources = append(sources, clusterSources(opts.Clients, nodeList, opts.APIWait)...)
		}
	}
	if len(nodes) == 0 {
		missing = append(missing, Missing{Item: "the nodes' agents", Why: "no node address is known (the cluster API gave none): give --node NAME=ADDRESS for each node"})
	}
	sources = append(sources, agentSources(nodes, opts.NodeTimeout, opts.Dial)...)
	sources = append(sources, localSources(opts.Local, opts.APIWait)...)
	if !opts.Local.IsNode() {
		notes = append(notes, fmt.Sprintf("this machine is not a node (neither %s nor %s exists): no agent state or node logs were collected", opts.Local.StateDir, opts.Local.AgentSocket))
	}
	items, more := Collect(ctx, sources)
	rep := <-reports
	items = append(rep.items, items...)
	missing = append(append(missing, rep.missing...), more...)
	host, _ := os.Hostname()
	return Build("sitecon-bundle-"+now.Format("20060102T150405Z"), items, missing, r,
		Manifest{Created: now, Host: host, Version: opts.Version, MaxBytes: opts.MaxBytes, Notes: notes})
}

// mergeNodes is the Node objects' addresses with the given ones added,
// a given one replacing a node's own by name.
func mergeNodes(fromCluster, given []NodeAddress) []NodeAddress {
	out := append([]NodeAddress{}, given...)
	for _, n := range fromCluster {
		dup := false
		for _, g := range given {
			if g.Node == n.Node {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b NodeAddress) int { return cmp.Compare(a.Node, b.Node) })
	return out
}

// readyzFailures are the checks /readyz's answer says failed, as
// "; failed: etcd, ...", or nothing.
func readyzFailures(body []byte) string {
	var failed []string
	for _, line := range strings.Split(string(body), "\n") {
		if _, check, ok := strings.Cut(line, "[-]"); ok {
			failed = append(failed, strings.TrimSpace(check))
		}
	}
	if len(failed) == 0 {
		return ""
	}
	return "; failed: " + strings.Join(failed, ", ")
}
