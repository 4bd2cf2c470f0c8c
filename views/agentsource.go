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
	return auditEvents(recs)
}

// auditEvents are records as the events screen shows them, oldest first,
// one line per action: an outcome takes the place of its intent (the same
// ID), so a cordon is one line, not two; an intent alone (under way, or
// cut off) stays.
func auditEvents(recs []audit.Record) []AgentEvent {
	var out []AgentEvent
	intent := map[string]int{} // an intent's ID, its index in out
	for _, r := range recs {
		at := -1
		if i, ok := intent[r.ID]; ok && r.ID != "" && r.Outcome != audit.OutcomeIntent {
			at = i
			delete(intent, r.ID)
		}
		msg := r.Outcome + " by " + r.User
		if r.Error != "" {
			msg += ": " + r.Error
		}
		e := AgentEvent{Source: "audit", Time: r.Time, Kind: r.Action, Subject: r.Target, Message: msg,
			Warning: r.Outcome == audit.OutcomeRefused || r.Outcome == audit.OutcomeFailed, UnderWay: r.Outcome == audit.OutcomeIntent}
		if at >= 0 {
			out[at] = e
			continue
		}
		if r.Outcome == audit.OutcomeIntent && r.ID != "" {
			intent[r.ID] = len(out)
		}
		out = append(out, e)
	}
	return out
}
