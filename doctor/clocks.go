package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sitecon/sitecon/kube/nodestate"
)

// Clock skew thresholds between a node and this machine. etcd warns of a
// peer's clock from 1 s apart; the kubelets' leases (40 s), the failover
// guard's windows and freshly issued certificates go wrong in tens of
// seconds.
const (
	ClockSkewWarn  = time.Second
	ClockSkewError = 30 * time.Second
)

// checkClocks compares every node's clock with this machine's, through
// each agent's own report (asked with the cluster config's key): it runs
// with the cluster API down as well, when skewed clocks are a likely
// reason.
func checkClocks(ctx context.Context, env *Env) []Finding {
	if env.NodeReports == nil {
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: no cluster config on this machine to ask the nodes with",
			Next: "on a node, or with --config FILE"}}
	}
	r := env.NodeReports(ctx)
	if len(r.Answers) == 0 {
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: no node could be asked", Evidence: []string{r.Problem}}}
	}
	var out []Finding
	answered := 0
	// The nodes found in step, each with its skew: the ok's evidence.
	var inStep []string
	for _, a := range r.Answers {
		name := a.Name()
		switch {
		case a.Answered:
			answered++
			skew := a.ClockSkew.Round(100 * time.Millisecond)
			abs := max(skew, -skew)
			if abs < ClockSkewWarn {
				inStep = append(inStep, fmt.Sprintf("%s: %s %s", name, abs, aheadOrBehind(skew)))
				continue
			}
			sev := Warn
			if abs >= ClockSkewError {
				sev = Error
			}
			out = append(out, Finding{Severity: sev, Subject: name,
				Summary:  fmt.Sprintf("%s's clock is %s %s of this machine's", name, abs, aheadOrBehind(skew)),
				Evidence: []string{fmt.Sprintf("its agent's report at %s, read at %s", a.Report.Clock.UTC().Format(time.RFC3339), r.At.UTC().Format(time.RFC3339))},
				Next:     "synchronise the nodes' time (timedatectl status; an NTP server every node reaches)"})
		case strings.Contains(a.Problem, "clocks differ"):
			// Refused for its clock: more than the reports' window apart.
			out = append(out, Finding{Severity: Error, Subject: name, Summary: name + " refused to report: the clocks differ too much",
				Evidence: []string{a.Problem}, Next: "synchronise the nodes' time (timedatectl status; an NTP server every node reaches)"})
		default:
			// No report, no clock: never counted as in step.
			out = append(out, Finding{NotChecked: true, Severity: Warn, Subject: name,
				Summary:  fmt.Sprintf("clock not checked on %s: its agent gave no report", name),
				Evidence: nonEmpty(a.Problem),
				Next:     fmt.Sprintf("on %s: systemctl status sitecon-agent (its report carries the clock)", name)})
		}
	}
	if answered == 0 && !slices.ContainsFunc(out, func(f Finding) bool { return !f.NotChecked }) {
		var why []string
		for _, a := range r.Answers {
			if a.Problem != "" {
				why = append(why, a.Name()+": "+a.Problem)
			}
		}
		slices.Sort(why)
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: no node answered", Evidence: why}}
	}
	if len(inStep) > 0 {
		slices.Sort(inStep)
		out = append(out, Finding{Severity: OK, Summary: fmt.Sprintf("%d node(s)' clocks within %s of this machine's", len(inStep), ClockSkewWarn),
			Evidence: append(inStep, "read at "+r.At.UTC().Format(time.RFC3339))})
	}
	return out
}

func aheadOrBehind(skew time.Duration) string {
	if skew > 0 {
		return "ahead"
	}
	return "behind"
}

// nodeReportsFunc asks every node for its own report (nil: no cluster
// config to ask with).
type nodeReportsFunc = func(context.Context) nodestate.NodeReports
