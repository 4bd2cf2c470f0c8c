package statusserver

import (
	"net/http"

	"github.com/sitecon/sitecon/agent/config"
)

// The agent's part of the proof of life (config.LifeKey): it answers the
// failover guard's challenges on its cluster address, beside /status, and
// gives its own guard the key to check the other nodes' answers with.

// WithLifeProof serves the proof of life at config.LifeProofPath beside the
// /status server's own routes, which answer as before (joiners and older
// agents read GET /status), with life's fence state signed in it.
func WithLifeProof(status http.Handler, key config.LifeKey, node string, life *config.LifeStatus) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(config.LifeProofPath, config.LifeProofHandler(key, node, life))
	mux.Handle("/", status)
	return mux
}
