package safety

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
)

// The drain, remove and replace preflight, read top to bottom: what it
// judges (DrainFacts), its verdict (Preflight), the rule (DrainPreflight:
// quorum, the last copy, the pods, pinned apps) and the re-check before
// the change (Reconfirm). kube.CheckDrain gathers the facts from the
// cluster once; the CLI, the console and agent leave all judge by this.

// ErrUnknownNode is returned for a node name the cluster does not have.
var ErrUnknownNode = errors.New("no such node")

// Purpose is what a preflight is for. A drain keeps the node's disks (the
// node comes back with its data); a remove, replace or leave ends them,
// and the node leaves the etcd member list.
type Purpose string

// The preflights' purposes.
const (
	PurposeDrain   Purpose = "drain"
	PurposeRemove  Purpose = "remove"
	PurposeReplace Purpose = "replace"
	// PurposeLeave is `sitecon agent leave`: a removal the node does to
	// itself, alive. It is judged as a remove is (quorum on the members
	// left, the last copy, the last server, the seed), less what a remove
	// judges only because it is done from another node to a dead device.
	PurposeLeave Purpose = "leave"
)

// PurposeOf maps an audit action ("drain", "remove-node", "replace-node",
// "leave") to the purpose its preflight judges.
func PurposeOf(action string) Purpose {
	switch action {
	case "remove-node":
		return PurposeRemove
	case "replace-node":
		return PurposeReplace
	case "leave":
		return PurposeLeave
	}
	return PurposeDrain
}

func (p Purpose) removes() bool {
	return p == PurposeRemove || p == PurposeReplace || p == PurposeLeave
}

// infinitive is what the technician does again once it is safe.
func (p Purpose) infinitive() string {
	switch p {
	case PurposeReplace:
		return "replace it"
	case PurposeDrain:
		return "drain it"
	}
	return "remove it"
}

func (p Purpose) verb() string {
	switch p {
	case PurposeRemove, PurposeLeave:
		return "removing"
	case PurposeReplace:
		return "replacing"
	}
	return "draining"
}

// DrainFacts is what the drain preflight judges, as plain values: the
// cluster as read, and the pods the drain would evict (from kubectl's
// drain filters). kube.DrainCheck.Facts gathers them from a snapshot.
type DrainFacts struct {
	Node  string
	Nodes []Node
	// Etcd is the member list the quorum arithmetic counts, and where it
	// came from.
	Etcd     EtcdQuorum
	Volumes  []*lhv1beta2.Volume
	Replicas []*lhv1beta2.Replica
	Apps     []App
	// MovablePods are the pods bound to the node of apps that may run
	// elsewhere (not pinned), not finished: evicted or not, each may have
	// a copy running on the device until it is known to have stopped.
	MovablePods []AppPod
	// Evict are the pods the drain would evict, namespace/name.
	Evict []string
	// Excluded says why the drain filters refuse pods (unmanaged, local
	// data), one line each.
	Excluded []string
	// LonghornPolicy is Longhorn's node-drain-policy setting, if read.
	LonghornPolicy string
	// Purpose: a drain (the zero value), a remove or a replace.
	Purpose Purpose
	// LocalNode is the node this program runs on, when known: a node does
	// not remove itself.
	LocalNode string
}

// Node is a Node of the cluster as the preflights see it.
type Node struct {
	Name  string
	Ready bool
	// Server: a control-plane or etcd node; a remove never takes the last.
	Server bool
	// EtcdMember: the Node carries the etcd role label.
	EtcdMember bool
	// Cordoned: the Node is unschedulable.
	Cordoned bool
	// InternalIP is the Node's cluster address, "" when it has none.
	InternalIP string
	Labels     map[string]string
}

