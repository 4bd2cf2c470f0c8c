package doctor

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sitecon/sitecon/kube/nodestate"
	"github.com/sitecon/sitecon/nodecheck"
)

// checkAgentConfigErrors asks this node's agent which app and volume
// files, and which placement entries, it refuses (its config_errors: the
// file and the field that is wrong).
func checkAgentConfigErrors(ctx context.Context, env *Env) []Finding {
	if env.AgentConfigErrors == nil {
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: no agent on this machine to ask"}}
	}
	errs, err := env.AgentConfigErrors(ctx)
	if err != nil {
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: this node's agent did not answer", Evidence: []string{err.Error()},
			Next: "on a node: systemctl status sitecon-agent"}}
	}
	var out []Finding
	for _, file := range slices.Sorted(maps.Keys(errs)) {
		out = append(out, Finding{Severity: Error, Subject: file, Summary: "this node's agent rejects " + file,
			Evidence: []string{errs[file]}})
	}
	return out
}

// Certificate thresholds: k3s renews its certificates at a restart within
// CertRenewWindow of their expiry, and only then.
const (
	CertRenewWindow = 90 * 24 * time.Hour
	CertUrgent      = 30 * 24 * time.Hour
)

// CertFile is one certificate file and its expiry (nodecheck.ReadCerts
// reads them, here and in each node's agent).
type CertFile = nodestate.CertFile

// JudgeCert is the finding for one certificate at now: error when expired
// or within CertUrgent, warn within CertRenewWindow, ok otherwise.
func JudgeCert(c CertFile, now time.Time) Finding {
	f := Finding{Subject: c.Path}
	if c.Problem != "" {
		f.Severity, f.Summary, f.NotChecked = Warn, "certificate "+c.Path+" not checked: it could not be read", true
		f.Evidence = []string{c.Problem}
		f.Next = "k3s rewrites a missing or damaged certificate at its next start: systemctl restart sitecon-agent"
		return f
	}
	left := c.NotAfter.Sub(now)
	f.Since = since(c.NotAfter)
	f.Evidence = []string{fmt.Sprintf("%s (CN %s) not after %s", c.Path, c.Subject, c.NotAfter.UTC().Format("2006-01-02 15:04Z"))}
	days := int(left.Hours() / 24)
	rotate := "k3s renews it only at a restart within 90 days of expiry: systemctl restart sitecon-agent, or k3s certificate rotate"
	switch {
	case left <= 0:
		f.Severity, f.Summary = Error, fmt.Sprintf("certificate %s expired %s ago", filepath.Base(c.Path), (-left).Truncate(time.Hour))
		f.Next = "k3s will not start with it: k3s certificate rotate, then systemctl restart sitecon-agent"
	case left < CertUrgent:
		f.Severity, f.Summary = Error, fmt.Sprintf("certificate %s expires in %d days", filepath.Base(c.Path), days)
		f.Next = rotate
	case left < CertRenewWindow:
		f.Severity, f.Summary = Warn, fmt.Sprintf("certificate %s expires in %d days", filepath.Base(c.Path), days)
		f.Next = rotate
	default:
		f.Severity, f.Summary = OK, fmt.Sprintf("certificate %s valid for %d days", filepath.Base(c.Path), days)
	}
	if strings.Contains(f.Next, "restart") {
		// Every server's certificates age together: the technician
		// restarts them all, and must not at once.
		f.Next += "; " + oneServerAtATime
	}
	return f
}

// checkCerts judges k3s's certificates on this machine. Only the problems
// are listed one by one; the rest are counted in one ok finding.
func checkCerts(_ context.Context, env *Env) []Finding {
	if env.K3sDataDir == "" {
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: no k3s data dir given"}}
	}
	certs, found, err := nodecheck.ReadCerts(env.K3sDataDir)
	switch {
	case err != nil:
		return []Finding{{NotChecked: true, Severity: Warn, Summary: "not checked: the k3s certificates could not be read", Evidence: []string{err.Error()},
			Next: "run sitecon doctor as root on the node"}}
	case !found:
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: no k3s data dir at " + env.K3sDataDir + " (not a node, or another --k3s-data-dir)"}}
	}
	var out []Finding
	soonest := CertFile{}
	for _, c := range certs {
		f := JudgeCert(c, env.Now)
		if f.Severity != OK {
			out = append(out, f)
			continue
		}
		if soonest.Path == "" || c.NotAfter.Before(soonest.NotAfter) {
			soonest = c
		}
	}
	if len(out) == 0 {
		f := Finding{Severity: OK, Summary: fmt.Sprintf("%d k3s certificates valid for more than 90 days", len(certs))}
		if soonest.Path != "" {
			f.Evidence = []string{fmt.Sprintf("first to expire: %s on %s", soonest.Path, soonest.NotAfter.UTC().Format("2006-01-02"))}
		}
		out = append(out, f)
	}
	return out
}
