package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// QuietProbeAfter is how long a snapshot's watches may deliver nothing
// before it asks the API server whether it is ready. An API server whose
// etcd lost quorum keeps its watches open and silent and answers no LIST:
// without asking, the snapshot would look live forever. A live cluster is
// never quiet that long (kube-vip and the stats leader renew their Leases
// every few seconds), so in steady state nothing is asked.
const QuietProbeAfter = 15 * time.Second

// probeWhenQuiet asks the API server's /readyz whenever the watches have
// been silent for quietProbe, until ctx ends; a failed answer makes the
// snapshot stale with the checks that failed ("etcd failed").
func (s *Snapshot) probeWhenQuiet(ctx context.Context) {
	timer := time.NewTimer(s.quietProbe)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		s.mu.Lock()
		quiet, notReady := s.now().Sub(s.lastEvent), s.notReady
		s.mu.Unlock()
		if quiet < s.quietProbe && !notReady {
			timer.Reset(s.quietProbe - quiet)
			continue
		}
		err := s.probeReady(ctx)
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		wasNotReady := s.notReady
		s.notReady = err != nil
		s.mu.Unlock()
		next := s.quietProbe
		switch {
		case err != nil:
			s.markError(err)
			// Not ready: asked again sooner, and nothing but a passing
			// /readyz brings the snapshot back (markConnected holds).
			next = max(s.quietProbe/3, time.Second)
		case wasNotReady:
			s.markConnected()
		}
		timer.Reset(next)
	}
}

// probeReady asks /readyz; its error names the failed checks.
func (s *Snapshot) probeReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, probeKey{}, true), 10*time.Second)
	defer cancel()
	body, err := s.clients.Core.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err == nil {
		return nil
	}
	var failed []string
	for _, line := range strings.Split(string(body), "\n") {
		if check, ok := strings.CutPrefix(line, "[-]"); ok {
			failed = append(failed, check)
		}
	}
	if len(failed) == 0 {
		var status apierrors.APIStatus
		if errors.As(err, &status) {
			// The checks come back inside the status message.
			for _, line := range strings.Split(status.Status().Message, "\n") {
				if _, check, ok := strings.Cut(line, "[-]"); ok {
					failed = append(failed, check)
				}
			}
		}
	}
	if len(failed) == 0 {
		return unreachable(s.clients.Config.Host, err)
	}
	msg := fmt.Sprintf("the API server at %s answers but is not ready: %s", s.clients.Config.Host, strings.Join(failed, "; "))
	for _, check := range failed {
		if strings.HasPrefix(check, "etcd ") {
			msg += " (its etcd has no quorum or does not answer: are more than half the servers down?)"
			break
		}
	}
	return notReadyError(msg)
}

// notReadyError is an API server's answer that it is not ready, with the
// checks that failed: it answers, so the reason is its own, not the
// network's.
type notReadyError string

func (e notReadyError) Error() string { return string(e) }

// probeKey marks the probe's own request: its outcome is judged by
// probeWhenQuiet, which can say which checks failed.
type probeKey struct{}

// sawEvent records a watch event: the API server serves, whatever a
// failed probe said before.
func (s *Snapshot) sawEvent() {
	s.mu.Lock()
	s.lastEvent = s.now()
	if s.health.Connected {
		s.health.LastContact = s.lastEvent
	}
	stale := !s.health.Connected && s.synced
	s.mu.Unlock()
	if stale {
		s.markConnected()
	}
}
