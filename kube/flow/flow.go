// Package flow is every on-site change to the cluster, written once, one
// file per action: cordon.go (cordon, uncordon), drain.go, remove.go (a
// drain, then the node deleted), replace.go, seed.go (seed change),
// migrate.go, returnhome.go (the migrate to an app's designated node),
// add.go (handing out a new node's join info) and leave.go
// (sitecon agent leave); this file is what they share, the audit record
// and the run. The CLI (package main) and the console (views) both call
// it and keep only the asking and the telling, as k9s's views call its
// dao and Harvester's controller and API share one drainhelper. The
// rules each flow judges by are in kube/safety.
//
// Each flow records itself in the audit log (docs/DESIGN.md, "A human
// confirms"): planned, a refusal is one record; confirmed, the intent is
// on disk before the change and the outcome follows it under the same
// id. The faces never write a record of their own.
package flow

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube/change"
)

// Defaults every face shares: a drain or a move waits this long, whoever
// asked for it.
const (
	DefaultDrainTimeout   = 5 * time.Minute
	DefaultMigrateTimeout = 5 * time.Minute
	// PodsOwnGracePeriod lets each evicted pod stop in its own time.
	PodsOwnGracePeriod = -time.Second
)

// Recorder is where a flow's records go, and the face that acted.
type Recorder struct {
	Log *audit.Log
	// Via is "console" for the console, empty for a command.
	Via string
	// DryRun: every record opened is a dry run's (--dry-run): whatever it
	// ends with is recorded as a dry run, a refusal as what the real
	// action would meet, never as a refused action.
	DryRun bool
}

// NotRead refuses an action planned on a snapshot that has not read the
// cluster yet: its lists are empty, not the cluster's, and a plan made
// from them is made from nothing ("no such node", "no app", a node
// holding no volume). Every face waits for the first read before it
// offers an action; this holds whatever a face does.
const NotRead = "the cluster's state has not been read yet: try again once it has"

// Open starts the record of one action on target; nothing is written yet.
func (r Recorder) Open(action, target string) *Record {
	return &Record{log: r.Log, rec: audit.Record{Action: action, Target: target, Via: r.Via}, dryRun: r.DryRun}
}

// by is who an on-site change says made it (an override's "by").
func (r Recorder) by() string {
	if r.Via != "" {
		return audit.CurrentUser() + " (" + r.Via + ")"
	}
	return audit.CurrentUser()
}

// Record is one action's audit record: written once as its intent, once
// as its outcome, or once alone when nothing was changed. The console
// ends it from its own goroutine when it closes while the change runs:
// the first outcome stands.
type Record struct {
	mu    sync.Mutex
	log   *audit.Log
	rec   audit.Record
	entry *audit.Entry
	ended bool
	// dryRun: see Recorder.DryRun.
	dryRun bool
	// problem is why a record could not be written.
	problem error
}

// Audit is the record as it stands, for display.
func (r *Record) Audit() audit.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rec
}

// SetTarget, SetDetail and SetPreflight add to the record before its
// outcome.
func (r *Record) SetTarget(target string) { r.set(func(a *audit.Record) { a.Target = target }) }
func (r *Record) SetDetail(detail string) { r.set(func(a *audit.Record) { a.Detail = detail }) }
func (r *Record) SetPreflight(p []string) { r.set(func(a *audit.Record) { a.Preflight = p }) }

func (r *Record) set(f func(*audit.Record)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.rec)
}

// Begin writes the intent, synced, right before the change it names: cut
// off after this (a dropped SSH session, a crash), the log still says what
// was under way. An error means nothing is on disk and the change must not
// be made; the attempt is recorded as failed if the log takes it after
// all. Calling it again is a no-op.
func (r *Record) Begin() error {
	r.mu.Lock()
	if r.entry != nil || r.ended {
		r.mu.Unlock()
		return nil
	}
	var e *audit.Entry
	err := errors.New("no audit log")
	if r.log != nil {
		e, err = r.log.Begin(r.rec)
	}
	if err == nil {
		r.entry, r.rec.ID = e, e.Rec.ID
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	err = fmt.Errorf("%s %s not done: its intent cannot be recorded: %w", r.rec.Action, r.rec.Target, err)
	return joinProblem(err, r.End(audit.OutcomeFailed, err))
}

// Begun reports whether the intent is on disk.
func (r *Record) Begun() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.entry != nil
}

