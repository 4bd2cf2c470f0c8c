// Package localapi is the agent's local API: the server that answers on
// the agent's unix socket (mode 0600) and the client the console and
// `sitecon status` read it with, plus the HTTP plumbing every agent
// endpoint shares (the socket, /status on the cluster address, /metrics).
//
// It knows no agent types: each endpoint is a path and a function whose
// answer is sent as JSON, and a reader names the type it expects, so the
// types stay with the part of the agent that owns them.
package localapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The endpoints a running agent answers.
const (
	PathAgent   = "/v1/agent"   // bootstrap: agent.State
	PathLeader  = "/v1/leader"  // the stats-leader election: apps.LeaderState
	PathApps    = "/v1/apps"    // []apps.PublishedApp
	PathVolumes = "/v1/volumes" // []apps.VolumeState
	PathEvents  = "/v1/events"  // the timeline, newest first: []apps.TimelineEvent
	PathNode    = "/v1/node"    // apps.PublishedNode
	// PathDrain: GET is the drain request's status, POST a drain request
	// (drainrequest.Status, drainrequest.Request).
	PathDrain = "/v1/drain"
	// PathDrainCancel: POST calls the drain request off
	// (drainrequest.Request naming who asks; drainrequest.Status).
	PathDrainCancel = "/v1/drain/cancel"
	// PathVNCSession: POST issues a one-time password for a VM console
	// this node serves (vncbridge.SessionRequest, vncbridge.Session).
	PathVNCSession = "/v1/vnc/session"
)

// Post answers a POST with the request's body (at most MaxBody bytes):
// the HTTP status and the answer, sent as JSON.
type Post func(body []byte) (status int, answer any)

// MaxBody bounds a POST's body: the local API takes small requests only.
const MaxBody = 8 << 10

// Serve answers GET on each route's path with what its function returns,
// as JSON, on a unix socket at socketPath readable by root only. A socket
// left by a previous run is replaced.
func Serve(socketPath string, routes map[string]func() any) (*http.Server, error) {
	return ServeWith(socketPath, routes, nil)
}

// ServeWith is Serve, and POST on each of posts' paths. Who may post is
// who may open the socket: root (mode 0600), the on-device services.
func ServeWith(socketPath string, routes map[string]func() any, posts map[string]Post) (*http.Server, error) {
	if err := os.MkdirAll(filepath.Dir(socketPath), 0o700); err != nil {
		return nil, err
	}
	// A socket left by a previous run would make Listen fail.
	if st, err := os.Lstat(socketPath); err == nil && st.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(socketPath)
	}
	l, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	if err := os.Chmod(socketPath, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	for path, get := range routes {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(get())
		})
	}
	for path, post := range posts {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
			if err != nil {
				http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
				return
			}
			status, answer := post(body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(answer)
		})
	}
	srv := NewServer(mux)
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

// NewServer serves the handler with timeouts that keep a slow or hostile
// client from holding connections; a request's body is read only by a
// POST route, bounded (MaxBody).
func NewServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    8 << 10,
	}
}

// Get asks the agent at socketPath for one endpoint, decoded as T.
func Get[T any](ctx context.Context, socketPath, path string) (T, error) {
	var out T
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+path, nil)
	if err != nil {
		return out, err
	}
	resp, err := client(socketPath).Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("agent answered %s for %s", resp.Status, path)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("agent %s: %w", path, err)
	}
	return out, nil
}

// PostJSON sends body as JSON to path and decodes the answer as T. An
// answer other than 200 is an error, with the answer decoded when it has
// T's shape (a drain request refused as busy still says where the other
// one stands).
func PostJSON[T any](ctx context.Context, socketPath, path string, body any) (T, error) {
	var out T
	data, err := json.Marshal(body)
	if err != nil {
		return out, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://agent"+path, bytes.NewReader(data))
	if err != nil {
		return out, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client(socketPath).Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return out, err
	}
	derr := json.Unmarshal(raw, &out)
	if resp.StatusCode != http.StatusOK {
		var refusal struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(raw, &refusal)
		return out, fmt.Errorf("agent answered %s for %s: %s", resp.Status, path, cmp.Or(refusal.Error, strings.TrimSpace(string(raw))))
	}
	if derr != nil {
		return out, fmt.Errorf("agent %s: %w", path, derr)
	}
	return out, nil
}

// clients holds one HTTP client per agent socket: a transport per call
// would leave its idle connections behind (sitecon status --watch reads
// every second).
var clients sync.Map // socket path → *http.Client

func client(socketPath string) *http.Client {
	if c, ok := clients.Load(socketPath); ok {
		return c.(*http.Client)
	}
	c, _ := clients.LoadOrStore(socketPath, &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socketPath)
		},
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     30 * time.Second,
	}})
	return c.(*http.Client)
}

// URLErrorCause is what an HTTP client call's error says without the
// *url.Error wrapping ("Get http://…: "), for messages that name the
// address themselves.
func URLErrorCause(err error) error {
	var u interface{ Unwrap() error }
	if errors.As(err, &u) {
		if inner := u.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}
