package kube

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Health says whether the snapshot is live: whether the last request to the
// API server succeeded, since when, and the error that made it stale.
type Health struct {
	Connected bool      `json:"connected"`
	Since     time.Time `json:"since"`
	LastError string    `json:"lastError,omitempty"`
	// LastContact is the last time the API server was seen serving (an
	// answer while it was ready, a watch event): what the snapshot holds
	// is the cluster as of then once it stops.
	LastContact time.Time `json:"lastContact,omitzero"`
}

// Health reports whether the API server answered the last request.
func (s *Snapshot) Health() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}

func (s *Snapshot) markError(err error) {
	s.mu.Lock()
	changed := s.health.Connected || s.health.LastError != err.Error()
	if s.health.Connected || s.health.Since.IsZero() {
		s.health.Since = s.now()
	}
	s.health.Connected = false
	s.health.LastError = err.Error()
	s.mu.Unlock()
	if changed {
		s.log.Warn("API server unreachable", "err", err)
		s.notify()
	}
}

func (s *Snapshot) markConnected() {
	s.mu.Lock()
	if s.notReady {
		s.mu.Unlock()
		return
	}
	now := s.now()
	s.health.LastContact = now
	if s.health.Connected {
		s.mu.Unlock()
		return
	}
	s.health = Health{Connected: true, Since: now, LastContact: now}
	s.mu.Unlock()
	s.log.Info("API server reachable")
	s.notify()
}

// healthTransport records every round trip's outcome in the snapshot's health.
type healthTransport struct {
	next http.RoundTripper
	s    *Snapshot
}

func (t *healthTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	probe, _ := req.Context().Value(probeKey{}).(bool)
	switch {
	case probe && (err != nil || resp.StatusCode >= 500):
	case err != nil:
		if req.Context().Err() == nil { // a caller giving up is not the server's fault
			t.s.markError(unreachable(req.URL.Scheme+"://"+req.URL.Host, err))
		}
	case resp.StatusCode >= 500:
		t.s.markError(fmt.Errorf("API server %s answered %s", req.URL.Host, resp.Status))
	default:
		t.s.markConnected()
	}
	return resp, err
}

func (t *healthTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

// unreachable says which API server could not be reached and why, without the
// request URL noise of a *url.Error.
func unreachable(host string, err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return fmt.Errorf("cannot reach the API server at %s: %w", host, err)
}

// APIDownHint is what a technician checks when the API server did not
// answer for reason; "" when the reason says it already (a /readyz that
// names etcd asks about the servers' quorum itself).
func APIDownHint(reason string) string {
	if strings.Contains(reason, "quorum") {
		return ""
	}
	return "is k3s running on a server node? are more than half the servers down (etcd quorum)?"
}
