package statusserver

import (
	"io"
	"net/http"
)

// Membership says whether this node is a control-plane + etcd member right
// now, as the live Node object says. It returns false whenever that cannot be
// known (API server down).
type Membership func() bool

// Handler answers GET /status with "cluster:<uuid>" while this node is
// a control-plane + etcd member, and an empty body otherwise: a joiner then
// knows this node can take it in.
func Handler(clusterID string, member Membership) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		if member() {
			_, _ = io.WriteString(w, "cluster:"+clusterID)
		}
	})
	return mux
}
