package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The local API: the agent's state, timeline and apps on its unix socket
// (mode 0600), and the client the console and `sitecon status` use.

// serveLocalAPI serves the agent's state on its unix socket, mode 0600.
func (a *Agent) serveLocalAPI() (*http.Server, error) {
	path := a.opts.SocketPath
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	// A socket left by a previous run would make Listen fail.
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	// serve answers GET path with what get returns, as JSON.
	serve := func(path string, get func() any) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(get())
		})
	}
	serve("/v1/agent", func() any { return a.State() })
	serve("/v1/leader", func() any { return a.LeaderState() })
	// The apps part's endpoints answer empty lists until it runs, so a
	// reader never has to tell "none" from "not yet" by an error.
	serve("/v1/apps", func() any { return orEmpty(a.Apps(), (*AppsAgent).Apps) })
	serve("/v1/volumes", func() any { return orEmpty(a.Apps(), (*AppsAgent).Volumes) })
	serve("/v1/events", func() any { return orEmpty(a.Apps(), (*AppsAgent).Timeline) })
	serve("/v1/node", func() any {
		if apps := a.Apps(); apps != nil {
			return apps.Node()
		}
		return NodeState{Node: a.State().Node, Status: NodeDown, Reason: "not connected to the cluster yet"}
	})
	srv := NewStatusServer(mux)
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

// orEmpty is list(apps), or an empty list (JSON [], not null) while the
// apps part does not run.
func orEmpty[T any](apps *AppsAgent, list func(*AppsAgent) []T) []T {
	if apps == nil {
		return []T{}
	}
	if out := list(apps); out != nil {
		return out
	}
	return []T{}
}

// ReadState asks a running agent for its state over its socket.
func ReadState(ctx context.Context, socketPath string) (State, error) {
	var st State
	return st, readLocal(ctx, socketPath, "/v1/agent", &st)
}

// ReadTimeline asks a running agent for its timeline, newest first.
func ReadTimeline(ctx context.Context, socketPath string) ([]TimelineEvent, error) {
	var events []TimelineEvent
	return events, readLocal(ctx, socketPath, "/v1/events", &events)
}

// ReadApps asks a running agent for its app states.
func ReadApps(ctx context.Context, socketPath string) ([]AppState, error) {
	var apps []AppState
	return apps, readLocal(ctx, socketPath, "/v1/apps", &apps)
}

// localClients holds one HTTP client per agent socket: a transport per
// call would leave its idle connections behind (sitecon status --watch
// reads every second).
var localClients sync.Map // socket path → *http.Client

func localClient(socketPath string) *http.Client {
	if c, ok := localClients.Load(socketPath); ok {
		return c.(*http.Client)
	}
	c, _ := localClients.LoadOrStore(socketPath, &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socketPath)
		},
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     30 * time.Second,
	}})
	return c.(*http.Client)
}

func readLocal(ctx context.Context, socketPath, path string, into any) error {
	client := localClient(socketPath)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+path, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("agent answered %s for %s", resp.Status, path)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("agent %s: %w", path, err)
	}
	return nil
}