// End writes the outcome, through the intent once there is one, else as
// a record of its own; only the first call writes. It returns why the
// record could not be written, nil when it was.
func (r *Record) End(outcome string, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return nil
	}
	r.ended = true
	r.rec.Outcome, r.rec.Error = outcome, ""
	if err != nil {
		r.rec.Error = err.Error()
	}
	var werr error
	switch {
	case r.entry != nil:
		r.entry.Rec = r.rec
		werr = r.entry.End(outcome, err)
	case r.log != nil:
		werr = r.log.Write(r.rec)
	default:
		werr = errors.New("no audit log")
	}
	if werr != nil {
		r.problem = werr
	}
	return werr
}

// Ended reports whether the outcome was written (or tried).
func (r *Record) Ended() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}

// Problem is why a record could not be written, nil when all were.
func (r *Record) Problem() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.problem
}

// Refuse records a refusal (nothing was changed) with its reasons and
// returns it as a *Refused.
func (r *Record) Refuse(reasons ...string) error {
	a := r.Audit()
	refused := &Refused{Action: a.Action, Target: a.Target, Reasons: reasons, Record: r}
	r.SetPreflight(reasons)
	if r.dryRun {
		// Nothing was asked but a plan: what the real action would meet.
		return joinProblem(refused, r.End(audit.OutcomeDryRun, fmt.Errorf("would be refused: %w", refused)))
	}
	return joinProblem(refused, r.End(audit.OutcomeRefused, refused))
}

// Cancel records an action not confirmed (nothing was changed).
func (r *Record) Cancel(why error) error {
	return joinProblem(why, r.End(audit.OutcomeCancelled, why))
}

// DryRun records a plan shown, not carried out.
func (r *Record) DryRun() error { return r.End(audit.OutcomeDryRun, nil) }

// Interrupt records an action cut off while it ran (a signal, the console
// closed), once its intent is on disk and it has no outcome yet.
func (r *Record) Interrupt(cause error) {
	if r.Begun() {
		_ = r.End(audit.OutcomeInterrupted, cause)
	}
}

// joinProblem adds to err that the record could not be written.
func joinProblem(err, werr error) error {
	if werr != nil {
		return errors.Join(err, &NotRecorded{Err: werr})
	}
	return err
}

// NotRecorded is a record the audit log did not take: the log no longer
// holds what happened, and the face says so.
type NotRecorded struct{ Err error }

func (e *NotRecorded) Error() string { return "audit log: " + e.Err.Error() }
func (e *NotRecorded) Unwrap() error { return e.Err }

// Refused is an action refused before anything changed, with every reason.
type Refused struct {
	Action, Target string
	Reasons        []string
	// Record is the refusal's record, for a face that shows it.
	Record *Record
}

func (e *Refused) Error() string {
	return fmt.Sprintf("%s %s refused:\n  - %s", e.Action, e.Target, strings.Join(e.Reasons, "\n  - "))
}

// Action is a planned change, confirmed or not yet: its record and the
// change itself.
type Action struct {
	*Record
	// Change makes the change, telling progress one line at a time. The
	// flows set it; a console test may put a stub in its place.
	Change func(ctx context.Context, progress func(string)) error
	// Done is what the change achieved, in one line, once it succeeded
	// ("hmi runs on node-a"); empty when the action's name says it.
	Done string
}

// Run makes the change: its intent on disk first (not made if the intent
// cannot be written), its outcome after, told by what the change
// returned. ctx ended by a cause other than a plain cancel (a signal, the
// console's end) is an interruption.
func (a *Action) Run(ctx context.Context, progress func(string)) error {
	if err := a.Begin(); err != nil {
		return err
	}
	if progress == nil {
		progress = func(string) {}
	}
	err := a.Change(ctx, progress)
	outcome := Outcome(ctx, err)
	switch changed := (*change.PlanChangedError)(nil); {
	case errors.As(err, &changed):
		a.SetPreflight(changed.Reasons)
	case outcome == audit.OutcomeInterrupted && !errors.Is(err, context.Cause(ctx)):
		err = fmt.Errorf("%w (%v)", err, context.Cause(ctx))
	}
	return joinProblem(err, a.End(outcome, err))
}

// Outcome is the audit outcome of a change that returned err under ctx: a
// cluster changed since the confirmation is a refusal (nothing was
// changed), a stop asked for is a cancel, one caused by anything else (a
// signal) an interruption.
func Outcome(ctx context.Context, err error) string {
	changed := (*change.PlanChangedError)(nil)
	switch {
	case err == nil:
		return audit.OutcomeDone
	case errors.As(err, &changed):
		return audit.OutcomeRefused
	case ctx.Err() != nil:
		if cause := context.Cause(ctx); cause != context.Canceled && cause != context.DeadlineExceeded {
			return audit.OutcomeInterrupted
		}
		return audit.OutcomeCancelled
	case errors.Is(err, context.Canceled):
		return audit.OutcomeCancelled
	}
	return audit.OutcomeFailed
}
