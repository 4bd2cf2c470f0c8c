package kube_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// requestLog records each request a client makes as "LIST path" (any GET
// that is not a watch), "WATCH path", "STREAM path" (a watch that asks
// for the initial state as events: client-go's streaming list) or
// "METHOD path" for a write.
type requestLog struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (l *requestLog) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	kind := "LIST"
	switch {
	case req.Method != http.MethodGet:
		kind = req.Method
	case q.Get("watch") == "true" && q.Get("sendInitialEvents") == "true":
		kind = "STREAM"
	case q.Get("watch") == "true":
		kind = "WATCH"
	}
	l.mu.Lock()
	l.seen = append(l.seen, kind+" "+req.URL.Path)
	l.mu.Unlock()
	return l.next.RoundTrip(req)
}

func (l *requestLog) requests() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

// snapshot is what the log holds as reads (every request that is not a
// watch: LISTs, single-object GETs, and any write, which a snapshot never
// makes) and as the number of watches, streamed or not.
func (l *requestLog) snapshot() (reads []string, watches int) {
	for _, r := range l.requests() {
		if strings.HasPrefix(r, "WATCH ") || strings.HasPrefix(r, "STREAM ") {
			watches++
		} else {
			reads = append(reads, r)
		}
	}
	return reads, watches
}

// The kinds the API server sends as JSON (Longhorn's volumes, replicas
// and engines, KubeVirt's VMIs) are read first with one LIST, then
// watched from it, never streamed: a streaming list of JSON costs the
// reader about twice the CPU (kube.listFirst).
func TestSnapshotListsTheJSONKindsFirst(t *testing.T) {
	site := sitebox.Shared(t)
	log := &requestLog{}
	cfg := rest.CopyConfig(site.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { log.next = rt; return log })
	sitebox.StartSnapshot(t, cfg)

	kinds := jsonKinds
	listedThenWatched := func(requests []string, kind string) bool {
		list := slices.Index(requests, "LIST "+kind)
		watch := slices.Index(requests, "WATCH "+kind)
		return list >= 0 && watch > list && !slices.Contains(requests, "STREAM "+kind)
	}
	// A cache is synced once its LIST is stored, a moment before its
	// watch is asked for.
	var requests []string
	_ = wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		requests = log.requests()
		for _, kind := range kinds {
			if !listedThenWatched(requests, kind) {
				return false, nil
			}
		}
		return true, nil
	})
	for _, kind := range kinds {
		if !listedThenWatched(requests, kind) {
			t.Errorf("%s was not read with a LIST, then watched from it: %v", kind, matching(requests, kind))
		}
	}
}

func matching(requests []string, path string) []string {
	var out []string
	for _, r := range requests {
		if strings.HasSuffix(r, " "+path) {
			out = append(out, r)
		}
	}
	return out
}

// jsonKinds are the paths of the kinds a snapshot reads with one LIST of
// JSON: Longhorn's and KubeVirt's.
var jsonKinds = []string{
	"/apis/longhorn.io/v1beta2/namespaces/" + kube.LonghornNamespace + "/volumes",
	"/apis/longhorn.io/v1beta2/namespaces/" + kube.LonghornNamespace + "/replicas",
	"/apis/longhorn.io/v1beta2/namespaces/" + kube.LonghornNamespace + "/engines",
	"/apis/kubevirt.io/v1/virtualmachineinstances",
}

// A snapshot whose time runs out while the API server answers, and one of
// its lists is still coming, says that, and which kinds are still being
// read: not "no answer from the API server", which sends a technician
// after k3s and etcd's quorum while the cluster is only large, or the
// machine busy. It syncs once the list comes.
func TestSnapshotSaysWhatIsStillBeingRead(t *testing.T) {
	volumes := &heldTransport{held: "/volumes", release: make(chan struct{})}
	released := sync.OnceFunc(func() { close(volumes.release) })
	t.Cleanup(released)
	// Long enough for discovery and the readiness probe on a loaded
	// machine: the test is of what is said when the time runs out.
	snap, err := syncThrough(t, func(rt http.RoundTripper) http.RoundTripper { volumes.next = rt; return volumes }, 10*time.Second)
	if err == nil {
		t.Fatal("the snapshot says it has synced while its volumes' LIST is unanswered")
	}
	var reading kube.StillReadingError
	if !errors.As(err, &reading) || !slices.Contains(reading.Kinds, "Longhorn volumes") || slices.Contains(reading.Kinds, "pods") {
		t.Fatalf("WaitForSync with the volumes' LIST held: %v (%#v), want the volumes, and only what is unread, still being read", err, reading)
	}
	released()
	whole, cancelWhole := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancelWhole()
	if err := snap.WaitForSync(whole); err != nil {
		t.Fatalf("the snapshot did not sync once the volumes were answered: %v", err)
	}
}

// syncThrough starts a snapshot whose requests go through wrap and waits
// up to within for it to sync, giving the snapshot and WaitForSync's
// error.
func syncThrough(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper, within time.Duration) (*kube.Snapshot, error) {
	t.Helper()
	cfg := rest.CopyConfig(sitebox.Shared(t).Config)
	cfg.Wrap(wrap)
	snap, err := kube.NewSnapshot(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	snap.Start(t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	return snap, snap.WaitForSync(ctx)
}

// missingKind sends every request for the kind at path's end to a kind
// the API server does not serve: its answer, a 404, is a real server's.
type missingKind struct {
	next   http.RoundTripper
	suffix string
}

func (m *missingKind) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, m.suffix) {
		req = req.Clone(req.Context())
		req.URL.Path += "-not-served"
	}
	return m.next.RoundTrip(req)
}

// A kind whose list fails is said as such when the time runs out, even
// though the API server answers every other request: more time would
// not read it, so it is not "still being read".
func TestSnapshotSaysWhichListFailed(t *testing.T) {
	_, err := syncThrough(t, func(rt http.RoundTripper) http.RoundTripper { return &missingKind{next: rt, suffix: "/engines"} }, 10*time.Second)
	if err == nil {
		t.Fatal("the snapshot says it has synced while its engines' list fails")
	}
	var reading kube.StillReadingError
	if errors.As(err, &reading) || !strings.Contains(err.Error(), "Longhorn engines") {
		t.Fatalf("WaitForSync with the engines' list failing: %v, want the engines' list named as failed", err)
	}
}

// failingVersion answers every request for the server's version with a
// bare 500, as an API server whose discovery is broken would.
type failingVersion struct{ next http.RoundTripper }

func (f failingVersion) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path == "/version" {
		return &http.Response{StatusCode: http.StatusInternalServerError, Status: "500 Internal Server Error",
			Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	}
	return f.next.RoundTrip(req)
}

// An API server that is ready while the snapshot's discovery keeps failing
// gets discovery's error when the time runs out, not "still being read":
// nothing is being read.
func TestSnapshotSaysDiscoveryFailed(t *testing.T) {
	_, err := syncThrough(t, func(rt http.RoundTripper) http.RoundTripper { return failingVersion{next: rt} }, 5*time.Second)
	var reading kube.StillReadingError
	if err == nil || errors.As(err, &reading) || !strings.Contains(err.Error(), "an error on the server") {
		t.Fatalf("WaitForSync while discovery fails: %v, want discovery's error", err)
	}
}
