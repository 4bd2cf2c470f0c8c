package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sitecon/sitecon/kube"
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
	for _, a := range r.Answers {
		name := a.Name()
		switch {
		case a.Answered:
			answered++
			skew := a.ClockSkew.Round(100 * time.Millisecond)
			abs := max(skew, -skew)
			if abs < ClockSkewWarn {
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
		}
	}
	if answered == 0 && len(out) == 0 {
		var why []string
		for _, a := range r.Answers {
			if a.Problem != "" {
				why = append(why, a.Name()+": "+a.Problem)
			}
		}
		slices.Sort(why)
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: no node answered", Evidence: why}}
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
type nodeReportsFunc = func(context.Context) kube.NodeReports
