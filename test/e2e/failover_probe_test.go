package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sitecon/sitecon/agent/apps"
)

// statusStandIns play the nodes' /status on the cluster network for the
// in-process agents: sitebox's node addresses are not on this host, so the
// probe (apps.ProbeStatus, the real HTTP GET) is pointed at a local
// address per node. A node that answers is a real HTTP server here, as a
// partitioned node's agent would be; every other node is probed at a port
// that refuses, as a powered-off node's would.
type statusStandIns struct {
	mu      sync.Mutex
	addrs   map[string]string
	refused string
}

var siteStatus = &statusStandIns{addrs: map[string]string{}}

// probe is the agents' NodeProbe.
func (s *statusStandIns) probe(ctx context.Context, node *corev1.Node) apps.NodeLife {
	s.mu.Lock()
	addr, ok := s.addrs[node.Name]
	if !ok {
		if s.refused == "" {
			// A port just listened on and closed refuses connections.
			if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
				s.refused = l.Addr().String()
				l.Close()
			}
		}
		addr = s.refused
	}
	s.mu.Unlock()
	return apps.ProbeStatus(ctx, addr)
}

// answer makes node answer on /status until the returned stop is called
// (or the test ends).
func (s *statusStandIns) answer(t *testing.T, node string) (stop func()) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("cluster:partitioned\n"))
	}))
	s.mu.Lock()
	s.addrs[node] = srv.Listener.Addr().String()
	s.mu.Unlock()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.addrs, node)
			s.mu.Unlock()
			srv.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitAnyTimeline waits until one of the agents' timelines holds a matching
// event (the stats leader may move between them) and returns it.
func waitAnyTimeline(t *testing.T, agents []*siteAgent, within time.Duration, what string, match func(apps.TimelineEvent) bool) apps.TimelineEvent {
	t.Helper()
	return until(t, within, what, func() (apps.TimelineEvent, bool) {
		for _, a := range agents {
			// A restarted agent has no apps part until it reaches the cluster.
			if appsPart := a.agent.Apps(); appsPart != nil {
				for _, e := range appsPart.Timeline() {
					if match(e) {
						return e, true
					}
				}
			}
		}
		return apps.TimelineEvent{}, false
	}, func(apps.TimelineEvent) string {
		var b strings.Builder
		b.WriteString("timelines:")
		for _, a := range agents {
			if appsPart := a.agent.Apps(); appsPart != nil {
				for _, e := range appsPart.Timeline() {
					fmt.Fprintf(&b, "\n  %s: %s %s %s %s", a.node, e.Time.Format(time.TimeOnly), e.Kind, e.App, e.Message)
				}
			}
		}
		return b.String()
	})
}
