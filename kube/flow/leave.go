package flow

import (
	"context"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/safety"
)

// NewLeave is `sitecon agent leave`'s change, judged by a drain's
// preflight p (already confirmed, or forced past its refusals): the node
// is cordoned and drained as a drain does it (the evictions Longhorn and
// the disruption budgets can block, the volumes watched), and only once
// that succeeded does then run (the etcd member's removal, the leave
// request). The Node stays: it shows the node cordoned and gone.
func NewLeave(rec *Record, snap *kube.Snapshot, p safety.Preflight, opts DrainOptions, then func(ctx context.Context, progress func(string)) error) *Drain {
	if opts.Timeout == 0 {
		opts.Timeout = DefaultDrainTimeout
	}
	d := &Drain{Action: Action{Record: rec}, Preflight: p, Options: opts}
	d.Change = func(ctx context.Context, progress func(string)) error {
		if err := d.drain(ctx, snap, progress); err != nil {
			return err
		}
		return then(ctx, progress)
	}
	return d
}
