package agent

import (
	"cmp"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/sitecon/sitecon/agent/drainrequest"
	"github.com/sitecon/sitecon/audit"
	"github.com/sitecon/sitecon/kube/flow"
)

// newDrainRunner is the runner of the drains this node's services
// request: its record in the agent's state directory, its attempts in the
// audit log.
func newDrainRunner(opts Options) *drainrequest.Runner {
	ropts := drainrequest.Options{
		Node: opts.NodeName, StateDir: cmp.Or(opts.StateDir, opts.Apps.StateDir),
		Attempts: opts.DrainAttempts, RetryInterval: opts.DrainRetryInterval,
		Drain: flow.DefaultDrainOptions(), Log: opts.Log.With("component", "drain-request"),
		Audit: func() (flow.Recorder, error) {
			log, err := audit.Open(opts.AuditLog)
			if err != nil {
				return flow.Recorder{}, err
			}
			return flow.Recorder{Log: log, Via: "agent"}, nil
		},
	}
	return drainrequest.New(ropts)
}

// postDrain takes a drain request from the local API.
func (a *Agent) postDrain(body []byte) (int, any) {
	var req drainrequest.Request
	if err := json.Unmarshal(body, &req); err != nil {
		return http.StatusBadRequest, map[string]string{"error": "a drain request is JSON {\"requester\":…,\"reason\":…}: " + err.Error()}
	}
	st, err := a.drains.Request(req)
	switch {
	case errors.Is(err, drainrequest.ErrBusy):
		return http.StatusConflict, st
	case err != nil:
		return http.StatusBadRequest, map[string]string{"error": err.Error()}
	}
	return http.StatusOK, st
}

// postDrainCancel calls the drain request off, from the local API.
func (a *Agent) postDrainCancel(body []byte) (int, any) {
	var req drainrequest.Cancel
	if err := json.Unmarshal(body, &req); err != nil {
		return http.StatusBadRequest, map[string]string{"error": "a cancel is JSON {\"requester\":…,\"force\":false}: " + err.Error()}
	}
	st, err := a.drains.Cancel(req)
	switch {
	case errors.Is(err, drainrequest.ErrNothingToCancel):
		return http.StatusNotFound, st
	case errors.Is(err, drainrequest.ErrNotTheRequester):
		return http.StatusForbidden, map[string]string{"error": err.Error()}
	case err != nil:
		return http.StatusBadRequest, map[string]string{"error": err.Error()}
	}
	return http.StatusOK, st
}
