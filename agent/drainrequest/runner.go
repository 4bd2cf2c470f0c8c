package drainrequest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/flow"
)

// EVE's retries: 5 tries, 300 s apart (zedkube).
const (
	DefaultAttempts      = 5
	DefaultRetryInterval = 300 * time.Second
)

// RecordFile is the request's durable record in the agent's state
// directory.
const RecordFile = "drain-request.json"

// ErrBusy is a request while another one runs.
var ErrBusy = errors.New("a drain request is already under way")

// ErrNothingToCancel is a cancel with no request to cancel.
var ErrNothingToCancel = errors.New("no drain request to cancel")

// ErrNotTheRequester is a cancel by someone other than the requester,
// not forced.
var ErrNotTheRequester = errors.New("a drain request is cancelled by its requester")

// Options configure the runner.
type Options struct {
	// Node is this node's name.
	Node string
	// StateDir keeps the request's record (RecordFile): whether the
	// agent cordoned the node, so that it uncordons it after the boot,
	// whatever restarts in between. Empty: requests are refused.
	StateDir string
	// Audit opens the audit log every attempt is recorded in, at the
	// first request (an agent that is never asked writes no log). An
	// error refuses the request: an action that cannot be recorded is not
	// taken.
	Audit func() (flow.Recorder, error)
	// Attempts and RetryInterval: a held or failed drain is tried
	// Attempts times in all, RetryInterval apart.
	Attempts      int
	RetryInterval time.Duration
	// Drain tunes the evictions (the drain flow's defaults when zero).
	Drain flow.DrainOptions
	Log   *slog.Logger
}

// record is what survives a restart of the agent, or the boot the drain
// was asked for.
type record struct {
	Request
	RequestedAt time.Time `json:"requested_at"`
	State       State     `json:"state"`
	// CordonedByAgent: the agent cordoned the node; CordonedBefore: it
	// found the node cordoned (by hand) and leaves it so.
	CordonedByAgent bool `json:"cordoned_by_agent,omitempty"`
	CordonedBefore  bool `json:"cordoned_before,omitempty"`
	// BootID is the Node's boot id when the drain completed (or failed):
	// a new one tells the boot. WentDown: the node has been seen not
	// Ready since, which tells the boot only when no boot id was known
	// (flow.NodeReturn).
	BootID   string `json:"boot_id,omitempty"`
	WentDown bool   `json:"went_down,omitempty"`
	// CancelledBy: the requester called the request off. Kept on disk
	// before it is acted on, so that a restart in between still takes
	// the agent's cordon back rather than resuming the drain.
	CancelledBy string `json:"cancelled_by,omitempty"`
}

// Runner runs this node's drain requests, one at a time.
type Runner struct {
	opts  Options
	log   *slog.Logger
	runMu sync.Mutex // one Run at a time

	mu       sync.Mutex
	recorder *flow.Recorder // opened at the first request
	status   Status
	rec      *record // nil: no request
	wake     chan struct{}
	// stopAttempt ends the drain under way (its evictions, its wait for
	// the next attempt) when the request is cancelled; nil between runs.
	stopAttempt context.CancelFunc
}

// New prepares the runner and reads the record a previous run left.
func New(opts Options) *Runner {
	opts.Attempts = cmp.Or(opts.Attempts, DefaultAttempts)
	opts.RetryInterval = cmp.Or(opts.RetryInterval, DefaultRetryInterval)
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	r := &Runner{opts: opts, log: opts.Log, wake: make(chan struct{}, 1), status: Status{State: NotRequested}}
	if opts.StateDir == "" {
		return r
	}
	rec, ok, err := config.ReadOptional[record](r.path())
	switch {
	case err != nil:
		// Unknown is not empty: a record that cannot be read may say the
		// agent cordoned the node. Nothing is uncordoned or drained; it
		// is said.
		r.status.Why = []string{fmt.Sprintf("the drain request's record %s cannot be read (%v): nothing is drained or uncordoned until it can", r.path(), err)}
		r.opts.StateDir = ""
	case ok:
		r.rec = &rec
		r.status = Status{State: rec.State, Requester: rec.Requester, Reason: rec.Reason, RequestedAt: rec.RequestedAt,
			Since: time.Now(), Attempts: opts.Attempts, CordonedByAgent: rec.CordonedByAgent, CancelledBy: rec.CancelledBy}
		if !rec.State.Final() {
			// Cut off mid-way (the agent restarted): the request runs again.
			r.status.State = Requested
		}
	}
	return r
}

func (r *Runner) path() string { return filepath.Join(r.opts.StateDir, RecordFile) }

