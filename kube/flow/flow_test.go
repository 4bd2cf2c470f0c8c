package flow

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/audit/audittest"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/change"
)

func testRecorder(t *testing.T) (Recorder, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := audit.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return Recorder{Log: l, Via: "console"}, path
}

// A flow's records are written once each, by the flow: the intent before
// the change, one outcome after it (a second, say from a console closed
// meanwhile, changes nothing), under one id and the face's name.
func TestActionRecordsOnce(t *testing.T) {
	r, path := testRecorder(t)
	a := &Action{Record: r.Open("cordon", "node-c")}
	a.Change = func(context.Context, func(string)) error {
		if got := audittest.Outcomes(t, path); got != "cordon:intent" {
			t.Errorf("while the change runs the log holds %q, want its intent", got)
		}
		return nil
	}
	if err := a.Run(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	a.Interrupt(errors.New("too late"))
	if got := audittest.Outcomes(t, path); got != "cordon:intent cordon:done" {
		t.Fatalf("records %q", got)
	}
	recs, _ := audit.Read(path)
	if recs[0].ID == "" || recs[0].ID != recs[1].ID || recs[1].Via != "console" {
		t.Fatalf("intent and outcome not linked or not the console's: %+v", recs)
	}

	refused := r.Open("seed", "node-b")
	err := refused.Refuse("node-b is not Ready")
	if r := (*Refused)(nil); !errors.As(err, &r) || r.Record != refused || !strings.Contains(err.Error(), "seed node-b refused:\n  - node-b is not Ready") {
		t.Fatalf("refusal: %v", err)
	}
	_ = refused.Cancel(errors.New("not confirmed")) // a second outcome: not written
	if got := audittest.Outcomes(t, path); got != "cordon:intent cordon:done seed:refused" {
		t.Fatalf("records %q", got)
	}
}

// An intent that cannot be written stops the change before it is made.
func TestActionNotTakenUnrecorded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	l, err := audit.Open(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	ran := false
	a := &Action{Record: Recorder{Log: l}.Open("drain", "node-c"), Change: func(context.Context, func(string)) error { ran = true; return nil }}
	err = a.Run(context.Background(), nil)
	if nr := (*NotRecorded)(nil); ran || !errors.As(err, &nr) || !strings.Contains(err.Error(), "not done") {
		t.Fatalf("ran %v, err %v", ran, err)
	}
}

type signal struct{}

func (signal) Error() string { return "interrupted by hangup" }

func TestOutcome(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	interrupted, stop := context.WithCancelCause(context.Background())
	stop(signal{})
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want string
	}{
		{context.Background(), nil, audit.OutcomeDone},
		{context.Background(), errors.New("boom"), audit.OutcomeFailed},
		{context.Background(), &change.PlanChangedError{Node: "node-b", Reasons: []string{"x"}}, audit.OutcomeRefused},
		{cancelled, context.Canceled, audit.OutcomeCancelled},
		{interrupted, context.Canceled, audit.OutcomeInterrupted},
		{context.Background(), context.Canceled, audit.OutcomeCancelled},
	} {
		if got := Outcome(c.ctx, c.err); got != c.want {
			t.Errorf("Outcome(%v, %v) = %s, want %s", c.ctx, c.err, got, c.want)
		}
	}
}

// An action planned on a snapshot that has not read the cluster is
// refused as such, and recorded refused, whichever face plans it: its
// empty lists would make a plan from nothing (a drain's node "holds no
// volume", an app "does not exist").
func TestActionsRefusedBeforeTheClusterIsRead(t *testing.T) {
	// Never started: nothing is sent to this address.
	snap, err := kube.NewSnapshot(&rest.Config{Host: "https://127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, path := testRecorder(t)
	refused := func(what string, err error) {
		t.Helper()
		var ref *Refused
		if !errors.As(err, &ref) || !strings.Contains(err.Error(), NotRead) {
			t.Errorf("%s on an unread snapshot: %v, want refused: %s", what, err, NotRead)
		}
	}
	_, err = PlanMigrate(context.Background(), r, snap, MigrateRequest{App: "plc", Target: "node-b"})
	refused("migrate", err)
	_, err = PlanReturnHome(context.Background(), r, snap, ReturnHomeRequest{App: "plc"})
	refused("return home", err)
	_, err = PlanSeed(r, snap, "node-b")
	refused("seed", err)
	for _, action := range []string{"drain", "remove-node", "replace-node"} {
		p, err := CheckDrain(context.Background(), snap, action, "node-c", "", DrainOptions{})
		if err != nil || !slices.Contains(p.Refusals, NotRead) {
			t.Errorf("%s's preflight on an unread snapshot: %+v, %v; want refused: %s", action, p, err, NotRead)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, `"outcome":"refused"`) && strings.Contains(line, NotRead) {
			got++
		}
	}
	if got != 3 {
		t.Errorf("the audit log records %d refusals for an unread cluster, want 3 (migrate, return home, seed):\n%s", got, data)
	}
}

// A dry run changes nothing and is recorded as one: a preflight that would
// refuse the real action is said in the record's error ("would be
// refused"), never recorded as a refused action, and still returned as a
// refusal (the command's exit says the real one would not go).
func TestDryRunIsNeverRecordedAsRefused(t *testing.T) {
	r, path := testRecorder(t)
	r.DryRun = true
	err := r.Open("drain", "node-c").Refuse("node-c holds the only healthy replica of pvc-1")
	if refused := (*Refused)(nil); !errors.As(err, &refused) {
		t.Fatalf("the dry run's refusal is not returned as one: %v", err)
	}
	if got := audittest.Outcomes(t, path); got != "drain:dry-run" {
		t.Fatalf("records %q, want the dry run only", got)
	}
	recs, _ := audit.Read(path)
	if !strings.Contains(recs[0].Error, "would be refused") || !strings.Contains(recs[0].Error, "only healthy replica") {
		t.Errorf("the dry run's record does not say what the real drain would meet: %+v", recs[0])
	}
}
