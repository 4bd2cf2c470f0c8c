package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sitecon/sitecon/kube"
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

// Migrate is a move planned: the override that will be written.
type Migrate struct {
	Action
	App      kube.AppStatus
	Target   string
	Override kube.PlacementOverride
	Timeout  time.Duration
}

// PlanMigrate resolves the app and the target and makes the placement
// override a move writes; a refusal is recorded and returned as a
// *Refused. It reads the app's workload once (its config's designated
// node and version, which the override records).
func PlanMigrate(ctx context.Context, r Recorder, snap *kube.Snapshot, req MigrateRequest) (*Migrate, error) {
	rec := r.Open(ActionMigrate, req.App+" → "+req.Target)
	d := snap.Data()
	app, ok := kube.FindApp(kube.Derive(d, time.Now()).Apps, req.App)
	if !ok {
		return nil, rec.Refuse(fmt.Sprintf("no app %q (apps: %s)", req.App, kube.AppNames(kube.Derive(d, time.Now()).Apps)))
	}
	rec.SetTarget(app.Name + " → " + req.Target)
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
	}
	n, _ := snap.Node(req.Target)
	if n.Labels[kube.LabelNodeUUID] == "" {
		return nil, rec.Refuse(fmt.Sprintf("%s has no %s label: its agent could not know it is the app's node", req.Target, kube.LabelNodeUUID))
	}
	config, err := kube.ReadAppConfigRef(ctx, snap.Clients(), app.UUID)
	if err != nil {
		return nil, rec.Refuse(err.Error())
	}
	m := &Migrate{Action: Action{Record: rec}, App: app, Target: req.Target, Timeout: req.Timeout,
		Override: kube.PlacementOverride{Node: req.Target, NodeUUID: n.Labels[kube.LabelNodeUUID], By: r.by(), At: time.Now().UTC(),
			Reason: req.Reason, ConfigDNId: config.DNId, ConfigVersion: config.Version}}
	if m.Timeout == 0 {
		m.Timeout = DefaultMigrateTimeout
	}
	// The intent names the override it is about to write.
	raw, _ := json.Marshal(m.Override)
	rec.SetDetail(string(raw))
	m.Change = func(ctx context.Context, progress func(string)) error { return m.move(ctx, snap, progress) }
	return m, nil
}

// From is where the app runs now, for the question.
func (m *Migrate) From() string { return OrNone(m.App.Node) }

func (m *Migrate) move(ctx context.Context, snap *kube.Snapshot, progress func(string)) error {
	name, target := m.App.Name, m.Target
	if err := kube.WriteOverride(ctx, snap.Clients().Core, m.App.UUID, m.Override); err != nil {
		return err
	}
	progress(fmt.Sprintf("override written; waiting for %s to run on %s", name, target))
	last, err := kube.WaitAppOn(ctx, snap, m.App.UUID, target, m.Timeout, func(where string) { progress(name + ": " + where) })
	switch {
	case err == nil:
		m.Done = name + " runs on " + target
		progress(m.Done)
		return nil
	case errors.Is(err, kube.ErrNotMovedYet):
		return fmt.Errorf("%s did not run on %s within %s (last seen: %s); the override stays in place", name, target, m.Timeout, OrNone(last))
	}
	return fmt.Errorf("stopped waiting; the override stays in place and %s keeps moving to %s: %w", name, target, err)
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
