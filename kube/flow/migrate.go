package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
	"github.com/sitecon/sitecon/kube/safety"
)

// ActionMigrate is a move's action name, as recorded.
const ActionMigrate = "migrate"

// MigrateRequest is a move of an app to a node.
type MigrateRequest struct {
	// App is the app's name or UUID.
	App    string
	Target string
	// Reason is why, for the record.
	Reason string
	// Timeout bounds the wait for the app to run on the target (0: the
	// default).
	Timeout time.Duration
}

// Migrate is a move planned: the override that will be written, or, when
// the app's layout designates the target already (Restart), the app
// started again for the scheduler to place it there.
type Migrate struct {
	Action
	App      kube.AppStatus
	Target   string
	Override kube.PlacementOverride
	// Restart: the layout names Target already (an app away from home), so
	// an override would change nothing the agents lay out, and an app whose
	// affinity is only preferred stays where it runs: the move starts it
	// again instead, and no override is written.
	Restart bool
	Timeout time.Duration
}

// restartDetail is a restart's record: what is started again, where it
// should come up, and why no override is written.
type restartDetail struct {
	Restart string `json:"restart"`
	Node    string `json:"node"`
	Why     string `json:"why"`
	By      string `json:"by"`
	Reason  string `json:"reason,omitempty"`
}

// PlanMigrate resolves the app and the target and makes the placement
// override a move writes; a refusal is recorded and returned as a
// *Refused. It reads the app's workload once (its config's designated
// node and version, which the override records).
func PlanMigrate(ctx context.Context, r Recorder, snap *kube.Snapshot, req MigrateRequest) (*Migrate, error) {
	rec := r.Open(ActionMigrate, req.App+" → "+req.Target)
	if !snap.Synced() {
		return nil, rec.Refuse(NotRead)
	}
	d := snap.Data()
	app, ok := kube.FindApp(kube.Derive(d, time.Now()).Apps, req.App)
	if !ok {
		return nil, rec.Refuse(fmt.Sprintf("no app %q (apps: %s)", req.App, kube.AppNames(kube.Derive(d, time.Now()).Apps)))
	}
	rec.SetTarget(app.Name + " → " + req.Target)
	return planMove(ctx, rec, r, snap, d, app, req)
}

// planMove plans the move of app to req.Target under rec: the target's
// checks, then the override, or the restart when the layout names the
// target already.
func planMove(ctx context.Context, rec *Record, r Recorder, snap *kube.Snapshot, d kube.Data, app kube.AppStatus, req MigrateRequest) (*Migrate, error) {
	var chosen *safety.MigrateTarget
	var eligible []string
	for _, t := range safety.MigrateTargets(app.Node, app.Requires, kube.NodeFacts(d.Nodes)) {
		if t.Node == req.Target {
			chosen = &t
		}
		if t.Eligible {
			eligible = append(eligible, t.Node)
		}
	}
	switch {
	case chosen == nil:
		return nil, rec.Refuse(fmt.Sprintf("%s: %v (nodes: %s)", req.Target, safety.ErrUnknownNode, kube.NodeNames(d.Nodes)))
	case !chosen.Eligible:
		return nil, rec.Refuse(fmt.Sprintf("%s cannot take %s: %s (eligible: %s)", req.Target, app.Name, chosen.Why, OrNone(eligible...)))
	case app.UUID == "":
		return nil, rec.Refuse(app.Name + " has no app UUID: it was not laid out by a sitecon agent")
	}
	m := &Migrate{Action: Action{Record: rec}, App: app, Target: req.Target, Timeout: req.Timeout}
	if m.Timeout == 0 {
		m.Timeout = DefaultMigrateTimeout
	}
	if app.DesignatedNode == req.Target {
		m.Restart = true
		raw, _ := json.Marshal(restartDetail{Restart: m.restartWhat(app), Node: req.Target, By: r.by(), Reason: req.Reason,
			Why: "its layout designates " + req.Target + " already: an override would change nothing"})
		rec.SetDetail(string(raw))
		m.Change = func(ctx context.Context, progress func(string)) error { return m.restart(ctx, snap, progress) }
		return m, nil
	}
	n, _ := snap.Node(req.Target)
	if n.Labels[kube.LabelNodeUUID] == "" {
		return nil, rec.Refuse(fmt.Sprintf("%s has no %s label: its agent could not know it is the app's node", req.Target, kube.LabelNodeUUID))
	}
	config, err := change.ReadAppConfigRef(ctx, snap.Clients(), app.UUID)
	if err != nil {
		return nil, rec.Refuse(err.Error())
	}
	m.Override = kube.PlacementOverride{Node: req.Target, NodeUUID: n.Labels[kube.LabelNodeUUID], By: r.by(), At: time.Now().UTC(),
		Reason: req.Reason, ConfigDNId: config.DNId, ConfigVersion: config.Version}
	// The intent names the override it is about to write.
	raw, _ := json.Marshal(m.Override)
	rec.SetDetail(string(raw))
	m.Change = func(ctx context.Context, progress func(string)) error { return m.move(ctx, snap, progress) }
	return m, nil
}

