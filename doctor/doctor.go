// Package doctor is `sitecon doctor`: read-only checks of a site, each
// with a stable id, a deadline of its own, and findings that carry their
// evidence and the next step. The checks read the cluster through one
// snapshot (kube.Data) and a few reads of their own, this machine's
// files (k3s certificates) and agent, and every node's own report (its
// clock and the checks its agent makes on the node: nodechecks.go); none
// of them changes anything.
//
// A check that cannot run in its deadline, or at all, says so and why in
// a finding of its own: nothing passes by not running. Each id has a row
// in docs/DOCTOR.md's "Findings" table (what it means, what to do).
package doctor

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sitecon/sitecon/kube"
)

// Severity orders findings: a report's worst decides the exit status.
type Severity int

// The severities, mildest first.
const (
	OK Severity = iota
	Info
	Warn
	Error
)

var severityNames = []string{"ok", "info", "warn", "error"}

func (s Severity) String() string {
	if s < OK || s > Error {
		return fmt.Sprintf("severity(%d)", int(s))
	}
	return severityNames[s]
}

// MarshalText writes the severity by name in JSON.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a severity by name.
func (s *Severity) UnmarshalText(b []byte) error {
	i := slices.Index(severityNames, string(b))
	if i < 0 {
		return fmt.Errorf("unknown severity %q", b)
	}
	*s = Severity(i)
	return nil
}

// Areas group the checks in the report.
const (
	AreaCluster      = "cluster API"
	AreaControlPlane = "control plane"
	AreaStorage      = "storage"
	AreaApps         = "apps"
	AreaNodes        = "nodes"
	AreaNetwork      = "cluster network"
	AreaThisNode     = "this node"
)

// areaOrder is the order areas are printed in when equally bad.
var areaOrder = []string{AreaCluster, AreaControlPlane, AreaNodes, AreaNetwork, AreaStorage, AreaApps, AreaThisNode}

// Finding is one thing a check found (or that it found nothing).
type Finding struct {
	// ID is the check's stable id (SC-VOL-DEGRADED); docs/DOCTOR.md's
	// Findings table has a row for each.
	ID       string   `json:"id"`
	Area     string   `json:"area"`
	Severity Severity `json:"severity"`
	// Subject is what the finding is about (a node, a volume, an app);
	// empty for the check as a whole.
	Subject string `json:"subject,omitempty"`
	// Summary says what is wrong in one line; Evidence the facts behind it
	// (names, numbers).
	Summary  string   `json:"summary"`
	Evidence []string `json:"evidence,omitempty"`
	// Since is when it started, when known.
	Since *time.Time `json:"since,omitempty"`
	// Next is what to do, in one or two lines.
	Next string `json:"next,omitempty"`
	// NotChecked: the check could not run, or ran only in part, for its
	// subject (why is in the summary): unknown, never healthy. Its next
	// step says how to get it run, and is printed whatever its severity.
	NotChecked bool `json:"notChecked,omitempty"`
}

// Env is what the checks read: one snapshot read of the cluster (Data is
// empty and APIProblem says why when the API server could not be read),
// the clients for the few reads a check makes itself, and this machine.
type Env struct {
	Data    kube.Data
	Clients *kube.Clients
	// APIProblem is why the cluster API could not be read; empty when it
	// was. The cluster checks do not run without it and say so.
	APIProblem string
	// APIStillReading: the API server answered and was ready, and the
	// cluster was still being read when the wait ran out (a large
	// cluster, a busy machine), not an API server that is down.
	APIStillReading bool
	Now             time.Time
	// K3sDataDir is k3s's data directory on this machine.
	K3sDataDir string
	// AgentConfigErrors asks this node's agent for the config files and
	// placement entries it refuses (file or entry → why); nil when no agent
	// can be asked.
	AgentConfigErrors func(context.Context) (map[string]string, error)
	// NodeReports asks every node's agent for its own report, with the
	// cluster config's key; nil when there is no config to ask with.
	NodeReports nodeReportsFunc
	// StatusScan asks the hosts of this node's cluster prefix for /status
	// with dial; nil when there is no cluster config here.
	StatusScan func(ctx context.Context, dial DialFunc) StatusScan
	// Dial opens the network checks' connections (nil: a plain dialer;
	// tests dial from inside a network namespace).
	Dial DialFunc
	// LocalNode reads which node this machine is from its cluster config;
	// nil when there is none. ClusterPorts are the ports peers dial at a
	// node's cluster address (netcfg's list, from main).
	LocalNode    func() (LocalNode, error)
	ClusterPorts []ClusterPort
	// AuditLog is this machine's audit log ("" : none given).
	AuditLog string
}

// Check is one named check.
type Check struct {
	ID    string
	Area  string
	Title string
	// Deadline bounds the check; it then yields a finding saying it did not
	// finish.
	Deadline time.Duration
	// NeedsAPI: the check reads the cluster; without the API server it does
	// not run, and says so.
	NeedsAPI bool
	// Next is the check's usual next step, used when a finding gives none.
	Next string
	Run  func(ctx context.Context, env *Env) []Finding
}

// Report is the outcome of a doctor run.
type Report struct {
	At time.Time `json:"at"`
	// API says whether the cluster API could be read ("" when it could).
	APIProblem string    `json:"apiProblem,omitempty"`
	Worst      Severity  `json:"worst"`
	Findings   []Finding `json:"findings"`
}

