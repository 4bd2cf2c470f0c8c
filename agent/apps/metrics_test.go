package apps

import (
	"io"
	"net/http"
	"regexp"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"
)

// The agent runs for days on every node of a site: what it costs the
// device (its resident memory, its heap, the collector's target) is read
// where its other figures are, on /metrics, and says what the process
// really has.
func TestMetricsServeWhatTheAgentCosts(t *testing.T) {
	srv, addr, err := NewMetrics().Serve("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	value := func(name string) float64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(body)
		if m == nil {
			t.Fatalf("/metrics has no %s:\n%.2000s", name, body)
		}
		v, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(gogc)
	if got, want := value("go_gc_gogc_percent"), float64(gogc[0].Value.Uint64()); got != want {
		t.Errorf("go_gc_gogc_percent %v, the process collects at %v", got, want)
	}
	if rss := value("process_resident_memory_bytes"); rss < 1<<20 {
		t.Errorf("process_resident_memory_bytes %v: not the process's memory", rss)
	}
	if heap := value("go_memstats_heap_alloc_bytes"); heap <= 0 {
		t.Errorf("go_memstats_heap_alloc_bytes %v", heap)
	}
}