// Plan says what the move does, for a dry run: the override it writes or
// what it starts again.
func (m *Migrate) Plan() string {
	if m.Restart {
		return fmt.Sprintf("restart %s (its layout designates %s already; no override)", m.restartWhat(m.App), m.Target)
	}
	return "override " + m.Audit().Detail
}

func (m *Migrate) restartWhat(app kube.AppStatus) string {
	kind := "pod"
	if app.Kind == kube.AppKindVM {
		kind = "VMI"
	}
	return fmt.Sprintf("%s %s on %s", kind, app.Object, OrNone(app.Node))
}

// From is where the app runs now, for the question.
func (m *Migrate) From() string { return OrNone(m.App.Node) }

func (m *Migrate) move(ctx context.Context, snap *kube.Snapshot, progress func(string)) error {
	name, target := m.App.Name, m.Target
	if err := change.WriteOverride(ctx, snap.Clients().Core, m.App.UUID, m.Override); err != nil {
		return err
	}
	progress(fmt.Sprintf("override written; waiting for %s to run on %s", name, target))
	return m.follow(ctx, snap, progress, "the override stays in place")
}

// restart starts the app again where it is now, unless it has come to the
// target since the plan, and follows it there.
func (m *Migrate) restart(ctx context.Context, snap *kube.Snapshot, progress func(string)) error {
	name, target := m.App.Name, m.Target
	app, ok := kube.FindApp(snap.Status().Apps, m.App.UUID)
	switch {
	case !ok:
		return fmt.Errorf("%s is no longer in the cluster: nothing was restarted", name)
	case app.Node == target && app.Ready:
		m.Done = name + " runs on " + target + " already; nothing was restarted"
		progress(m.Done)
		return nil
	}
	if err := change.RestartApp(ctx, snap.Clients(), snap.Data(), app); err != nil {
		return err
	}
	progress(fmt.Sprintf("%s stopped; waiting for %s to start on %s", m.restartWhat(app), name, target))
	return m.follow(ctx, snap, progress, "its controller starts it again wherever the scheduler places it")
}

// follow waits for the app to run on the target; after says what stays
// when it does not.
func (m *Migrate) follow(ctx context.Context, snap *kube.Snapshot, progress func(string), after string) error {
	name, target := m.App.Name, m.Target
	last, err := change.WaitAppOn(ctx, snap, m.App.UUID, target, m.Timeout, func(where string) { progress(name + ": " + where) })
	switch {
	case err == nil:
		m.Done = name + " runs on " + target
		progress(m.Done)
		return nil
	case errors.Is(err, change.ErrNotMovedYet):
		return fmt.Errorf("%s did not run on %s within %s (last seen: %s); %s", name, target, m.Timeout, OrNone(last), after)
	}
	if !m.Restart {
		return fmt.Errorf("stopped waiting; the override stays in place and %s keeps moving to %s: %w", name, target, err)
	}
	return fmt.Errorf("stopped waiting for %s to run on %s (%s): %w", name, target, after, err)
}

// OrNone lists names, or says none.
func OrNone(names ...string) string {
	var out []string
	for _, n := range names {
		if n != "" {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