// Exit statuses of `sitecon doctor` (documented in the README): the
// same meanings as `sitecon status`'s, so a script reads both alike. How
// bad a finding is, the report says (its severity).
const (
	ExitOK             = 0 // nothing worse than info
	ExitAttention      = 1 // at least one warning or error: something needs attention
	ExitAPIUnreachable = 2 // the cluster API could not be read: its checks did not run
	ExitUsage          = 3 // a bad flag or argument: nothing was checked
)

// ExitStatus is the exit status the report calls for.
func (r Report) ExitStatus() int {
	switch {
	case r.APIProblem != "":
		return ExitAPIUnreachable
	case r.Worst == Error, r.Worst == Warn:
		return ExitAttention
	}
	return ExitOK
}

// Run runs every check at once, each within its own deadline (and ctx's),
// and returns the findings worst first. A check that found nothing gets an
// ok finding, so the report shows every check that ran.
func Run(ctx context.Context, checks []Check, env *Env) Report {
	if env.Now.IsZero() {
		env.Now = time.Now()
	}
	// Several checks read the nodes' reports: one round of asking.
	env.NodeReports = onceNodeReports(env.NodeReports)
	results := make([][]Finding, len(checks))
	done := make(chan int, len(checks))
	for i, c := range checks {
		if c.NeedsAPI && env.APIProblem != "" {
			results[i] = []Finding{{ID: c.ID, Area: c.Area, NotChecked: true, Severity: Warn, Summary: c.Title + ": not checked: the cluster API could not be read",
				Evidence: []string{env.APIProblem}, Next: "see " + IDAPIUnreachable}}
			done <- i
			continue
		}
		go func() {
			cctx, cancel := context.WithTimeout(ctx, c.Deadline)
			defer cancel()
			out := make(chan []Finding, 1)
			go func() {
				defer func() {
					if p := recover(); p != nil {
						out <- []Finding{{Severity: Warn, Summary: fmt.Sprintf("%s: the check failed: %v", c.Title, p)}}
					}
				}()
				out <- c.Run(cctx, env)
			}()
			select {
			case f := <-out:
				results[i] = f
			case <-cctx.Done():
				// The check's goroutine is left to finish on its own: it
				// holds nothing but reads, and its context has ended.
				why := fmt.Sprintf("it did not finish within its deadline of %s", c.Deadline)
				if ctx.Err() != nil {
					why = "the doctor's --timeout ran out first"
				}
				results[i] = []Finding{{NotChecked: true, Severity: Warn, Summary: c.Title + ": not checked: " + why,
					Next: "run sitecon doctor again; if it recurs, the API server or this machine is overloaded"}}
			}
			done <- i
		}()
	}
	for range checks {
		<-done
	}
	r := Report{At: env.Now, APIProblem: env.APIProblem}
	if env.APIProblem != "" {
		next := "check that k3s runs on a server (systemctl status sitecon-agent) and that more than half the servers are up"
		if env.APIStillReading {
			next = "the API server answers: the cluster is large or this machine busy; run it again with longer to read it (sitecon doctor --timeout, sitecon bundle --api-timeout)"
		}
		r.Findings = append(r.Findings, Finding{ID: IDAPIUnreachable, Area: AreaCluster, Severity: Error,
			Summary: "the cluster API could not be read", Evidence: []string{env.APIProblem}, Next: next})
	}
	for i, c := range checks {
		if len(results[i]) == 0 {
			r.Findings = append(r.Findings, Finding{ID: c.ID, Area: c.Area, Severity: OK, Summary: c.Title + ": ok"})
			continue
		}
		for _, f := range results[i] {
			f.ID, f.Area = c.ID, c.Area
			if f.Next == "" && f.Severity >= Warn {
				f.Next = c.Next
			}
			r.Findings = append(r.Findings, f)
		}
	}
	Sort(r.Findings)
	for _, f := range r.Findings {
		r.Worst = max(r.Worst, f.Severity)
	}
	return r
}

// IDAPIUnreachable is the finding of a cluster API that could not be read.
const IDAPIUnreachable = "SC-API-UNREACHABLE"

// Sort orders findings by area (the area with the worst finding first),
// then worst first within the area, then by id and subject.
func Sort(fs []Finding) {
	worst := map[string]Severity{}
	for _, f := range fs {
		worst[f.Area] = max(worst[f.Area], f.Severity)
	}
	areaRank := func(a string) int {
		if i := slices.Index(areaOrder, a); i >= 0 {
			return i
		}
		return len(areaOrder)
	}
	slices.SortStableFunc(fs, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(worst[b.Area], worst[a.Area]), cmp.Compare(areaRank(a.Area), areaRank(b.Area)),
			strings.Compare(a.Area, b.Area), cmp.Compare(b.Severity, a.Severity), strings.Compare(a.ID, b.ID),
			strings.Compare(a.Subject, b.Subject))
	})
}

// since is t as a *time.Time for a finding; nil when zero.
func since(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// ago says how long before now t was, in whole seconds ("3m12s").
func ago(now, t time.Time) string {
	return now.Sub(t).Truncate(time.Second).String()
}