// nodeNames lists node names, sorted, for messages.
func nodeNames(nodes []Node) string {
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// App is an app as the drain preflight sees it: a pinned app that runs
// ready on the node stops until the node is back.
type App struct {
	Name, Node    string
	Pinned, Ready bool
}

// AppPod is a pod of an app, namespace/name.
type AppPod struct {
	Pod, App string
	// HeldByAVolume: the pod mounts a claim, whose attachment holds the
	// replacement until the failover releases it.
	HeldByAVolume bool
}

// Preflight is the drain's verdict before anything changes. Refusals stop
// it; Warnings need --force and the node name typed to go on.
type Preflight struct {
	Node     string   `json:"node"`
	Refusals []string `json:"refusals,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Evict are the pods that would be evicted, namespace/name.
	Evict []string `json:"evict"`
	Notes []string `json:"notes,omitempty"`
	// Purpose and LocalNode are what it was judged for: the re-check at
	// confirmation judges the same.
	Purpose   Purpose `json:"purpose,omitempty"`
	LocalNode string  `json:"local_node,omitempty"`
}

// Refused reports whether the drain must not run.
func (p Preflight) Refused() bool { return len(p.Refusals) > 0 }

// NeedsForce reports whether the drain may only run with --force.
func (p Preflight) NeedsForce() bool { return len(p.Warnings) > 0 }

// DrainPreflight judges a drain, remove or replace (c.Purpose).
//
// Quorum is arithmetic: with M etcd members, floor(M/2)+1 must stay healthy
// with the node out; the refusal says the numbers. The members are etcd's
// own list as the agents publish it, each healthy when etcd's status call
// answered and its Node is Ready and not cordoned (kube.EtcdQuorumMembers).
// A list that is missing, stale or otherwise not to be counted on leaves
// quorum unknown: a server's drain, remove, replace or leave is refused
// with why, never judged on the Nodes' etcd role label instead.
// A remove or leave that leaves the cluster unable to take a failure warns
// (needs --force); so does removing a node that is still Ready. A remove
// never takes the last server or the node this runs on; a leave never
// takes the last server, and is by definition the node it runs on, alive.
//
// The last copy stays: every replica that holds a volume's up-to-date data
// counts (UpToDate: running, stopped, or failed but what Longhorn
// would salvage), and only copies on other nodes that are there and Ready
// count as elsewhere, and not on a cordoned node (draining too: when a
// whole site asks for drains at once, no node's copy is a home for
// another's). A remove, replace or leave of the node holding the only
// copy is refused. A drain of it is refused when the volume is attached
// and its copy here is running (its app would stop with nowhere to go),
// and needs --force when the volume is detached (its data stays on the
// node's disk; it cannot attach until the node is back); under Longhorn's
// block-for-eviction policies Longhorn copies it off first, so a drain only
// warns. Under always-allow, Longhorn guards nothing: that is said.
//
// Pods kubectl's filters refuse are refusals; pinned apps that would stop
// are warnings.
func DrainPreflight(c DrainFacts) Preflight {
	purpose := cmp.Or(c.Purpose, PurposeDrain)
	p := Preflight{Node: c.Node, Evict: []string{}, Purpose: purpose, LocalNode: c.LocalNode}
	var target *Node
	for i, n := range c.Nodes {
		if n.Name == c.Node {
			target = &c.Nodes[i]
		}
	}
	if target == nil {
		p.Refusals = append(p.Refusals, fmt.Sprintf("%s: %v", c.Node, ErrUnknownNode))
		return p
	}
	quorumChecks(&p, c, target, purpose)
	copiesMayRunChecks(&p, c, target, purpose)
	copyChecks(&p, c, purpose)
	p.Refusals = append(p.Refusals, c.Excluded...)
	for _, a := range c.Apps {
		if a.Pinned && a.Node == c.Node && a.Ready {
			p.Warnings = append(p.Warnings, fmt.Sprintf("pinned app %s runs on %s and will stop until the node is back", a.Name, c.Node))
		}
	}
	p.Evict = append(p.Evict, c.Evict...)
	slices.Sort(p.Evict)
	if c.LonghornPolicy != "" {
		p.Notes = append(p.Notes, "Longhorn node-drain-policy: "+c.LonghornPolicy+" (its PodDisruptionBudgets are honoured: pods are evicted, never deleted)")
	}
	return p
}

// quorumChecks: the etcd arithmetic, and what a remove must never take.
func quorumChecks(p *Preflight, c DrainFacts, target *Node, purpose Purpose) {
	if c.Etcd.FromEtcd {
		quorumArithmetic(p, c, target, purpose)
	} else {
		quorumUnknown(p, c, target, purpose)
	}
	if !purpose.removes() {
		return
	}
	if target.Server {
		last := true
		for _, n := range c.Nodes {
			if n.Name != c.Node && n.Server {
				last = false
			}
		}
		if last {
			p.Refusals = append(p.Refusals, fmt.Sprintf("%s is the last server: %s it ends the cluster", c.Node, purpose.verb()))
		}
	}
	if purpose == PurposeLeave {
		return
	}
	if c.LocalNode != "" && c.LocalNode == c.Node {
		p.Refusals = append(p.Refusals, fmt.Sprintf("%s is the node this runs on: a node does not remove itself; run this from another node", c.Node))
	}
	if target.Ready {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%s is Ready (the device is alive): %s a live node needs --force and its name typed; to service it, drain it instead", c.Node, purpose.verb()))
	}
}

// copiesMayRunChecks: a node not Ready may be cut off or paused, its apps
// still running; only the failover's evidence says they stopped (safety
// rule 6). Deleting the Node (remove, replace) deletes its pods at once
// (Kubernetes' pod garbage collector), and their apps start elsewhere.
// A drain's evictions start the replacements at once too, and only a
// volume holds one (the failover releases it on the evidence): a drain
// warns for the apps no volume holds. Once the device has fenced or
// fallen silent, the failover moves them and no such pod is left.
func copiesMayRunChecks(p *Preflight, c DrainFacts, target *Node, purpose Purpose) {
	if target.Ready || purpose == PurposeLeave {
		return
	}
	var pods []AppPod
	for _, ap := range c.MovablePods {
		if purpose.removes() || !ap.HeldByAVolume {
			pods = append(pods, ap)
		}
	}
	if len(pods) == 0 {
		return
	}
	p.Warnings = append(p.Warnings, fmt.Sprintf("%s is not Ready, but pods of apps that move are still bound to it and nothing shows yet that their copies there stopped (the device may be cut off or paused, still running them): %s it now starts them elsewhere beside those copies. Power the device off and wait for the failover to move them (once it has fenced or fallen silent), then %s; --force only if you know the device is off", c.Node, purpose.verb(), purpose.infinitive()))
	for _, ap := range pods {
		p.Notes = append(p.Notes, fmt.Sprintf("app %s's pod %s is bound to %s", ap.App, ap.Pod, c.Node))
	}
}

// quorumArithmetic: the arithmetic over etcd's own member list.
func quorumArithmetic(p *Preflight, c DrainFacts, target *Node, purpose Purpose) {
	members := c.Etcd
	q := TakeOut(members.Members, c.Node, purpose.verb())
	if q.IsMember || target.EtcdMember {
		// Never silent about which list was counted, nor about a server
		// the list does not have.
		p.Notes = append(p.Notes, members.Source)
		p.Notes = append(p.Notes, members.Learners...)
		p.Notes = append(p.Notes, members.Ignored...)
	}
	switch {
	case !q.IsMember:
	case !q.Holds():
		p.Refusals = append(p.Refusals, q.String()+": etcd would lose quorum and the cluster would stop answering")
	case purpose.removes():
		after := q.AfterRemoval()
		if after.Members < 3 || after.Spare() < 1 {
			msg := fmt.Sprintf("after %s %s: %d etcd member%s, %d healthy, quorum needs %d: the cluster no longer tolerates a failure",
				purpose.verb(), c.Node, after.Members, plural(after.Members), after.Healthy, after.Needed)
			if after.Members < 3 {
				msg += " (it takes three servers to)"
			}
			if purpose == PurposeReplace {
				// The new device restores the count once it joins.
				p.Notes = append(p.Notes, msg+" until the new node has joined")
			} else {
				p.Warnings = append(p.Warnings, msg)
			}
		}
	case q.Spare() < 1:
		p.Notes = append(p.Notes, q.String()+": one more failure loses quorum")
	}
}

// quorumUnknown: with no member list to count on, taking a server out is
// refused, whatever the Nodes' labels would count. A node the labels do
// not call a server (a k3s agent) runs no etcd member: its drain needs no
// quorum. A server without the etcd label is refused too: with etcd's list
// unknown, nothing says it runs no member.
func quorumUnknown(p *Preflight, c DrainFacts, target *Node, purpose Purpose) {
	if !target.Server && !target.EtcdMember {
		return
	}
	why := cmp.Or(c.Etcd.Unknown, "etcd's member list was not read")
	p.Refusals = append(p.Refusals, fmt.Sprintf("etcd's quorum is unknown, so %s %s cannot be judged: %s", purpose.verb(), c.Node, why))
	if say := c.Etcd.LabelledSay(); say != "" {
		p.Notes = append(p.Notes, say)
	}
	p.Notes = append(p.Notes, c.Etcd.Ignored...)
}

// lastCopy is a volume whose only up-to-date copy is on the node.
type lastCopy struct {
	label string
	// inUse: the volume is attached or its copy here is running: the
	// classic "only healthy replica", whose app stops with the node.
	inUse bool
	// how the copy here stands, for a volume not in use ("replica stopped,
	// volume detached").
	how string
	// discounted names copies elsewhere that do not count (their node is
	// NotReady or gone).
	discounted []string
}

// lastCopies lists the volumes whose every up-to-date copy is on node.
func lastCopies(c DrainFacts, node string) []lastCopy {
	ready, cordoned := map[string]bool{}, map[string]bool{}
	for _, n := range c.Nodes {
		ready[n.Name], cordoned[n.Name] = n.Ready, n.Cordoned
	}
	byVolume := map[string][]*lhv1beta2.Replica{}
	for _, r := range c.Replicas {
		byVolume[r.Spec.VolumeName] = append(byVolume[r.Spec.VolumeName], r)
	}
	var out []lastCopy
	for _, v := range c.Volumes {
		var here *lhv1beta2.Replica
		elsewhere := false
		var discounted []string
		for _, r := range UpToDate(byVolume[v.Name]) {
			switch up, known := ready[r.Spec.NodeID]; {
			case r.Spec.NodeID == node:
				here = r
			case !known:
				discounted = append(discounted, r.Spec.NodeID+" is not in the cluster")
			case !up:
				discounted = append(discounted, r.Spec.NodeID+" is NotReady")
			case cordoned[r.Spec.NodeID]:
				// A cordoned node is on its way out (another drain, a
				// whole site asking at once): its copy goes down with it.
				discounted = append(discounted, r.Spec.NodeID+" is cordoned (draining or out of service)")
			default:
				elsewhere = true
			}
		}
		if here == nil || elsewhere {
			continue
		}
		// In use: attached, or its copy here runs (a replica runs only
		// for an attached volume, whatever the volume's status says yet).
		attached := v.Status.State == lhv1beta2.VolumeStateAttached || v.Status.State == lhv1beta2.VolumeStateAttaching
		running := here.Status.CurrentState == lhv1beta2.InstanceStateRunning && here.Spec.FailedAt == ""
		lc := lastCopy{label: VolumeLabel(v), discounted: discounted, inUse: attached || running}
		state := cmp.Or(string(here.Status.CurrentState), "unknown")
		if here.Spec.FailedAt != "" {
			state = "failed at " + here.Spec.FailedAt + ", the last to fail"
		}
		lc.how = fmt.Sprintf("replica %s, volume %s", state, cmp.Or(string(v.Status.State), "in an unknown state"))
		out = append(out, lc)
	}
	slices.SortFunc(out, func(a, b lastCopy) int { return strings.Compare(a.label, b.label) })
	return out
}

// copyChecks: the last copy stays.
func copyChecks(p *Preflight, c DrainFacts, purpose Purpose) {
	copies := lastCopies(c, c.Node)
	var inUse []string
	var why []string
	for _, lc := range copies {
		for _, d := range lc.discounted {
			why = append(why, fmt.Sprintf("%s: the copy on %s does not count", lc.label, d))
		}
		if lc.inUse {
			inUse = append(inUse, lc.label)
		}
	}
	evictsFirst := longhornEvictsFirst(c.LonghornPolicy)
	var msgs []string
	if len(inUse) > 0 {
		msgs = append(msgs, fmt.Sprintf("%s holds the only healthy replica of %s", c.Node, strings.Join(inUse, ", ")))
	}
	for _, lc := range copies {
		if !lc.inUse {
			msgs = append(msgs, fmt.Sprintf("%s holds the only up-to-date copy of %s: %s", c.Node, lc.label, lc.how))
		}
	}
	for i, msg := range msgs {
		detached := i > 0 || len(inUse) == 0
		switch {
		case purpose.removes():
			p.Refusals = append(p.Refusals, msg+"; "+purpose.verb()+" "+c.Node+" would discard it. Copy it off first: drain "+c.Node+" under Longhorn's node-drain-policy block-for-eviction, or add a replica on another node")
		case evictsFirst:
			// Longhorn's instance-manager budget holds the drain until it
			// has copied those replicas off: slow, but nothing is stranded.
			p.Warnings = append(p.Warnings, msg+"; Longhorn ("+c.LonghornPolicy+") copies it off first and the drain waits for that")
		case detached:
			// Nothing runs on it: the data stays on the node's disk, but no
			// app can use the volume until the node is back.
			p.Warnings = append(p.Warnings, msg+"; while "+c.Node+" is out the volume cannot attach anywhere")
		default:
			p.Refusals = append(p.Refusals, msg)
		}
	}
	if len(msgs) > 0 {
		p.Notes = append(p.Notes, why...)
	}
	if c.LonghornPolicy == "always-allow" {
		var held []string
		for _, v := range c.Volumes {
			for _, r := range UpToDate(replicasOf(c.Replicas, v.Name)) {
				if r.Spec.NodeID == c.Node {
					held = append(held, VolumeLabel(v))
					break
				}
			}
		}
		if len(held) > 0 {
			slices.Sort(held)
			p.Warnings = append(p.Warnings, fmt.Sprintf("Longhorn's node-drain-policy is always-allow: Longhorn does not hold the drain for %s's replicas (%s); only this check and the drain's own watch of those volumes guard them", c.Node, strings.Join(held, ", ")))
		}
	}
}

func replicasOf(replicas []*lhv1beta2.Replica, volume string) []*lhv1beta2.Replica {
	var out []*lhv1beta2.Replica
	for _, r := range replicas {
		if r.Spec.VolumeName == volume {
			out = append(out, r)
		}
	}
	return out
}

// longhornEvictsFirst: under these node-drain-policy values Longhorn moves
// replicas off a draining node before its instance manager may go, so a
// last healthy replica there is copied, not stranded. Under the others
// (block-if-contains-last-replica, the default, allow-if-replica-is-stopped,
// always-allow) the preflight refuses that case itself.
func longhornEvictsFirst(policy string) bool {
	return policy == "block-for-eviction" || policy == "block-for-eviction-if-contains-last-replica"
}

// VolumeLabel names a volume by its claim when Longhorn knows it.
func VolumeLabel(v *lhv1beta2.Volume) string {
	if ks := v.Status.KubernetesStatus; ks.PVCName != "" {
		return v.Name + " (" + ks.Namespace + "/" + ks.PVCName + ")"
	}
	return v.Name
}

// Reconfirm judges a preflight taken just before the drain against the one
// that was confirmed: any refusal now stops it, and so does a warning the
// user did not accept (a pinned app that came to the node since). More or
// fewer pods to evict is the drain's ordinary business.
func Reconfirm(confirmed, now Preflight) []string {
	reasons := slices.Clone(now.Refusals)
	for _, w := range now.Warnings {
		if !slices.Contains(confirmed.Warnings, w) {
			reasons = append(reasons, "not confirmed: "+w)
		}
	}
	return reasons
}
