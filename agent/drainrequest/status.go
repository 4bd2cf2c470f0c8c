// Package drainrequest is the drain an on-device service asks the agent
// for (a base OS update, a reboot, a shutdown), as EVE's zedkube serves
// it: the request (requester and reason) arrives on the agent's local API
// (or from `sitecon agent drain-request`), the agent runs the preflight
// `sitecon drain` runs, cordons, evicts through the drain flow
// (kube/flow), and publishes where it stands in EVE's states; the
// requester polls or waits on it. A preflight that refuses (the last
// healthy replica of a volume, etcd's quorum lost or unknown) holds the
// request: it is retried, and the status says why. What the agent
// cordoned it uncordons once the node is back from its boot: Ready with a
// new boot ID (flow.NodeReturn). NotReady then Ready with the same boot
// ID is a blip, said, not the boot; only with no boot ID known does it
// count, as weaker evidence. A node cordoned by hand stays cordoned.
package drainrequest

import (
	"errors"
	"time"
)

// State is where a drain request stands: EVE's DrainStatus
// (pkg/pillar/kubeapi/kubetypes.go), in words.
type State string

// The states, in the order a request goes through them.
const (
	NotRequested State = "not requested"
	Requested    State = "requested"
	Starting     State = "starting"
	Cordoned     State = "cordoned"
	FailedCordon State = "failed cordon"
	Retrying     State = "drain retrying"
	FailedDrain  State = "failed drain"
	Complete     State = "complete"
)

// Final reports whether the request has run its course: the requester
// stops waiting.
func (s State) Final() bool { return s == Complete || s == FailedDrain || s == FailedCordon }

// Request is what an on-device service asks for.
type Request struct {
	// Requester names the service ("baseosmgr", "a technician").
	Requester string `json:"requester"`
	Reason    string `json:"reason,omitempty"`
}

// Check refuses a request without a requester, or with fields too long
// to publish.
func (r Request) Check() error {
	switch {
	case r.Requester == "":
		return errors.New("a drain request names its requester")
	case len(r.Requester) > 128 || len(r.Reason) > 1024:
		return errors.New("a drain request's requester (128) or reason (1024 bytes) is too long")
	}
	return nil
}

// Cancel calls a request off: by its requester, or by another caller
// that forces it (a technician clearing a request its service abandoned).
type Cancel struct {
	Requester string `json:"requester"`
	Force     bool   `json:"force,omitempty"`
}

// Status is what the agent publishes of the drain request (on its local
// API, /v1/drain, and in its state, /v1/agent).
type Status struct {
	State       State     `json:"state"`
	Requester   string    `json:"requester,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	RequestedAt time.Time `json:"requestedAt,omitzero"`
	// Since is when State began.
	Since time.Time `json:"since,omitzero"`
	// Attempt counts the tries, of Attempts in all.
	Attempt  int `json:"attempt,omitempty"`
	Attempts int `json:"attempts,omitempty"`
	// NextAttempt is when a held request is tried again.
	NextAttempt time.Time `json:"nextAttempt,omitzero"`
	// Why says why the request is held or failed: the preflight's
	// refusals and what it did not count.
	Why []string `json:"why,omitempty"`
	// Did says what the agent did, one line a step.
	Did []string `json:"did,omitempty"`
	// CordonedByAgent: the agent cordoned the node for this request and
	// uncordons it once the node is back; false for a node found cordoned
	// (by hand), which stays so.
	CordonedByAgent bool `json:"cordonedByAgent,omitempty"`
	// CancelledBy: the requester called the request off; the agent is
	// taking back its cordon and forgetting it.
	CancelledBy string `json:"cancelledBy,omitempty"`
}
