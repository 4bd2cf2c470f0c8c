package flow

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	lhv1beta2 "github.com/longhorn/longhorn-manager/k8s/pkg/apis/longhorn/v1beta2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/safety"
)

// ActionMaintenance is a node walked through its service, as recorded.
const ActionMaintenance = "maintenance"

// DefaultStepTimeout bounds each wait of a maintenance walk: the node
// going down, coming back, its volumes rebuilding.
const DefaultStepTimeout = 30 * time.Minute

// MaintenanceOptions tune a maintenance walk.
type MaintenanceOptions struct {
	Drain DrainOptions
	// StepTimeout bounds each wait (0: DefaultStepTimeout).
	StepTimeout time.Duration
	// Every is how often the node and its volumes are looked at (0: 1 s).
	Every time.Duration
}

// Maintenance is one node's service walk, judged by its drain preflight
// and waiting to be confirmed: drain (with progress), "power it off or
// reboot it now" with the node's state, its return, its volumes healthy
// again, uncordon. Cancelled or timed out at any step, the node is left
// as it was: uncordoned unless it was cordoned before.
type Maintenance struct {
	*Drain
	opts MaintenanceOptions
}

// NewMaintenance turns a drain preflight into the walk to confirm,
// recorded in rec; a refusal is recorded and returned as a *Refused.
func NewMaintenance(rec *Record, snap *kube.Snapshot, p safety.Preflight, checkErr error, opts MaintenanceOptions) (*Maintenance, error) {
	d, err := NewDrain(rec, snap, p, checkErr, opts.Drain)
	if err != nil {
		return nil, err
	}
	if opts.StepTimeout == 0 {
		opts.StepTimeout = DefaultStepTimeout
	}
	if opts.Every == 0 {
		opts.Every = time.Second
	}
	m := &Maintenance{Drain: d, opts: opts}
	m.Change = func(ctx context.Context, progress func(string)) error { return m.walk(ctx, snap, progress) }
	return m, nil
}