// Status is the request as it stands.
func (r *Runner) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.status
	st.Why, st.Did = slices.Clone(st.Why), slices.Clone(st.Did)
	return st
}

// Request accepts a drain request, durably, and returns its status. A
// request while another runs is ErrBusy (with that one's status); one
// while the node is drained and awaits its boot answers that.
func (r *Runner) Request(req Request) (Status, error) {
	if err := req.Check(); err != nil {
		return r.Status(), err
	}
	if r.opts.StateDir == "" {
		return r.Status(), errors.New("this agent has no state directory to remember its cordon in: drain requests are refused")
	}
	if _, err := r.auditRecorder(); err != nil {
		return r.Status(), fmt.Errorf("drain requests are refused: they cannot be recorded: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rec != nil && r.rec.CancelledBy != "" {
		// The cancelled one is still being settled (its cordon taken back).
		return r.status, ErrBusy
	}
	switch r.status.State {
	case Complete:
		return r.status, nil
	case Requested, Starting, Cordoned, Retrying:
		return r.status, ErrBusy
	}
	rec := &record{Request: req, RequestedAt: time.Now().UTC(), State: Requested}
	// A node whose earlier request failed stays as that one left it: if
	// the agent cordoned it then, it still uncordons it after the boot.
	if r.rec != nil {
		rec.CordonedByAgent, rec.CordonedBefore = r.rec.CordonedByAgent, r.rec.CordonedBefore
	}
	if err := r.write(rec); err != nil {
		return r.status, fmt.Errorf("drain request not taken: %w", err)
	}
	r.rec = rec
	r.status = Status{State: Requested, Requester: req.Requester, Reason: req.Reason, RequestedAt: rec.RequestedAt,
		Since: time.Now(), Attempts: r.opts.Attempts, CordonedByAgent: rec.CordonedByAgent}
	r.log.Info("drain requested", "requester", req.Requester, "reason", req.Reason)
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return r.status, nil
}

// Cancel calls the request off, as its requester (or a forced cancel)
// says: the drain under way stops,
// and the run loop takes back the agent's own cordon (never one made by
// hand) and forgets the request. The cancel is on disk before it is
// answered; the requester waits for not requested. A cancel with no
// request is ErrNothingToCancel and changes nothing.
func (r *Runner) Cancel(c Cancel) (Status, error) {
	by := c.Requester
	if err := (Request{Requester: by}).Check(); err != nil {
		return r.Status(), fmt.Errorf("a cancel names who asks: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rec == nil || r.status.State == NotRequested {
		return r.status, ErrNothingToCancel
	}
	if by != r.rec.Requester && !c.Force {
		// The requester may be about to reboot on a complete drain: the
		// node is not put back into service under its feet.
		return r.status, fmt.Errorf("%w (%s), not by %s: force it only when %s no longer needs the node drained",
			ErrNotTheRequester, r.rec.Requester, by, r.rec.Requester)
	}
	if r.rec.CancelledBy == "" {
		rec := *r.rec
		rec.CancelledBy = by
		if err := r.write(&rec); err != nil {
			return r.status, fmt.Errorf("cancel not taken: %w", err)
		}
		r.rec.CancelledBy = by
		r.status.CancelledBy = by
		r.log.Info("drain request cancelled", "by", by, "state", r.status.State)
	}
	if r.stopAttempt != nil {
		r.stopAttempt()
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return r.status, nil
}

// cancelledBy is who cancelled the current request, "" when none did.
func (r *Runner) cancelledBy() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rec == nil {
		return ""
	}
	return r.rec.CancelledBy
}

// auditRecorder is the audit log's recorder, opened once.
func (r *Runner) auditRecorder() (flow.Recorder, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recorder != nil {
		return *r.recorder, nil
	}
	if r.opts.Audit == nil {
		return flow.Recorder{}, errors.New("no audit log")
	}
	rec, err := r.opts.Audit()
	if err != nil {
		return flow.Recorder{}, err
	}
	r.recorder = &rec
	return rec, nil
}

// write keeps rec on disk (temp, fsync, rename); called with mu held.
func (r *Runner) write(rec *record) error {
	data, err := jsonIndent(rec)
	if err != nil {
		return err
	}
	return config.WriteFileAtomic(r.path(), data, 0o600)
}

// update changes the status and the record together, under mu; an error
// writing the record is logged, said in the status, and returned (a
// caller with nothing more to do about it may drop it).
func (r *Runner) update(f func(st *Status, rec *record)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	before := r.status.State
	f(&r.status, r.rec)
	if r.status.State != before {
		r.status.Since = time.Now()
	}
	if r.rec == nil {
		return nil
	}
	r.rec.State = r.status.State
	r.status.CordonedByAgent = r.rec.CordonedByAgent
	err := r.write(r.rec)
	if err != nil {
		r.log.Error("drain request record", "err", err)
		r.status.Why = append(r.status.Why, "the request's record could not be written: "+err.Error())
	}
	return err
}

func (r *Runner) did(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.status.Did = append(r.status.Did, line)
	if len(r.status.Did) > 20 {
		r.status.Did = r.status.Did[len(r.status.Did)-20:]
	}
}

// Run serves the requests against the cluster until ctx ends: a request
// is drained (tried again while held), and a drained node is watched for
// its return, to uncordon what the agent cordoned. node is this node's
// name as the cluster knows it (Options.Node when empty).
func (r *Runner) Run(ctx context.Context, snap *kube.Snapshot, node string) {
	r.runMu.Lock()
	defer r.runMu.Unlock()
	if node != "" {
		// Read only by Run's goroutine, which runMu makes one.
		r.opts.Node = node
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		switch st := r.Status().State; {
		case r.cancelledBy() != "":
			r.cancel(ctx, snap)
		case st == Requested || st == Starting || st == Cordoned || st == Retrying:
			// The attempt's own context: a cancel stops its evictions and
			// its wait for the next attempt, not the agent.
			actx, stop := context.WithCancel(ctx)
			r.mu.Lock()
			r.stopAttempt = stop
			cancelled := r.rec != nil && r.rec.CancelledBy != ""
			r.mu.Unlock()
			if !cancelled {
				r.drain(actx, snap)
			}
			r.mu.Lock()
			r.stopAttempt = nil
			r.mu.Unlock()
			stop()
			if ctx.Err() != nil {
				return
			}
			continue
		case st.Final():
			r.watchReturn(ctx, snap)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-tick.C:
		}
	}
}

// drain tries the request until it completes, runs out of attempts, or
// ctx ends (the record stays: the next run resumes it).
func (r *Runner) drain(ctx context.Context, snap *kube.Snapshot) {
	node := r.opts.Node
	st := r.Status()
	detail := fmt.Sprintf("requested by %s", st.Requester)
	if st.Reason != "" {
		detail += ": " + st.Reason
	}
	// A request taken before the agent's first read of the cluster (the
	// agent just started, the API server slow) waits for that read: tried
	// on the empty cache it was refused for a node "the cluster does not
	// have" and held until the next attempt, minutes away. A cancel or
	// the agent's stop ends the wait (ctx).
	if snap != nil && !snap.Synced() {
		r.log.Info("drain request waits for the cluster's state to be read")
		if err := snap.WaitForSync(ctx); err != nil {
			return
		}
	}
	cordonFailed := false
	for attempt := 1; attempt <= r.opts.Attempts; attempt++ {
		_ = r.update(func(s *Status, _ *record) {
			s.State, s.Attempt, s.NextAttempt, s.Why = Starting, attempt, time.Time{}, nil
		})
		recorder, err := r.auditRecorder()
		if err != nil {
			// A request resumed after a restart whose log is gone: held,
			// said, tried again.
			recorder = flow.Recorder{}
		}
		rec := recorder.Open(flow.ActionDrainRequest, node)
		rec.SetDetail(detail)
		why, err := r.attempt(ctx, snap, rec)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			return
		}
		var cerr *cordonError
		cordonFailed = errors.As(err, &cerr)
		if attempt == r.opts.Attempts {
			final := FailedDrain
			if cordonFailed {
				final = FailedCordon
			}
			bootID := r.bootID(snap)
			_ = r.update(func(s *Status, rc *record) {
				s.State, s.Why = final, why
				if rc != nil {
					// Its cordon, if made, is taken back after the boot too.
					rc.BootID, rc.WentDown = bootID, false
				}
			})
			r.did(fmt.Sprintf("gave up after %d attempt(s)", attempt))
			r.log.Warn("drain request failed", "attempts", attempt, "why", strings.Join(why, "; "))
			return
		}
		// Up to a tenth more, at random: nodes that asked at once and
		// were held by each other's cordon do not meet again in step.
		wait := r.opts.RetryInterval + rand.N(r.opts.RetryInterval/10+1)
		next := time.Now().Add(wait)
		_ = r.update(func(s *Status, _ *record) { s.State, s.Why, s.NextAttempt = Retrying, why, next })
		r.log.Info("drain request held; retrying", "attempt", attempt, "next", next, "why", strings.Join(why, "; "))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// cordonError is a drain that stopped at its cordon.
type cordonError struct{ err error }

func (e *cordonError) Error() string { return e.err.Error() }
func (e *cordonError) Unwrap() error { return e.err }

// attempt is one try: the preflight, refused (held, nothing changed) or
// run as the drain flow runs it. why says what held or stopped it.
func (r *Runner) attempt(ctx context.Context, snap *kube.Snapshot, rec *flow.Record) (why []string, err error) {
	node := r.opts.Node
	p, err := flow.CheckDrain(ctx, snap, flow.ActionDrain, node, node, r.opts.Drain)
	if err != nil {
		_ = rec.Refuse(err.Error())
		return []string{err.Error()}, err
	}
	if p.Refused() {
		rec.SetPreflight(flow.PreflightSummary(p))
		err := rec.Refuse(p.Refusals...)
		why = slices.Clone(p.Refusals)
		// What did not count as a home, said: another node draining too.
		for _, n := range p.Notes {
			if strings.Contains(n, "does not count") {
				why = append(why, n)
			}
		}
		return why, err
	}
	// Warnings (a pinned app that stops, a detached volume's only copy
	// that waits on this node's disk) do not hold a device's drain: the
	// device goes down whatever; they are said.
	for _, w := range p.Warnings {
		r.did("accepted: " + w)
	}
	var cordonErr error
	// cordonedNow: this attempt made the cordon (not an earlier one, not
	// a technician).
	cordonedNow := false
	d := flow.NewRequestedDrain(rec, snap, p, r.opts.Drain, flow.CordonSteps{
		Before: func(already bool) error {
			// Remembered before the cordon: cut off right after it, the
			// agent still knows the cordon is its own. A node it cordoned
			// on an earlier attempt stays its own.
			return r.update(func(_ *Status, rc *record) {
				if rc != nil && !rc.CordonedByAgent {
					rc.CordonedBefore, rc.CordonedByAgent = already, !already
					cordonedNow = !already
				}
			})
		},
		After: func(err error) {
			cordonErr = err
			if err != nil {
				_ = r.update(func(s *Status, _ *record) { s.State = FailedCordon })
				return
			}
			_ = r.update(func(s *Status, _ *record) { s.State = Cordoned })
			r.did(node + " cordoned")
		},
	})
	err = d.Run(ctx, func(line string) {
		if strings.HasPrefix(line, "evicting") || strings.HasPrefix(line, "waiting") {
			return
		}
		r.did(line)
	})
	if err != nil {
		if cordonErr != nil {
			err = &cordonError{err}
		}
		why = []string{err.Error()}
		if changed := (*change.PlanChangedError)(nil); errors.As(err, &changed) {
			why = slices.Clone(changed.Reasons)
			if cordonedNow {
				// The cluster changed between the preflight and the drain
				// (another node cordoned for its own request at the same
				// moment): nothing was evicted. The cordon goes too, so
				// that a held node is never one more node out, and the
				// other's drain does not count it against quorum.
				r.undoCordon(ctx, snap)
			}
		}
		return why, err
	}
	bootID := r.bootID(snap)
	_ = r.update(func(s *Status, rc *record) {
		s.State, s.Why = Complete, nil
		if rc != nil {
			rc.BootID, rc.WentDown = bootID, false
		}
	})
	if r.Status().CordonedByAgent {
		r.did(node + " drained: power it off or reboot it; the agent uncordons it once it is back from that boot (Ready with a new boot ID)")
	} else {
		r.did(node + " drained; it was cordoned before the request and stays cordoned after its boot")
	}
	r.log.Info("drain request complete")
	return nil, nil
}

// bootID is the node's boot id as the cluster shows it, "" when unknown.
func (r *Runner) bootID(snap *kube.Snapshot) string {
	if n, ok := snap.Node(r.opts.Node); ok {
		return n.Status.NodeInfo.BootID
	}
	return ""
}

// undoCordon takes back the cordon this attempt made, recorded.
func (r *Runner) undoCordon(ctx context.Context, snap *kube.Snapshot) {
	recorder, _ := r.auditRecorder()
	a := flow.Cordon(recorder, snap, r.opts.Node, false)
	a.SetDetail("the agent's own cordon, taken back: its drain request is held")
	if err := a.Run(ctx, nil); err != nil {
		r.log.Warn("taking back the cordon of a held drain request", "err", err)
		return
	}
	_ = r.update(func(_ *Status, rc *record) {
		if rc != nil {
			rc.CordonedByAgent = false
		}
	})
	r.did(r.opts.Node + " uncordoned: the drain is held")
}
