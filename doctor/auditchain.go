package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sitecon/sitecon/audit"
)

// checkAuditChain reads this machine's audit log and checks its chain
// (audit.VerifyChain): every record carries the hash of the line before
// it, so a record changed or removed by hand shows where. It does not
// show a log rewritten whole from the change on; records kept off the
// machine (support bundles) do.
func checkAuditChain(_ context.Context, env *Env) []Finding {
	if env.AuditLog == "" {
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: no audit log given (--audit-log)"}}
	}
	rep, err := audit.VerifyChain(env.AuditLog)
	if err != nil {
		f := Finding{NotChecked: true, Severity: Warn, Subject: env.AuditLog, Summary: "the audit log " + env.AuditLog + " not checked: it could not be read",
			Evidence: []string{err.Error()}}
		if errors.Is(err, os.ErrPermission) {
			f.Severity, f.Next = Info, "it is root's alone: run sitecon doctor as root to check it"
		}
		return []Finding{f}
	}
	if _, err := os.Stat(env.AuditLog); errors.Is(err, os.ErrNotExist) {
		return []Finding{{Severity: OK, Subject: env.AuditLog, Summary: "no action recorded on this machine yet (" + env.AuditLog + ")"}}
	}
	if len(rep.Breaks) > 0 {
		evidence := rep.Breaks
		if len(evidence) > 5 {
			evidence = append(evidence[:5:5], fmt.Sprintf("and %d more", len(rep.Breaks)-5))
		}
		return []Finding{{Severity: Error, Subject: env.AuditLog,
			Summary:  fmt.Sprintf("the audit log was changed after it was written: %d break(s) in its chain of %d records", len(rep.Breaks), rep.Lines),
			Evidence: evidence}}
	}
	summary := fmt.Sprintf("the audit log is whole: %d records, one chain", rep.Lines)
	var evidence []string
	if rep.Unchained > 0 {
		summary = fmt.Sprintf("the audit log is whole from its record %d on: %d records, one chain", rep.Unchained+1, rep.Lines-rep.Unchained)
		evidence = []string{fmt.Sprintf("its first %d records predate the chain: they cannot be checked", rep.Unchained)}
	}
	return []Finding{{Severity: OK, Subject: env.AuditLog, Summary: strings.TrimSpace(summary), Evidence: evidence}}
}