func (m *Maintenance) walk(ctx context.Context, snap *kube.Snapshot, progress func(string)) error {
	node := m.Preflight.Node
	core := snap.Clients().Core
	n, err := core.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	wasCordoned, bootID := n.Spec.Unschedulable, n.Status.NodeInfo.BootID
	held := heldVolumes(snap.Data(), node)
	// restore leaves the node as it was found, whatever ended the walk.
	restore := func(cause error) error {
		if wasCordoned {
			return fmt.Errorf("%w; %s stays cordoned, as it was before", cause, node)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := change.Cordon(rctx, core, node, false); err != nil {
			return fmt.Errorf("%w; and %s could not be uncordoned (sitecon uncordon %s): %v", cause, node, node, err)
		}
		progress(node + " uncordoned: left as it was")
		return fmt.Errorf("%w; %s uncordoned, as it was before", cause, node)
	}
	progress("step 1/5: drain " + node)
	if err := m.drain(ctx, snap, progress); err != nil {
		return restore(err)
	}
	if err := m.awaitBoot(ctx, node, bootID, func() (*corev1.Node, bool) { return snap.Node(node) }, progress); err != nil {
		return restore(err)
	}
	progress(fmt.Sprintf("step 4/5: waiting for %s's volumes to be healthy again (%s)", node, strings.Join(held, ", ")))
	if err := m.wait(ctx, "waiting for the volumes to rebuild", progress, func() (string, bool) {
		return VolumesSettled(snap.Data(), held)
	}); err != nil {
		return restore(err)
	}
	progress("step 5/5: uncordon " + node)
	if wasCordoned {
		progress(node + " stays cordoned: it was cordoned before the walk")
		return nil
	}
	if _, err := change.Cordon(ctx, core, node, false); err != nil {
		return fmt.Errorf("uncordon %s: %w", node, err)
	}
	// What comes next reads the snapshot, not the API server: --all's
	// next preflight counted this node as cordoned (one etcd member short)
	// when it ran before the watch had brought the uncordon. The walk ends
	// once the snapshot shows the node back in service.
	if err := m.wait(ctx, "waiting for the cluster's view of "+node+" to show it uncordoned", func(string) {}, func() (string, bool) {
		n, ok := snap.Node(node)
		return node + " uncordoned, as the cluster's view shows it", ok && !n.Spec.Unschedulable
	}); err != nil {
		return err
	}
	progress(node + " is back in service")
	return nil
}

// awaitBoot is the walk's steps 2 and 3: node, whose boot ID was bootID
// when the walk began, goes down (or boots) and comes back from a boot,
// as nodeOf reads it. A node Ready again with its known boot ID unchanged
// only blinked: the walk waits on (issue 36: under --all it drained the
// next node while the technician powered this one off).
func (m *Maintenance) awaitBoot(ctx context.Context, node, bootID string, nodeOf func() (*corev1.Node, bool), progress func(string)) error {
	progress(fmt.Sprintf("step 2/5: power %s off or reboot it now", node))
	if err := m.wait(ctx, "waiting for "+node+" to go down", progress, func() (string, bool) {
		n, ok := nodeOf()
		if !ok {
			return node + " not seen", false
		}
		switch r := NodeReturn(bootID, false, n); r {
		case ReturnDown:
			return r.Say(node), true
		case ReturnBooted:
			return node + " booted", true
		default:
			return r.Say(node), false
		}
	}); err != nil {
		return err
	}
	progress("step 3/5: waiting for " + node + " to come back")
	return m.wait(ctx, "waiting for "+node+" to come back", progress, func() (string, bool) {
		n, _ := nodeOf()
		r := NodeReturn(bootID, true, n)
		return r.Say(node), r.Back()
	})
}

// rebooted reports whether n's boot ID differs from bootID, both known:
// the only evidence of a boot that needs nothing else. A boot ID gone
// empty is a Node that says nothing, not a new boot.
func rebooted(bootID string, n *corev1.Node) bool {
	now := n.Status.NodeInfo.BootID
	return bootID != "" && now != "" && now != bootID
}

// Return is how a drained node stands against the boot it was drained
// for (NodeReturn).
type Return int

const (
	// ReturnDown: not Ready, or no Node.
	ReturnDown Return = iota
	// ReturnAwaited: Ready, no sign of a boot yet.
	ReturnAwaited
	// ReturnBlip: Ready again after NotReady, its known boot ID unchanged.
	ReturnBlip
	// ReturnNoBootID: Ready, reporting no boot ID where one was known.
	ReturnNoBootID
	// ReturnBooted: Ready with a new boot ID.
	ReturnBooted
	// ReturnUnproven: Ready again after NotReady, with no boot ID known
	// to compare.
	ReturnUnproven
)

// NodeReturn judges n (nil: no Node) against bootID, its boot ID when its
// drain began ("" when none was known), wentDown saying it has been seen
// not Ready since. It counts as back from its boot only on a new boot ID:
// a kubelet's or a link's blip also reads NotReady, then Ready. Only with
// no boot ID known is NotReady then Ready taken for the boot, on weaker
// evidence (Say says so).
func NodeReturn(bootID string, wentDown bool, n *corev1.Node) Return {
	switch {
	case n == nil || !kube.NodeIsReady(n):
		return ReturnDown
	case bootID == "" && wentDown:
		return ReturnUnproven
	case bootID == "":
		return ReturnAwaited
	case n.Status.NodeInfo.BootID == "":
		return ReturnNoBootID
	case rebooted(bootID, n):
		return ReturnBooted
	case wentDown:
		return ReturnBlip
	}
	return ReturnAwaited
}

// Back reports whether the node counts as back from its boot.
func (r Return) Back() bool { return r == ReturnBooted || r == ReturnUnproven }

// Say is how node stands, in words.
func (r Return) Say(node string) string {
	switch r {
	case ReturnDown:
		return node + " is down"
	case ReturnBlip:
		return node + " was NotReady and is Ready again with the same boot ID: that was not a reboot; power it off or reboot it"
	case ReturnNoBootID:
		return node + " is Ready but reports no boot ID, so its boot cannot be told: waiting for a new boot ID"
	case ReturnBooted:
		return node + " is back and Ready, with a new boot ID"
	case ReturnUnproven:
		return node + " is back and Ready (taken for rebooted on weaker evidence, NotReady then Ready: no boot ID was known to compare)"
	}
	return node + " is Ready: power it off or reboot it"
}

// wait looks every opts.Every until look is done, telling each new state;
// it ends with the step's timeout or ctx.
func (m *Maintenance) wait(ctx context.Context, what string, progress func(string), look func() (string, bool)) error {
	ctx, cancel := context.WithTimeout(ctx, m.opts.StepTimeout)
	defer cancel()
	tick := time.NewTicker(m.opts.Every)
	defer tick.Stop()
	last := ""
	for {
		state, done := look()
		if state != last {
			progress("  " + state)
			last = state
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) && context.Cause(ctx) == context.DeadlineExceeded {
				return fmt.Errorf("%s: not within %s (%s)", what, m.opts.StepTimeout, last)
			}
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

// heldVolumes are the volumes with a replica on node.
func heldVolumes(d kube.Data, node string) []string {
	var out []string
	for _, r := range d.Replicas {
		if r.Spec.NodeID == node && !slices.Contains(out, r.Spec.VolumeName) {
			out = append(out, r.Spec.VolumeName)
		}
	}
	slices.Sort(out)
	return out
}

// VolumesSettled says whether none of the named volumes (all when names
// is nil) is degraded, faulted or rebuilding, and in words how they
// stand.
func VolumesSettled(d kube.Data, names []string) (string, bool) {
	var waiting []string
	rebuilding := map[string]int{}
	for _, r := range d.Replicas {
		if kube.ReplicaState(r) == kube.ReplicaRebuilding {
			rebuilding[r.Spec.VolumeName]++
		}
	}
	for _, v := range d.Volumes {
		if names != nil && !slices.Contains(names, v.Name) {
			continue
		}
		switch {
		case rebuilding[v.Name] > 0:
			waiting = append(waiting, fmt.Sprintf("%s rebuilding %d replica(s)", v.Name, rebuilding[v.Name]))
		case v.Status.Robustness == lhv1beta2.VolumeRobustnessDegraded || v.Status.Robustness == lhv1beta2.VolumeRobustnessFaulted:
			waiting = append(waiting, fmt.Sprintf("%s %s", v.Name, v.Status.Robustness))
		}
	}
	if len(waiting) == 0 {
		return "volumes healthy", true
	}
	return "waiting: " + strings.Join(waiting, ", "), false
}
