package statusserver

import (
	"net/http"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/k3s"
)

// WithCAProof serves this node's vouching for its cluster's CA (the one
// its k3s keeps under paths) at config.CAProofPath beside next's routes.
func WithCAProof(next http.Handler, key config.LifeKey, node string, paths k3s.Paths) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(config.CAProofPath, config.CAProofHandler(key, node, func() ([]byte, error) { return formation.ClusterCA(paths) }))
	mux.Handle("/", next)
	return mux
}
