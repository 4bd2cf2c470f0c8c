package statusserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/agent/localapi"
)

func TestStatusHandler(t *testing.T) {
	member := false
	h := Handler("7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60", func() bool { return member })
	get := func(method string) (*http.Response, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, "/status", strings.NewReader("ignored body")))
		return rec.Result(), rec.Body.String()
	}
	if resp, body := get(http.MethodGet); resp.StatusCode != 200 || body != "" {
		t.Errorf("not a member: %d %q, want 200 and an empty body", resp.StatusCode, body)
	}
	member = true
	if resp, body := get(http.MethodGet); resp.StatusCode != 200 || body != "cluster:7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60" {
		t.Errorf("member: %d %q", resp.StatusCode, body)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		if resp, _ := get(m); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" {
			t.Errorf("%s: %d, want 405 with Allow: GET", m, resp.StatusCode)
		}
	}
	srv := localapi.NewServer(h)
	if srv.ReadHeaderTimeout == 0 || srv.IdleTimeout == 0 {
		t.Error("the status server needs read-header and idle timeouts")
	}
}
