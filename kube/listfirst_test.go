package kube_test

import (
	"context"
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
	startSnapshot(t, cfg)

	kinds := []string{
		"/apis/longhorn.io/v1beta2/namespaces/" + kube.LonghornNamespace + "/volumes",
		"/apis/longhorn.io/v1beta2/namespaces/" + kube.LonghornNamespace + "/replicas",
		"/apis/longhorn.io/v1beta2/namespaces/" + kube.LonghornNamespace + "/engines",
		"/apis/kubevirt.io/v1/virtualmachineinstances",
	}
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
