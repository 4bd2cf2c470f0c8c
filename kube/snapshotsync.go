package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// waitBasics marks the basics read (BasicsData) once the informers of
// nodes, leases and config maps have synced, and wakes the readers: on a
// large site they are read in a tenth of a second, while the pods and
// the Longhorn objects take seconds.
func (s *Snapshot) waitBasics(ctx context.Context) {
	if !cache.WaitFor(ctx, "", s.core.Core().V1().Nodes().Informer().HasSyncedChecker(),
		s.leases.Coordination().V1().Leases().Informer().HasSyncedChecker(), s.appConfig.Core().V1().ConfigMaps().Informer().HasSyncedChecker()) {
		return
	}
	s.mu.Lock()
	s.basicsSynced = true
	s.mu.Unlock()
	s.notify()
}

// BasicsRead reports whether the nodes, the leases and the cluster's
// config maps have been read (BasicsData gives them until Synced, then
// Data), without reading them.
func (s *Snapshot) BasicsRead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.basicsSynced
}

// BasicsData reads the nodes, the leases and the cluster's config maps
// while the rest of the cluster is still being read: what the console's
// overview shows first (the nodes' readiness, the VIP, the seed, the
// stats leader). False until those are read, and once the snapshot has
// synced (read Data then). Nothing else is in it: no reader may take its
// empty pod, volume or VMI lists for the cluster's.
func (s *Snapshot) BasicsData() (Data, bool) {
	s.mu.Lock()
	d := Data{HasLonghorn: s.hasLonghorn, HasKubeVirt: s.hasKubeVirt, ServerVersion: s.serverVersion, Health: s.health}
	ok := s.basicsSynced && !s.synced
	s.mu.Unlock()
	if !ok {
		return Data{}, false
	}
	s.listBasics(&d)
	return d, true
}

// listBasics reads the nodes, the leases and the cluster's config maps
// into d, for Data and BasicsData alike.
func (s *Snapshot) listBasics(d *Data) {
	all := labels.Everything()
	d.Nodes, _ = s.core.Core().V1().Nodes().Lister().List(all)
	d.Leases, _ = s.leases.Coordination().V1().Leases().Lister().List(all)
	d.ConfigMaps, _ = s.appConfig.Core().V1().ConfigMaps().Lister().List(all)
}

// WaitForSync blocks until every informer has synced once or ctx ends. On
// failure the error says why the API server could not be read.
func (s *Snapshot) WaitForSync(ctx context.Context) error {
	select {
	case <-s.syncedCh:
		return nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			// An API server whose etcd has no quorum answers discovery
			// but no list, or a list with a bare 500: its /readyz says
			// why, and is asked once more, briefly, to say it.
			probe, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			defer cancel()
			// The health's last error is read before the probe, whose
			// answer clears it.
			lastError := s.Health().LastError
			var notReady notReadyError
			err := s.probeReady(probe)
			if errors.As(err, &notReady) {
				return err
			}
			if err == nil {
				unread, failed := s.unreadKinds()
				if len(failed) > 0 {
					// A list that fails (refused, or a kind the server
					// does not serve) does not come with more time.
					kind := slices.Sorted(maps.Keys(failed))[0]
					return fmt.Errorf("the API server at %s is ready, but reading its %s failed: %s", s.clients.Config.Host, kind, failed[kind])
				}
				s.mu.Lock()
				discovered := s.kinds != nil
				s.mu.Unlock()
				if discovered || lastError == "" {
					// Ready, and no list of a kind still unread failed:
					// a large cluster on a busy machine, not an API
					// server that does not answer.
					return StillReadingError{Host: s.clients.Config.Host, Kinds: unread}
				}
				// Discovery itself failed (s.run retries it): its error.
			}
			if lastError != "" {
				return errors.New(lastError)
			}
		}
		h := s.Health()
		if h.LastError != "" {
			return errors.New(h.LastError)
		}
		return fmt.Errorf("no answer from the API server at %s in time: %w", s.clients.Config.Host, ctx.Err())
	}
}

// StillReadingError is WaitForSync's error when its time ran out while
// the API server answered and was ready, and no list had failed: the
// cluster was still being read. A large cluster on a busy machine, not
// an API server that is down; a longer wait would read it.
type StillReadingError struct {
	Host string
	// Kinds are those still being read ("pods", "Longhorn replicas").
	Kinds []string
}

func (e StillReadingError) Error() string {
	if len(e.Kinds) == 0 {
		return fmt.Sprintf("the API server at %s answers and is ready, but the cluster was still being read", e.Host)
	}
	return fmt.Sprintf("the API server at %s answers and is ready, but %s were still being read", e.Host, strings.Join(e.Kinds, ", "))
}

// Synced reports whether the initial sync has completed.
func (s *Snapshot) Synced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}
