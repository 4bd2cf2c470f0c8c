package kube

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"

	"github.com/sitecon/sitecon/kube/safety"
)

// Labels and keys the actions read and write.
const (
	// LabelEtcd marks a node that runs an etcd member.
	LabelEtcd = "node-role.kubernetes.io/etcd"
	// PlacementConfigMapName holds on-site placement overrides (app UUID →
	// JSON PlacementOverride), read by every agent.
	PlacementConfigMapName = "sitecon-placement"
	// AnnotationConfigDNId on an app's workload is its designated_node_id
	// in the app config; an override must name it to hold.
	AnnotationConfigDNId = "sitecon.io/config-dnid"
	// AnnotationConfigVersion on an app's workload is the version of the
	// app config it was laid out from; an override records it.
	AnnotationConfigVersion = "sitecon.io/config-version"
	// AnnotationVNCPort on a VM app's VMI is the port of its VNC console.
	AnnotationVNCPort = "sitecon.io/vnc-port"
	// ClusterKeySeedNode names the seed node in the sitecon-cluster ConfigMap.
	ClusterKeySeedNode = "seed_node"
	// ClusterKeyNodes lists the cluster's nodes (comma-separated) in the
	// sitecon-cluster ConfigMap.
	ClusterKeyNodes = "nodes"
	// LonghornDrainPolicySetting is Longhorn's node drain policy setting.
	LonghornDrainPolicySetting = "node-drain-policy"
)

// ErrUnknownNode is returned for a node name the cluster does not have.
var ErrUnknownNode = errors.New("no such node")

// Purpose is what a preflight is for. A drain keeps the node's disks (the
// node comes back with its data); a remove or replace ends them, and the
// node leaves the etcd member list.
type Purpose string

// The preflights' purposes.
const (
	PurposeDrain   Purpose = "drain"
	PurposeRemove  Purpose = "remove"
	PurposeReplace Purpose = "replace"
)

// PurposeOf maps an audit action ("drain", "remove-node", "replace-node")
// to the purpose its preflight judges.
func PurposeOf(action string) Purpose {
	switch action {
	case "remove-node":
		return PurposeRemove
	case "replace-node":
		return PurposeReplace
	}
	return PurposeDrain
}

func (p Purpose) removes() bool { return p == PurposeRemove || p == PurposeReplace }

func (p Purpose) verb() string {
	switch p {
	case PurposeRemove:
		return "removing"
	case PurposeReplace:
		return "replacing"
	}
	return "draining"
}

