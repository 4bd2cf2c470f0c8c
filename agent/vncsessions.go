package agent

import (
	"cmp"
	"encoding/json"
	"net/http"

	"github.com/sitecon/sitecon/agent/vncbridge"
)

// postVNCSession issues a one-time password for one of this node's VM
// consoles, from the local API: who may open the agent's socket (root)
// may see the VM.
func (a *Agent) postVNCSession(body []byte) (int, any) {
	var req vncbridge.SessionRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Console == "" {
		return http.StatusBadRequest, map[string]string{"error": `a console session request is JSON {"console": PORT, APP or VMI}`}
	}
	a.mu.Lock()
	bridges, whyNot := a.vnc, cmp.Or(a.vncWhyNot, errNoConsolesYet)
	a.mu.Unlock()
	if bridges == nil {
		return http.StatusServiceUnavailable, map[string]string{"error": whyNot.Error()}
	}
	s, err := bridges.Session(req.Console)
	if err != nil {
		return http.StatusNotFound, map[string]string{"error": err.Error()}
	}
	return http.StatusOK, s
}
