package localapi

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type answer struct {
	Node  string `json:"node"`
	Count int    `json:"count"`
}

func TestServeAnswersEachRouteRootOnly(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "run", "agent.sock")
	// A socket left by a killed agent must not keep the next one out.
	if err := os.MkdirAll(filepath.Dir(socket), 0o700); err != nil {
		t.Fatal(err)
	}
	stale, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	count := 0
	srv, err := Serve(socket, map[string]func() any{
		PathAgent: func() any { count++; return answer{Node: "node-a", Count: count} },
		PathApps:  func() any { return []answer{} },
	})
	if err != nil {
		t.Fatalf("serve over a stale socket: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	st, err := os.Stat(socket)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600: the agent's state is root's", st.Mode().Perm())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for want := 1; want <= 2; want++ {
		got, err := Get[answer](ctx, socket, PathAgent)
		if err != nil {
			t.Fatal(err)
		}
		if got != (answer{Node: "node-a", Count: want}) {
			t.Errorf("read %d: %+v, want node-a with count %d (each read asks afresh)", want, got, want)
		}
	}
	apps, err := Get[[]answer](ctx, socket, PathApps)
	if err != nil || apps == nil || len(apps) != 0 {
		t.Errorf("an empty list reads as %#v, %v; want an empty, non-nil list", apps, err)
	}
	if _, err := Get[answer](ctx, socket, PathVolumes); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a path the agent does not serve: %v, want a 404 error", err)
	}
	if _, err := Get[int](ctx, socket, PathAgent); err == nil || !strings.Contains(err.Error(), PathAgent) {
		t.Errorf("an answer of another shape: %v, want a decode error naming %s", err, PathAgent)
	}
	resp, err := client(socket).Post("http://agent"+PathAgent, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST answered %s: the local API only reads", resp.Status)
	}
}

func TestGetWithoutAnAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Get[answer](ctx, filepath.Join(t.TempDir(), "none.sock"), PathAgent)
	if err == nil {
		t.Fatal("reading a socket nobody serves succeeded")
	}
}

func TestServeWithPostsAndAnswersTheirStatus(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent.sock")
	var got []string
	srv, err := ServeWith(socket, map[string]func() any{PathDrain: func() any { return answer{Node: "get"} }},
		map[string]Post{PathDrain: func(body []byte) (int, any) {
			got = append(got, string(body))
			if strings.Contains(string(body), "busy") {
				return http.StatusConflict, answer{Node: "the other one"}
			}
			return http.StatusOK, answer{Node: "taken", Count: len(body)}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := PostJSON[answer](ctx, socket, PathDrain, map[string]string{"requester": "x"})
	if err != nil || a.Node != "taken" || len(got) != 1 || got[0] != `{"requester":"x"}` {
		t.Fatalf("post: %+v, %v; the route read %q", a, err, got)
	}
	a, err = PostJSON[answer](ctx, socket, PathDrain, map[string]string{"requester": "busy"})
	if err == nil || !strings.Contains(err.Error(), "409") || a.Node != "the other one" {
		t.Fatalf("a refusal: %+v, %v; want the 409 and its answer decoded", a, err)
	}
	if g, err := Get[answer](ctx, socket, PathDrain); err != nil || g.Node != "get" {
		t.Fatalf("GET beside POST: %+v, %v", g, err)
	}
	// A body past MaxBody never reaches the route.
	n := len(got)
	if _, err := PostJSON[answer](ctx, socket, PathDrain, strings.Repeat("x", MaxBody+1)); err == nil || !strings.Contains(err.Error(), "413") {
		t.Fatalf("an oversized body: %v, want 413", err)
	}
	if len(got) != n {
		t.Fatal("an oversized body reached the route")
	}
}
