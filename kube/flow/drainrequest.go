package flow

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/safety"
)

// ActionDrainRequest is a drain an on-device service asked the agent for
// (a base OS update, a reboot, a shutdown), as recorded.
const ActionDrainRequest = "drain-request"

// CordonSteps are what the agent that runs a requested drain is told
// around the cordon, so that it remembers, durably, whether it cordoned
// the node itself (and uncordons it after the boot) or found it cordoned
// by hand (and leaves it so).
type CordonSteps struct {
	// Before is told whether the node was already unschedulable; an error
	// stops the drain before anything changed.
	Before func(alreadyCordoned bool) error
	// After is told how the cordon went.
	After func(err error)
}

// NewRequestedDrain is the drain a device asked for, judged by p (its
// refusals already handled by the caller: a requested drain never goes
// past one): the node is cordoned first, told to steps, then drained as
// sitecon drain does it (the preflight re-checked, the evictions through
// kubectl's drain helper, the volumes watched).
func NewRequestedDrain(rec *Record, snap *kube.Snapshot, p safety.Preflight, opts DrainOptions, steps CordonSteps) *Drain {
	if opts.Timeout == 0 {
		opts.Timeout = DefaultDrainTimeout
	}
	rec.SetPreflight(PreflightSummary(p))
	d := &Drain{Action: Action{Record: rec}, Preflight: p, Options: opts}
	d.Change = func(ctx context.Context, progress func(string)) error {
		core := snap.Clients().Core
		n, err := core.CoreV1().Nodes().Get(ctx, p.Node, metav1.GetOptions{})
		if err != nil {
			err = fmt.Errorf("cordon %s: %w", p.Node, err)
			steps.After(err)
			return err
		}
		if err := steps.Before(n.Spec.Unschedulable); err != nil {
			return fmt.Errorf("before the cordon of %s: %w; nothing was changed", p.Node, err)
		}
		if _, err := change.Cordon(ctx, core, p.Node, true); err != nil {
			err = fmt.Errorf("cordon %s: %w", p.Node, err)
			steps.After(err)
			return err
		}
		steps.After(nil)
		progress(p.Node + " cordoned")
		// The record keeps who asked and why beside what the drain did.
		asked := rec.Audit().Detail
		err = d.drain(ctx, snap, progress)
		if did := rec.Audit().Detail; asked != "" && did != asked {
			rec.SetDetail(asked + "; " + did)
		}
		return err
	}
	return d
}
