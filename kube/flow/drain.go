package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/safety"
	"github.com/sitecon/sitecon/kube/streams"
)

// ActionDrain is a drain's action name, as recorded.
const ActionDrain = "drain"

// DrainOptions tune a drain, whichever face asked for it.
type DrainOptions struct {
	// GracePeriod for each pod; negative: the pod's own.
	GracePeriod time.Duration
	// Timeout gives up the evictions after this long; the node stays
	// cordoned.
	Timeout            time.Duration
	DeleteEmptyDirData bool
}

// DefaultDrainOptions are what a drain does unless told otherwise: the
// CLI's flags default to them and the console uses them.
func DefaultDrainOptions() DrainOptions {
	return DrainOptions{GracePeriod: PodsOwnGracePeriod, Timeout: DefaultDrainTimeout}
}

// CheckDrain is the preflight of a drain of node for action (drain,
// remove-node or replace-node); local is the node this runs on, when
// known. Removing the seed in effect is refused here too: joiners need it,
// so it moves first (sitecon seed).
func CheckDrain(ctx context.Context, snap *kube.Snapshot, action, node, local string, opts DrainOptions) (safety.Preflight, error) {
	purpose := safety.PurposeOf(action)
	if !snap.Synced() {
		return safety.Preflight{Node: node, Purpose: purpose, LocalNode: local, Refusals: []string{NotRead}}, nil
	}
	if purpose != safety.PurposeDrain {
		if why := kube.SeedRemovalRefusal(snap.Data(), node); why != "" {
			return safety.Preflight{Node: node, Purpose: purpose, LocalNode: local, Refusals: []string{why}}, nil
		}
	}
	p, err := change.CheckDrain(ctx, snap.Clients(), snap.Data(), node, change.DrainOptions{
		DeleteEmptyDirData: opts.DeleteEmptyDirData, Purpose: purpose, LocalNode: local})
	if err == nil {
		p.Notes = append(p.Notes, DrainConsequences(snap.Data(), p)...)
	}
	return p, err
}

// DrainConsequences says what a drain of p.Node does beyond evicting its
// pods, so that a dialog and the command's preflight say it before the
// technician agrees: the seed and the cluster's virtual IP it holds, and
// each app that stops there to start on another node (a VM restarts: it is
// not live-migrated).
func DrainConsequences(d kube.Data, p safety.Preflight) []string {
	st := kube.Derive(d, time.Now())
	var out []string
	for _, n := range st.Nodes {
		if n.Name == p.Node && n.Seed {
			out = append(out, p.Node+" is the seed: a node that joins, or restarts its k3s, while it is down waits for it (sitecon seed NODE moves it first)")
		}
	}
	if st.VIP.Owner == p.Node && st.VIP.Address != "" {
		out = append(out, fmt.Sprintf("%s holds the cluster's virtual IP %s: it moves to another server, and clients of the API reconnect", p.Node, st.VIP.Address))
	}
	pods := map[string]*corev1.Pod{}
	for _, pod := range d.Pods {
		pods[pod.Namespace+"/"+pod.Name] = pod
	}
	// A pinned app's pod stops and waits: the preflight warns of it.
	seen := map[string]bool{}
	for _, a := range st.Apps {
		if a.Mode == kube.AppModePinned {
			seen[a.Name] = true
		}
	}
	for _, ref := range p.Evict {
		pod := pods[ref]
		if pod == nil {
			continue
		}
		app, _, vm := streams.AppOfPod(pod)
		if app == "" || seen[app] {
			continue
		}
		seen[app] = true
		if vm {
			out = append(out, "VM app "+app+" stops here and starts again on another node (a restart, not a live migration)")
		} else {
			out = append(out, "app "+app+" stops here and starts again on another node")
		}
	}
	return out
}

// PreflightSummary is a preflight as the audit record keeps it.
func PreflightSummary(p safety.Preflight) []string {
	var out []string
	for _, r := range p.Refusals {
		out = append(out, "refused: "+r)
	}
	for _, w := range p.Warnings {
		out = append(out, "warning: "+w)
	}
	return append(out, fmt.Sprintf("evict %d pod(s)", len(p.Evict)))
}

// Drain is a drain (and, for a removal or a replace, the node's deletion
// after it) judged by its preflight and waiting to be confirmed.
type Drain struct {
	Action
	Preflight safety.Preflight
	Options   DrainOptions
	// Removes: the node is deleted from the cluster once drained.
	Removes bool
	// removed, for a replace, says what the removal hands on.
	removed func()
}

// NewDrain turns a preflight (or the error that stopped it) into the drain
// to confirm, recorded in rec. A refusal is recorded and returned as a
// *Refused.
func NewDrain(rec *Record, snap *kube.Snapshot, p safety.Preflight, checkErr error, opts DrainOptions) (*Drain, error) {
	if checkErr != nil {
		return nil, rec.Refuse(checkErr.Error())
	}
	rec.SetPreflight(PreflightSummary(p))
	if p.Refused() {
		return nil, rec.Refuse(p.Refusals...)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultDrainTimeout
	}
	d := &Drain{Action: Action{Record: rec}, Preflight: p, Options: opts, Removes: safety.PurposeOf(rec.Audit().Action) != safety.PurposeDrain}
	d.Change = func(ctx context.Context, progress func(string)) error { return d.drain(ctx, snap, progress) }
	return d, nil
}

// TypedName is what must be typed back to confirm, "" for a yes: the
// node's name when it leaves the cluster or when pinned apps stop.
func (d *Drain) TypedName() string {
	if d.Removes || d.Preflight.NeedsForce() {
		return d.Preflight.Node
	}
	return ""
}

func (d *Drain) drain(ctx context.Context, snap *kube.Snapshot, progress func(string)) error {
	node, asked, evicted, failed := d.Preflight.Node, 0, 0, 0
	err := change.DrainAsConfirmed(ctx, snap.Clients(), snap.Data(), d.Preflight, change.DrainOptions{
		GracePeriod: d.Options.GracePeriod, Timeout: d.Options.Timeout, DeleteEmptyDirData: d.Options.DeleteEmptyDirData,
		Progress: func(s change.DrainStep) {
			switch s.Phase {
			case "evicting":
				asked++
			case "evicted":
				evicted++
			case "failed":
				failed++
			}
			progress(strings.TrimRight(fmt.Sprintf("%-9s %s %s", s.Phase, s.Pod, s.Message), " "))
		},
	})
	if changed := (*change.PlanChangedError)(nil); errors.As(err, &changed) {
		return err
	}
	detail := fmt.Sprintf("evicted %d of %d pod(s)", evicted, len(d.Preflight.Evict))
	if unconfirmed := asked - evicted - failed; unconfirmed > 0 && err == nil {
		// A node not Ready: the drain does not wait for what its kubelet
		// will never confirm (change.Drain); "evicted 0 of 4" alone reads
		// as if nothing was done.
		detail += fmt.Sprintf(", %d more asked to go and not confirmed gone (the node's kubelet does not answer)", unconfirmed)
	}
	d.SetDetail(detail)
	if stopped := (*change.DrainStoppedError)(nil); errors.As(err, &stopped) {
		return stopped
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("drain of %s cancelled after %s; the node stays cordoned (sitecon uncordon %s): %w", node, detail, node, ctx.Err())
	case err != nil:
		return fmt.Errorf("drain of %s: %w; the node stays cordoned", node, err)
	}
	progress(node + " drained: " + detail)
	if !d.Removes {
		return nil
	}
	return d.remove(ctx, snap, progress)
}
