package drainrequest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/flow"
)

// How a request ends: cancelled by its requester, or its node back from
// the boot it was drained for; either way the agent's own cordon is taken
// back and the request forgotten.

// current is the request under way (nil: none) and a copy of its record,
// read under mu: update and Request change the record while the caller
// looks at the copy; current says which request the caller settles.
func (r *Runner) current() (*record, record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rec == nil {
		return nil, record{}
	}
	return r.rec, *r.rec
}

// cancel settles a cancelled request: the agent's own cordon taken back
// (a node cordoned by hand stays so), the request forgotten, both said
// and recorded. An uncordon that fails keeps the request, said, and is
// tried again on the next pass.
func (r *Runner) cancel(ctx context.Context, snap *kube.Snapshot) {
	current, rec := r.current()
	if current == nil {
		return
	}
	n, ok := snap.Node(r.opts.Node)
	if !ok && rec.CordonedByAgent {
		// Forgetting the request now would forget the cordon is the
		// agent's: it waits until it sees its node.
		_ = r.update(func(s *Status, _ *record) {
			s.Why = []string{"cancelled; waiting to see " + r.opts.Node + " in the cluster to take back the agent's cordon"}
		})
		return
	}
	line := "cancelled by " + rec.CancelledBy
	if rec.CordonedByAgent && n.Spec.Unschedulable {
		if !r.takeBackCordon(ctx, snap, "cancelled by "+rec.CancelledBy, "cancelled; taking back the agent's cordon") {
			return
		}
		line += ": " + r.opts.Node + " uncordoned (the agent's own cordon)"
	} else if rec.CordonedBefore {
		line += ": " + r.opts.Node + " left cordoned (it was cordoned before the request, by hand)"
	}
	recorder, _ := r.auditRecorder()
	c := recorder.Open(flow.ActionDrainRequest, r.opts.Node)
	c.SetDetail(fmt.Sprintf("requested by %s, cancelled by %s", rec.Requester, rec.CancelledBy))
	_ = c.Cancel(errors.New(line))
	r.settle(current, line)
}

// takeBackCordon uncordons the node the agent cordoned for the current
// request, recorded with when (after the return, cancelled by ...); a
// failure is logged and said in the status as what, and reported false
// (the request stays, and is settled on a later pass).
func (r *Runner) takeBackCordon(ctx context.Context, snap *kube.Snapshot, when, what string) bool {
	_, rec := r.current()
	requester := rec.Requester
	recorder, _ := r.auditRecorder()
	a := flow.Cordon(recorder, snap, r.opts.Node, false)
	a.SetDetail("the agent's own cordon for a drain requested by " + requester + ", " + when)
	if err := a.Run(ctx, nil); err != nil {
		r.log.Warn(what, "err", err)
		_ = r.update(func(s *Status, _ *record) { s.Why = []string{what + ": " + err.Error()} })
		return false
	}
	return true
}

// watchReturn uncordons, once the node is back from its boot (a new boot
// id, Ready), what the agent cordoned, and then forgets the request. A
// node that was cordoned before the request stays cordoned. NotReady then
// Ready with the same boot id is a blip, said, not the boot: taken for it,
// the node went back into service while its device was being powered
// off (issue 36).
func (r *Runner) watchReturn(ctx context.Context, snap *kube.Snapshot) {
	current, rec := r.current()
	if current == nil {
		return
	}
	n, ok := snap.Node(r.opts.Node)
	if !ok {
		return
	}
	ready := kube.NodeIsReady(n)
	if !ready && !rec.WentDown {
		_ = r.update(func(_ *Status, rc *record) { rc.WentDown = true })
		r.did(r.opts.Node + " went down")
		return
	}
	back := flow.NodeReturn(rec.BootID, rec.WentDown, n)
	switch {
	case back == flow.ReturnBlip:
		// Said once a blip: the next NotReady is watched afresh.
		_ = r.update(func(_ *Status, rc *record) { rc.WentDown = false })
		r.did(back.Say(r.opts.Node))
		r.log.Warn("drain request: not the boot", "why", back.Say(r.opts.Node))
		return
	case back == flow.ReturnNoBootID:
		if st := r.Status(); len(st.Did) == 0 || st.Did[len(st.Did)-1] != back.Say(r.opts.Node) {
			r.did(back.Say(r.opts.Node))
			r.log.Warn("drain request: no boot seen", "why", back.Say(r.opts.Node))
		}
		return
	case !back.Back():
		return
	}
	line := back.Say(r.opts.Node)
	switch {
	case rec.CordonedByAgent && n.Spec.Unschedulable:
		if !r.takeBackCordon(ctx, snap, "after the node's return", "uncordon after the node's return") {
			return
		}
		line += ": uncordoned (the agent's own cordon)"
	case rec.CordonedBefore:
		line += ": left cordoned (it was cordoned before the request, by hand)"
	}
	r.settle(current, line)
}

// settle ends the request rec once its node is back: its record removed,
// the status back to not requested, what was done said. A request made
// since (the device asking again as the node came back) is another's and
// stays.
func (r *Runner) settle(rec *record, line string) {
	r.mu.Lock()
	if r.rec != rec {
		r.mu.Unlock()
		r.log.Info("drain request settled while a newer one came in", "did", line, "newer by", r.Status().Requester)
		return
	}
	if err := os.Remove(r.path()); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.mu.Unlock()
		r.log.Warn("drain request record", "err", err)
		return
	}
	r.rec = nil
	did := append(slices.Clone(r.status.Did), line)
	r.status = Status{State: NotRequested, Since: time.Now(), Requester: rec.Requester, Reason: rec.Reason,
		RequestedAt: rec.RequestedAt, Did: did}
	r.mu.Unlock()
	r.log.Info("drain request done", "did", line)
}
