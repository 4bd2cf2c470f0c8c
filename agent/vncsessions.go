package agent

import (
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
	bridges := a.vnc
	a.mu.Unlock()
	if bridges == nil {
		return http.StatusServiceUnavailable, map[string]string{"error": "this node is not in its cluster yet: it serves no console"}
	}
	s, err := bridges.Session(req.Console)
	if err != nil {
		return http.StatusNotFound, map[string]string{"error": err.Error()}
	}
	return http.StatusOK, s
}