// DrainCheck is what the drain preflight judges: the cluster as read, and
// the pods the drain would evict (from kubectl's drain filters).
type DrainCheck struct {
	Node     string
	Data     Data
	Apps     []AppStatus
	Evict    []corev1.Pod
	Excluded []error // pods the drain filters refuse (unmanaged, local data)
	// LonghornPolicy is Longhorn's node-drain-policy setting, if read.
	LonghornPolicy string
	// Purpose: a drain (the zero value), a remove or a replace.
	Purpose Purpose
	// LocalNode is the node this program runs on, when known: a node does
	// not remove itself.
	LocalNode string
	// Now judges the age of the published etcd member list; zero: the
	// current time.
	Now time.Time
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

// EtcdMembersFromNodes is the etcd member list as the Nodes tell it: every
// Node with the etcd role label; healthy when Ready and not cordoned.
func EtcdMembersFromNodes(nodes []*corev1.Node) []safety.Member {
	var out []safety.Member
	for _, n := range nodes {
		if !IsEtcdMember(n) {
			continue
		}
		m := safety.Member{Name: n.Name}
		switch {
		case !NodeIsReady(n):
			m.Down = "NotReady"
		case n.Spec.Unschedulable:
			m.Down = "cordoned"
		}
		out = append(out, m)
	}
	return out
}

// DrainPreflight judges a drain, remove or replace (c.Purpose).
//
// Quorum is arithmetic: with M etcd members, floor(M/2)+1 must stay healthy
// with the node out; the refusal says the numbers. The members are etcd's
// own list as the agents publish it, each healthy when etcd's status call
// answered and its Node is Ready and not cordoned (EtcdQuorumMembers); a
// list that is missing or stale gives way to the Nodes' etcd role label,
// and a note says which was counted.
// A remove that leaves the cluster unable to take a failure warns (needs
// --force); so does removing a node that is still Ready. A remove never
// takes the last server or the node this runs on.
//
// The last copy stays: every replica that holds a volume's up-to-date data
// counts (safety.UpToDate: running, stopped, or failed but what Longhorn
// would salvage), and only copies on other nodes that are there and Ready
// count as elsewhere. A remove or replace of the node holding the only
// copy is refused. A drain of it is refused when the volume is attached
// and its copy here is running (its app would stop with nowhere to go),
// and needs --force when the volume is detached (its data stays on the
// node's disk; it cannot attach until the node is back); under Longhorn's
// block-for-eviction policies Longhorn copies it off first, so a drain only
// warns. Under always-allow, Longhorn guards nothing: that is said.
//
// Pods kubectl's filters refuse are refusals; pinned apps that would stop
// are warnings.
func DrainPreflight(c DrainCheck) Preflight {
	purpose := cmp.Or(c.Purpose, PurposeDrain)
	p := Preflight{Node: c.Node, Evict: []string{}, Purpose: purpose, LocalNode: c.LocalNode}
	var target *corev1.Node
	for _, n := range c.Data.Nodes {
		if n.Name == c.Node {
			target = n
		}
	}
	if target == nil {
		p.Refusals = append(p.Refusals, fmt.Sprintf("%s: %v", c.Node, ErrUnknownNode))
		return p
	}
	quorumChecks(&p, c, target, purpose)
	copyChecks(&p, c, purpose)
	for _, err := range c.Excluded {
		p.Refusals = append(p.Refusals, err.Error())
	}
	for _, a := range c.Apps {
		if a.Mode == AppModePinned && a.Node == c.Node && a.Ready {
			p.Warnings = append(p.Warnings, fmt.Sprintf("pinned app %s runs on %s and will stop until the node is back", a.Name, c.Node))
		}
	}
	for _, pod := range c.Evict {
		p.Evict = append(p.Evict, pod.Namespace+"/"+pod.Name)
	}
	slices.Sort(p.Evict)
	if c.LonghornPolicy != "" {
		p.Notes = append(p.Notes, "Longhorn node-drain-policy: "+c.LonghornPolicy+" (its PodDisruptionBudgets are honoured: pods are evicted, never deleted)")
	}
	return p
}

// quorumChecks: the etcd arithmetic, and what a remove must never take.
func quorumChecks(p *Preflight, c DrainCheck, target *corev1.Node, purpose Purpose) {
	now := c.Now
	if now.IsZero() {
		now = time.Now()
	}
	members := EtcdQuorumMembers(c.Data, now)
	q := safety.TakeOut(members.Members, c.Node, purpose.verb())
	if q.IsMember || IsEtcdMember(target) {
		// Never silent about which list was counted: a fallback to the
		// labels is said, and so is a server the list does not have.
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
	if !purpose.removes() {
		return
	}
	if IsServer(target) || IsEtcdMember(target) {
		last := true
		for _, n := range c.Data.Nodes {
			if n.Name != c.Node && (IsServer(n) || IsEtcdMember(n)) {
				last = false
			}
		}
		if last {
			p.Refusals = append(p.Refusals, fmt.Sprintf("%s is the last server: %s it ends the cluster", c.Node, purpose.verb()))
		}
	}
	if c.LocalNode != "" && c.LocalNode == c.Node {
		p.Refusals = append(p.Refusals, fmt.Sprintf("%s is the node this runs on: a node does not remove itself; run this from another node", c.Node))
	}
	if NodeIsReady(target) {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%s is Ready (the device is alive): %s a live node needs --force and its name typed; to service it, drain it instead", c.Node, purpose.verb()))
	}
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
func lastCopies(d Data, node string) []lastCopy {
	ready := map[string]bool{}
	for _, n := range d.Nodes {
		ready[n.Name] = NodeIsReady(n)
	}
	byVolume := map[string][]*lhv1beta2.Replica{}
	for _, r := range d.Replicas {
		byVolume[r.Spec.VolumeName] = append(byVolume[r.Spec.VolumeName], r)
	}
	var out []lastCopy
	for _, v := range d.Volumes {
		var here *lhv1beta2.Replica
		elsewhere := false
		var discounted []string
		for _, r := range safety.UpToDate(byVolume[v.Name]) {
			switch up, known := ready[r.Spec.NodeID]; {
			case r.Spec.NodeID == node:
				here = r
			case !known:
				discounted = append(discounted, r.Spec.NodeID+" is not in the cluster")
			case !up:
				discounted = append(discounted, r.Spec.NodeID+" is NotReady")
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
		lc := lastCopy{label: volumeLabel(v), discounted: discounted, inUse: attached || running}
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
func copyChecks(p *Preflight, c DrainCheck, purpose Purpose) {
	copies := lastCopies(c.Data, c.Node)
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
		for _, v := range c.Data.Volumes {
			for _, r := range safety.UpToDate(replicasOf(c.Data, v.Name)) {
				if r.Spec.NodeID == c.Node {
					held = append(held, volumeLabel(v))
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

func replicasOf(d Data, volume string) []*lhv1beta2.Replica {
	var out []*lhv1beta2.Replica
	for _, r := range d.Replicas {
		if r.Spec.VolumeName == volume {
			out = append(out, r)
		}
	}
	return out
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// longhornEvictsFirst: under these node-drain-policy values Longhorn moves
// replicas off a draining node before its instance manager may go, so a
// last healthy replica there is copied, not stranded. Under the others
// (block-if-contains-last-replica, the default, allow-if-replica-is-stopped,
// always-allow) the preflight refuses that case itself.
func longhornEvictsFirst(policy string) bool {
	return policy == "block-for-eviction" || policy == "block-for-eviction-if-contains-last-replica"
}

// volumeLabel names a volume by its claim when Longhorn knows it.
func volumeLabel(v *lhv1beta2.Volume) string {
	if ks := v.Status.KubernetesStatus; ks.PVCName != "" {
		return v.Name + " (" + ks.Namespace + "/" + ks.PVCName + ")"
	}
	return v.Name
}

// DrainOptions tune a drain.
type DrainOptions struct {
	// GracePeriod for each pod; negative: the pod's own.
	GracePeriod time.Duration
	// Timeout bounds the whole drain (0: none).
	Timeout            time.Duration
	DeleteEmptyDirData bool
	// Progress receives one line per pod step (evicting, evicted, waiting
	// on a disruption budget, failed), one call at a time, though from
	// the evictions' goroutines.
	Progress func(DrainStep)
	// Purpose and LocalNode are what CheckDrain judges for (DrainCheck).
	Purpose   Purpose
	LocalNode string
}

// DrainStep is one step of a drain, for progress display.
type DrainStep struct {
	Pod     string `json:"pod,omitempty"`
	Phase   string `json:"phase"` // evicting, evicted, waiting, failed
	Message string `json:"message,omitempty"`
}

func (o DrainOptions) helper(ctx context.Context, cs kubernetes.Interface) *drain.Helper {
	// kubectl's drain helper evicts each pod in a goroutine of its own and
	// tells of it from there: the steps are handed on one at a time, so
	// that whoever counts or prints them needs no lock of its own.
	var mu sync.Mutex
	progress := func(s DrainStep) {
		if o.Progress == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		o.Progress(s)
	}
	grace := -1
	if o.GracePeriod >= 0 {
		grace = int(o.GracePeriod / time.Second)
	}
	return &drain.Helper{
		Ctx: ctx, Client: cs, GracePeriodSeconds: grace, Timeout: o.Timeout,
		IgnoreAllDaemonSets: true, DeleteEmptyDirData: o.DeleteEmptyDirData,
		EvictErrorRetryDelay: 2 * time.Second,
		Out:                  io.Discard,
		// kubectl reports a budget that blocks an eviction only as text.
		ErrOut: lineWriter(func(line string) { progress(DrainStep{Phase: "waiting", Message: line}) }),
		OnPodDeletionOrEvictionStarted: func(pod *corev1.Pod, _ bool) {
			progress(DrainStep{Pod: pod.Namespace + "/" + pod.Name, Phase: "evicting"})
		},
		OnPodDeletionOrEvictionFinished: func(pod *corev1.Pod, _ bool, err error) {
			step := DrainStep{Pod: pod.Namespace + "/" + pod.Name, Phase: "evicted"}
			if err != nil {
				step.Phase, step.Message = "failed", err.Error()
			}
			progress(step)
		},
	}
}

// CheckDrain reads what a drain of node would do and judges it. The reads
// are one-shot: a drain is an action, not steady state.
// opts are the drain's own, so the filters judge the pods as the drain will
// (with DeleteEmptyDirData, a pod with emptyDir data is evicted, not refused).
// Whether Longhorn is installed is asked again here, not taken from when
// the snapshot started: a console opened before Longhorn was installed
// must still judge the replicas.
func CheckDrain(ctx context.Context, clients *Clients, d Data, node string, opts DrainOptions) (Preflight, error) {
	if !slices.ContainsFunc(d.Nodes, func(n *corev1.Node) bool { return n.Name == node }) {
		return Preflight{}, fmt.Errorf("%s: %w (nodes: %s)", node, ErrUnknownNode, NodeNames(d.Nodes))
	}
	d, err := withLonghorn(ctx, clients, d)
	if err != nil {
		return Preflight{}, err
	}
	purpose, local := opts.Purpose, opts.LocalNode
	opts.Progress = nil
	h := opts.helper(ctx, clients.Core)
	list, errs := h.GetPodsForDeletion(node)
	check := DrainCheck{Node: node, Data: d, Apps: appStatuses(d), Excluded: errs, Purpose: purpose, LocalNode: local, Now: time.Now()}
	if list != nil {
		check.Evict = list.Pods()
	}
	if d.HasLonghorn {
		if s, err := clients.Longhorn.LonghornV1beta2().Settings(LonghornNamespace).Get(ctx, LonghornDrainPolicySetting, metav1.GetOptions{}); err == nil {
			check.LonghornPolicy = s.Value
		}
	}
	return DrainPreflight(check), nil
}

// longhornInstalled asks the API server whether Longhorn's volumes exist.
// An answer that cannot be had is an error, not "no Longhorn": unknown is
// not empty, and a preflight that skipped the replicas would pass a drain
// that strands the last copy.
func longhornInstalled(ctx context.Context, clients *Clients) (bool, error) {
	list, err := clients.Core.Discovery().ServerResourcesForGroupVersion(lhv1beta2.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cannot tell whether Longhorn is installed (discovery of %s: %w); not judging a drain without its replicas", lhv1beta2.SchemeGroupVersion, err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "volumes" }), nil
}

// withLonghorn fills d's Longhorn volumes and replicas from the API server
// when the snapshot was started without them and Longhorn exists now.
func withLonghorn(ctx context.Context, clients *Clients, d Data) (Data, error) {
	has, err := longhornInstalled(ctx, clients)
	if err != nil || !has || d.HasLonghorn {
		return d, err
	}
	return readLonghorn(ctx, clients, d)
}

func readLonghorn(ctx context.Context, clients *Clients, d Data) (Data, error) {
	lh := clients.Longhorn.LonghornV1beta2()
	volumes, err := lh.Volumes(LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	replicas, err := lh.Replicas(LonghornNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	d.HasLonghorn = true
	d.Volumes, d.Replicas = nil, nil
	for i := range volumes.Items {
		d.Volumes = append(d.Volumes, &volumes.Items[i])
	}
	for i := range replicas.Items {
		d.Replicas = append(d.Replicas, &replicas.Items[i])
	}
	return d, nil
}

// PlanChangedError is a drain stopped before it began: between the
// preflight that was confirmed and the drain, the cluster changed so that
// the drain would not be the one confirmed. Nothing was changed.
type PlanChangedError struct {
	Node    string
	Reasons []string
}

func (e *PlanChangedError) Error() string {
	return fmt.Sprintf("the cluster changed since the preflight of %s was confirmed: %s", e.Node, strings.Join(e.Reasons, "; "))
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

// DrainAsConfirmed drains confirmed.Node only if a preflight taken now, from
// the API server itself rather than a watch cache, still agrees with the one
// the user confirmed (Reconfirm); otherwise it returns a *PlanChangedError
// and changes nothing. A confirmation can sit on screen for minutes while a
// replica elsewhere fails or another server drops out.
//
// While the pods are evicted (minutes, behind disruption budgets), the
// volumes whose data is on the node are watched: if one loses an
// up-to-date copy elsewhere or turns faulted, the evictions stop, the node
// stays cordoned, and a *DrainStoppedError says why.
func DrainAsConfirmed(ctx context.Context, clients *Clients, d Data, confirmed Preflight, opts DrainOptions) error {
	opts.Purpose, opts.LocalNode = confirmed.Purpose, confirmed.LocalNode
	fresh, err := freshDrainData(ctx, clients, d)
	if err != nil {
		return fmt.Errorf("re-checking %s before the drain: %w; nothing was changed", confirmed.Node, err)
	}
	now, err := CheckDrain(ctx, clients, fresh, confirmed.Node, opts)
	if err != nil {
		return fmt.Errorf("re-checking %s before the drain: %w; nothing was changed", confirmed.Node, err)
	}
	if reasons := Reconfirm(confirmed, now); len(reasons) > 0 {
		return &PlanChangedError{Node: confirmed.Node, Reasons: reasons}
	}
	if !fresh.HasLonghorn {
		return Drain(ctx, clients.Core, confirmed.Node, opts)
	}
	drainCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	watching, err := watchCopies(drainCtx, clients, confirmed.Node, fresh, func(reasons []string) {
		stop(&DrainStoppedError{Node: confirmed.Node, Reasons: reasons})
	})
	if err != nil {
		return fmt.Errorf("watching %s's volumes for the drain: %w; nothing was changed", confirmed.Node, err)
	}
	defer watching()
	err = Drain(drainCtx, clients.Core, confirmed.Node, opts)
	if stopped := (*DrainStoppedError)(nil); errors.As(context.Cause(drainCtx), &stopped) {
		return stopped
	}
	return err
}

// freshDrainData replaces, in d, what the drain preflight judges by (nodes,
// the published etcd member list, Longhorn volumes and replicas) with a
// read from the API server. These are one-shot reads for an action, not
// steady state.
func freshDrainData(ctx context.Context, clients *Clients, d Data) (Data, error) {
	nodes, err := clients.Core.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return d, err
	}
	d.Nodes = nil
	for i := range nodes.Items {
		d.Nodes = append(d.Nodes, &nodes.Items[i])
	}
	members, err := clients.Core.CoreV1().ConfigMaps(AppNamespace).Get(ctx, EtcdMembersConfigMapName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return d, fmt.Errorf("etcd member list: %w", err)
	}
	d.ConfigMaps = slices.DeleteFunc(slices.Clone(d.ConfigMaps), func(cm *corev1.ConfigMap) bool {
		return cm.Name == EtcdMembersConfigMapName
	})
	if err == nil {
		d.ConfigMaps = append(d.ConfigMaps, members)
	}
	// Asked again, not taken from d: Longhorn may have come since.
	has, err := longhornInstalled(ctx, clients)
	if err != nil || !has {
		d.HasLonghorn, d.Volumes, d.Replicas = false, nil, nil
		return d, err
	}
	return readLonghorn(ctx, clients, d)
}

// Drain cordons the node and evicts its pods through kubectl's drain
// library: PodDisruptionBudgets are respected (an eviction they block is
// retried until Timeout), DaemonSet pods are left. Cancel ctx to stop.
func Drain(ctx context.Context, cs kubernetes.Interface, node string, opts DrainOptions) error {
	h := opts.helper(ctx, cs)
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !NodeIsReady(n) {
		// A lost node's kubelet never confirms a pod gone: once evicted
		// (its replacement scheduled elsewhere), a pod is not waited for,
		// as kubectl drain --skip-wait-for-delete-timeout does. Without
		// this, removing a dead device hangs until the timeout. The skip
		// counts from the end of the pod's grace period, which no kubelet
		// is there to honour: unless one was asked for, it is 1 s.
		h.SkipWaitForDeleteTimeoutSeconds = 1
		if opts.GracePeriod < 0 {
			h.GracePeriodSeconds = 1
		}
	}
	if err := drain.RunCordonOrUncordon(h, n, true); err != nil {
		return fmt.Errorf("cordon %s: %w", node, err)
	}
	list, errs := h.GetPodsForDeletion(node)
	if len(errs) > 0 {
		return fmt.Errorf("drain %s: %w", node, errors.Join(errs...))
	}
	return h.DeleteOrEvictPods(list.Pods())
}

// Cordon marks a node unschedulable (or schedulable again: uncordon).
func Cordon(ctx context.Context, cs kubernetes.Interface, node string, unschedulable bool) (changed bool, err error) {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, fmt.Errorf("%s: %w", node, ErrUnknownNode)
	}
	if err != nil {
		return false, err
	}
	h := drain.NewCordonHelper(n)
	if !h.UpdateIfRequired(unschedulable) {
		return false, nil
	}
	err, patchErr := h.PatchOrReplaceWithContext(ctx, cs, false)
	return true, errors.Join(err, patchErr)
}

// NodeNames lists node names, sorted, for messages.
func NodeNames(nodes []*corev1.Node) string {
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

type lineWriter func(string)

func (w lineWriter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(string(p)))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			w(line)
		}
	}
	return len(p), nil
}

// MigrateTarget is a node an app could move to, or why not.
type MigrateTarget struct {
	Node     string `json:"node"`
	Eligible bool   `json:"eligible"`
	Why      string `json:"why,omitempty"`
}

// MigrateTargets lists every node with whether the app may move there:
// Ready, schedulable, meets the app's node requirements, not where it is.
func MigrateTargets(app AppStatus, nodes []*corev1.Node) []MigrateTarget {
	var out []MigrateTarget
	for _, n := range nodes {
		t := MigrateTarget{Node: n.Name}
		switch {
		case n.Name == app.Node:
			t.Why = "the app runs here"
		case !NodeIsReady(n):
			t.Why = "not Ready"
		case n.Spec.Unschedulable:
			t.Why = "cordoned"
		default:
			if miss := unmet(app.Requires, n.Labels); miss != "" {
				t.Why = "lacks " + miss
			} else {
				t.Eligible = true
			}
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b MigrateTarget) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// unmet names the first requirement the labels do not meet.
func unmet(reqs []corev1.NodeSelectorRequirement, labels map[string]string) string {
	for _, r := range reqs {
		v, has := labels[r.Key]
		ok := false
		switch r.Operator {
		case corev1.NodeSelectorOpIn:
			ok = has && slices.Contains(r.Values, v)
		case corev1.NodeSelectorOpNotIn:
			ok = !has || !slices.Contains(r.Values, v)
		case corev1.NodeSelectorOpExists:
			ok = has
		case corev1.NodeSelectorOpDoesNotExist:
			ok = !has
		default:
			ok = true // Gt/Lt: left to the scheduler
		}
		if !ok {
			return fmt.Sprintf("%s %s %s", r.Key, strings.ToLower(string(r.Operator)), strings.Join(r.Values, ","))
		}
	}
	return ""
}

// PlacementOverride is an on-site move of an app (the agent's
// PlacementOverride, as stored in the sitecon-placement ConfigMap).
type PlacementOverride struct {
	Node       string    `json:"node"`
	NodeUUID   string    `json:"node_uuid"`
	By         string    `json:"by"`
	At         time.Time `json:"at"`
	Reason     string    `json:"reason,omitempty"`
	ConfigDNId string    `json:"config_dnid"`
	// ConfigVersion is the version of the app's config the move was made
	// against (0: unversioned): only an agent holding a newer one clears it.
	ConfigVersion uint64 `json:"config_version,omitempty"`
}

// WriteOverride records an on-site move in the placement ConfigMap, creating
// it when missing. Only the app's key changes.
func WriteOverride(ctx context.Context, cs kubernetes.Interface, appUUID string, o PlacementOverride) error {
	raw, err := json.Marshal(o)
	if err != nil {
		return err
	}
	cms := cs.CoreV1().ConfigMaps(AppNamespace)
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{appUUID: string(raw)}})
	_, err = cms.Patch(ctx, PlacementConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "sitecon"})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: PlacementConfigMapName, Namespace: AppNamespace},
			Data:       map[string]string{appUUID: string(raw)},
		}, metav1.CreateOptions{FieldManager: "sitecon"})
	}
	return err
}

// SeedCheck says why a node cannot be the seed server, or nil.
func SeedCheck(d Data, node string) error {
	for _, n := range d.Nodes {
		if n.Name != node {
			continue
		}
		switch {
		case !NodeIsReady(n):
			return fmt.Errorf("%s is not Ready: the seed must answer joiners now", node)
		case !IsEtcdMember(n):
			return fmt.Errorf("%s is not an etcd member: only a server with etcd can be the seed", node)
		case InternalIP(n) == "":
			return fmt.Errorf("%s has no internal address to join through", node)
		}
		return nil
	}
	return fmt.Errorf("%s: %w (nodes: %s)", node, ErrUnknownNode, NodeNames(d.Nodes))
}

// SetSeed makes node the seed server: the sitecon-cluster ConfigMap's
// join_server_ip becomes its address; every agent re-renders its k3s config
// from it.
func SetSeed(ctx context.Context, cs kubernetes.Interface, d Data, node string) (string, error) {
	if err := SeedCheck(d, node); err != nil {
		return "", err
	}
	var ip string
	for _, n := range d.Nodes {
		if n.Name == node {
			ip = InternalIP(n)
		}
	}
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{ClusterKeyJoinServerIP: ip, ClusterKeySeedNode: node}})
	_, err := cs.CoreV1().ConfigMaps(AppNamespace).Patch(ctx, ClusterConfigMapName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "sitecon"})
	if apierrors.IsNotFound(err) {
		return "", fmt.Errorf("the cluster has no %s/%s ConfigMap: was it formed by sitecon?", AppNamespace, ClusterConfigMapName)
	}
	return ip, err
}

// InternalIP is a node's internal (cluster) address, or "".
func InternalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// RemovalStoppedError is a remove or replace stopped after its drain and
// before the node was deleted: the cluster changed during the drain (a
// server lost, a copy gone) so that deleting the node now would not be
// the removal confirmed. The drain's cordon and evictions stand; nothing
// further was changed.
type RemovalStoppedError struct {
	Node    string
	Reasons []string
}

func (e *RemovalStoppedError) Error() string {
	return fmt.Sprintf("%s is drained but was not removed: the cluster changed during the drain: %s; nothing further was changed: %s stays in the cluster and in etcd, cordoned (sitecon uncordon %s takes it back; remove it again once the cluster has recovered)",
		e.Node, strings.Join(e.Reasons, "; "), e.Node, e.Node)
}

// RemoveAsConfirmed deletes confirmed.Node, just drained for a remove or
// replace, only if a preflight taken now from the API server still agrees
// with the one confirmed (Reconfirm), and the node is still not the seed;
// otherwise it returns a *RemovalStoppedError and deletes nothing. The
// drain took up to its timeout (minutes, behind disruption budgets): a
// server lost meanwhile would turn the removal into the loss of quorum,
// and a replica failed meanwhile into the loss of the last copy.
func RemoveAsConfirmed(ctx context.Context, clients *Clients, d Data, confirmed Preflight) error {
	node := confirmed.Node
	fresh, err := freshDrainData(ctx, clients, d)
	if err == nil {
		fresh, err = freshClusterRecord(ctx, clients, fresh)
	}
	var now Preflight
	if err == nil {
		now, err = CheckDrain(ctx, clients, fresh, node, DrainOptions{Purpose: confirmed.Purpose, LocalNode: confirmed.LocalNode})
	}
	if err != nil {
		// Unknown is not "still fine".
		return &RemovalStoppedError{Node: node, Reasons: []string{"the re-check before deleting it failed: " + err.Error()}}
	}
	reasons := Reconfirm(confirmed, now)
	if why := SeedRemovalRefusal(fresh, node); why != "" {
		reasons = append(reasons, why)
	}
	if len(reasons) > 0 {
		return &RemovalStoppedError{Node: node, Reasons: reasons}
	}
	return RemoveNode(ctx, clients.Core, node)
}

// freshClusterRecord replaces, in d, the sitecon-cluster ConfigMap with a
// read from the API server (none when it is gone).
func freshClusterRecord(ctx context.Context, clients *Clients, d Data) (Data, error) {
	cm, err := clients.Core.CoreV1().ConfigMaps(AppNamespace).Get(ctx, ClusterConfigMapName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return d, fmt.Errorf("cluster record: %w", err)
	}
	d.ConfigMaps = slices.DeleteFunc(slices.Clone(d.ConfigMaps), func(c *corev1.ConfigMap) bool {
		return c.Name == ClusterConfigMapName && c.Namespace == AppNamespace
	})
	if err == nil {
		d.ConfigMaps = append(d.ConfigMaps, cm)
	}
	return d, nil
}

// RemoveNode deletes a drained node's Node object (k3s then drops its etcd
// member) and takes it off the cluster's node list. It judges nothing:
// after a drain, RemoveAsConfirmed re-checks first.
func RemoveNode(ctx context.Context, cs kubernetes.Interface, node string) error {
	if err := cs.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s: %w", node, ErrUnknownNode)
		}
		return err
	}
	return removeFromNodeList(ctx, cs, node)
}

// ErrNotMovedYet: the app did not run on its target within the wait.
var ErrNotMovedYet = errors.New("not running on the target yet")

// WaitAppOn waits until the app runs, ready, on node, telling progress each
// time where it is changes. It waits on the snapshot's changes: no request.
// It returns the last place seen, with ErrNotMovedYet after timeout or
// ctx's error when cancelled.
func WaitAppOn(ctx context.Context, snap *Snapshot, uuid, node string, timeout time.Duration, progress func(where string)) (last string, err error) {
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	deadline := time.After(timeout)
	for {
		if now, ok := FindApp(snap.Status().Apps, uuid); ok {
			if where := AppWhere(now); where != last {
				progress(where)
				last = where
			}
			if now.Node == node && now.Ready {
				return last, nil
			}
		}
		select {
		case <-changes:
		case <-deadline:
			return last, ErrNotMovedYet
		case <-ctx.Done():
			return last, ctx.Err()
		}
	}
}

// AppWhere says where an app is, for progress lines: "Running on node-c",
// "Scheduling, not placed yet", "starting, not placed yet" (a VM between
// its old instance and the new one).
func AppWhere(a AppStatus) string {
	phase := cmp.Or(a.Phase, "starting")
	if a.Node == "" {
		return phase + ", not placed yet"
	}
	return phase + " on " + a.Node
}

// FindApp finds an app by name or UUID; of the objects running it (a
// terminating pod and its replacement), the ready one wins.
func FindApp(apps []AppStatus, ref string) (AppStatus, bool) {
	var found AppStatus
	ok := false
	for _, a := range apps {
		if a.Name != ref && !strings.EqualFold(a.UUID, ref) {
			continue
		}
		if !ok || (a.Ready && !found.Ready) || (found.Phase == "Terminating" && a.Phase != "Terminating") {
			found, ok = a, true
		}
	}
	return found, ok
}

// AppNames lists app names, sorted and unique, for messages.
func AppNames(apps []AppStatus) string {
	var names []string
	for _, a := range apps {
		if !slices.Contains(names, a.Name) {
			names = append(names, a.Name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// AppConfigRef is what an app's workload says of the config it was laid
// out from: the designated node and the version, which an on-site
// override records (see PlacementOverride).
type AppConfigRef struct {
	DNId    string
	Version uint64
}

// ReadAppConfigRef reads an app's designated node and config version from
// its workload (stamped by the agent that laid it out).
func ReadAppConfigRef(ctx context.Context, c *Clients, uuid string) (AppConfigRef, error) {
	ref := func(ann map[string]string) (AppConfigRef, bool) {
		v, _ := strconv.ParseUint(ann[AnnotationConfigVersion], 10, 64)
		return AppConfigRef{DNId: ann[AnnotationConfigDNId], Version: v}, ann[AnnotationConfigDNId] != ""
	}
	sel := metav1.ListOptions{LabelSelector: LabelAppUUID + "=" + uuid}
	deps, err := c.Core.AppsV1().Deployments(AppNamespace).List(ctx, sel)
	if err != nil {
		return AppConfigRef{}, err
	}
	for _, d := range deps.Items {
		if r, ok := ref(d.Annotations); ok {
			return r, nil
		}
	}
	if rs, err := c.KubeVirt.KubevirtV1().VirtualMachineInstanceReplicaSets(AppNamespace).List(ctx, sel); err == nil {
		for _, x := range rs.Items {
			if r, ok := ref(x.Annotations); ok {
				return r, nil
			}
		}
	}
	if vmis, err := c.KubeVirt.KubevirtV1().VirtualMachineInstances(AppNamespace).List(ctx, sel); err == nil {
		for _, v := range vmis.Items {
			if r, ok := ref(v.Annotations); ok {
				return r, nil
			}
		}
	}
	return AppConfigRef{}, fmt.Errorf("app %s has no workload laid out by a sitecon agent: an on-site move needs the agents to place it", uuid)
}
