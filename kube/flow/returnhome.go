package flow

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/safety"
)

// ActionReturnHome is a move home's action name, as recorded.
const ActionReturnHome = "return-home"

// ReturnHomeRequest is a move of an app back to its designated node.
type ReturnHomeRequest struct {
	// App is the app's name or UUID.
	App string
	// Reason is why, for the record.
	Reason string
	// Timeout bounds the wait for the app to run home (0: the default).
	Timeout time.Duration
}

// ReturnHome is a move home planned: the preflight's verdict and the move
// itself, a migrate to the designated node (see Migrate) under this
// action's record. Move is nil when the app is home already.
type ReturnHome struct {
	Record  *Record
	Verdict safety.ReturnHomeVerdict
	Move    *Migrate
}

// PlanReturnHome judges moving the app back to the node its layout
// designates (safety.ReturnHome, on facts read by kube.ReturnHomeCheck)
// and plans the move there. A refusal is recorded and returned as a
// *Refused; warnings are the face's to put to the technician (NeedsForce,
// RefuseUnforced). An app home already has nothing planned (NothingToDo).
func PlanReturnHome(ctx context.Context, r Recorder, snap *kube.Snapshot, req ReturnHomeRequest) (*ReturnHome, error) {
	rec := r.Open(ActionReturnHome, req.App)
	if !snap.Synced() {
		return nil, rec.Refuse(NotRead)
	}
	d := snap.Data()
	all := kube.Derive(d, time.Now()).Apps
	app, ok := kube.FindApp(all, req.App)
	if !ok {
		return nil, rec.Refuse(fmt.Sprintf("no app %q (apps: %s)", req.App, kube.AppNames(all)))
	}
	v := safety.ReturnHome(change.ReturnHomeCheck(d, app))
	rec.SetTarget(app.Name + " → " + OrNone(v.Home))
	rh := &ReturnHome{Record: rec, Verdict: v}
	switch {
	case v.Refused():
		return nil, rec.Refuse(v.Refusals...)
	case v.AlreadyHome:
		return rh, nil
	}
	m, err := planMove(ctx, rec, r, snap, d, app, MigrateRequest{App: app.UUID, Target: v.Home, Reason: req.Reason, Timeout: req.Timeout})
	if err != nil {
		return nil, err
	}
	rec.SetPreflight(append(slices.Clone(v.Warnings), v.Notes...))
	// Confirmed, the move goes ahead only if the home node still passes:
	// a confirmation can sit on screen while the node is lost again.
	move := m.Change
	m.Change = func(ctx context.Context, progress func(string)) error {
		if err := rh.recheck(snap); err != nil {
			return err
		}
		return move(ctx, progress)
	}
	rh.Move = m
	return rh, nil
}

// AlreadyHome says the app runs on its designated node: nothing to do.
func (rh *ReturnHome) AlreadyHome() bool { return rh.Verdict.AlreadyHome }

// NothingToDo records an app found home (done, nothing changed) and says so.
func (rh *ReturnHome) NothingToDo() (string, error) {
	msg := fmt.Sprintf("%s runs on its designated node %s already; nothing to do", rh.Verdict.App, rh.Verdict.Home)
	rh.Record.SetDetail(msg)
	return msg, joinProblem(nil, rh.Record.End(audit.OutcomeDone, nil))
}

// NeedsForce reports whether the move may only go on with --force and
// the home node's name typed (TypedName).
func (rh *ReturnHome) NeedsForce() bool { return rh.Verdict.NeedsForce() }

// TypedName is what must be typed to go on: the home node when the
// preflight warns, else nothing.
func (rh *ReturnHome) TypedName() string {
	if rh.NeedsForce() {
		return rh.Verdict.Home
	}
	return ""
}

// RefuseUnforced records the warnings as a refusal, for a face asked to go
// on without --force.
func (rh *ReturnHome) RefuseUnforced() error {
	return rh.Record.Refuse(append(slices.Clone(rh.Verdict.Warnings), "run again with --force (and the node name typed) to accept this")...)
}

// recheck judges the move again on the snapshot as it is now: a refusal,
// or a warning where the technician confirmed none, stops it before anything
// changes (*kube.PlanChangedError: recorded as refused).
func (rh *ReturnHome) recheck(snap *kube.Snapshot) error {
	d := snap.Data()
	app, ok := kube.FindApp(kube.Derive(d, time.Now()).Apps, rh.Move.App.UUID)
	if !ok {
		return &change.PlanChangedError{Node: rh.Verdict.Home, Reasons: []string{rh.Verdict.App + " is no longer in the cluster"}}
	}
	now := safety.ReturnHome(change.ReturnHomeCheck(d, app))
	reasons := slices.Clone(now.Refusals)
	// Warnings accepted (typed) cover the same kind of warning told again
	// (a failed replica now rebuilding); warnings where none were are new.
	if !rh.Verdict.NeedsForce() {
		for _, w := range now.Warnings {
			reasons = append(reasons, w+" (not in the preflight you confirmed)")
		}
	}
	if !now.AlreadyHome && now.Home != rh.Verdict.Home {
		reasons = append(reasons, fmt.Sprintf("its designated node is %s now, not %s", OrNone(now.Home), rh.Verdict.Home))
	}
	if len(reasons) > 0 {
		return &change.PlanChangedError{Node: rh.Verdict.Home, Reasons: reasons}
	}
	return nil
}

// AwayApps are the apps running off their designated node, longest away
// first: what return-home --all walks.
func AwayApps(snap *kube.Snapshot) []kube.AppStatus {
	return kube.AwayApps(kube.Derive(snap.Data(), time.Now()).Apps)
}

// AwayLine is what a walk that may leave apps elsewhere (a maintenance)
// says at its end when apps run away from home: which, and the command
// that returns them. It offers the command and runs nothing. "" when none
// is away.
func AwayLine(away []kube.AppStatus) string {
	if len(away) == 0 {
		return ""
	}
	var names []string
	for _, a := range away {
		names = append(names, a.Name+" (on "+OrNone(a.Node)+", home "+a.DesignatedNode+")")
	}
	return fmt.Sprintf("%d app(s) away from home: %s; once their designated nodes are Ready, return them with: sitecon return-home --all",
		len(away), strings.Join(names, ", "))
}
