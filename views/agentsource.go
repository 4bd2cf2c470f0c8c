package views

import (
	"context"

	"github.com/sitecon/sitecon/audit"
)

// AgentSource reads this node's agent for the console and `status
// --watch`; it says in the summary why when it cannot. The command line
// supplies it (the agent's local API): views knows no agent package.
type AgentSource func(ctx context.Context) *AgentSummary

// AuditEvents are the latest actions recorded on this device, for the
// events screen, from a tail of the log: each poll reads only what was
// appended since the last.
func AuditEvents(tail *audit.Tail) []AgentEvent {
	recs, _ := tail.Latest()
	var out []AgentEvent
	for _, r := range recs {
		msg := r.Outcome + " by " + r.User
		if r.Error != "" {
			msg += ": " + r.Error
		}
		out = append(out, AgentEvent{Source: "audit", Time: r.Time, Kind: r.Action, Subject: r.Target, Message: msg,
			Warning: r.Outcome == audit.OutcomeRefused || r.Outcome == audit.OutcomeFailed})
	}
	return out
}
