package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent"
)

// The agents as the demo and a device run them (`sitecon agent`) collect
// their garbage at agent.DefaultGCPercent, and say what they cost the device on
// /metrics: the resident memory a technician would look up in top, and
// the collector's target behind it.
func TestAgentsCollectAtTheirGCPercent(t *testing.T) {
	site := startSiteboxAgents(t)
	want := fmt.Sprint(agent.DefaultGCPercent)
	switch gogc := os.Getenv("GOGC"); gogc {
	case "":
	case "off":
		want = "-1"
	default:
		// The agents inherit this process's environment, and are given
		// no --gc-percent: the GOGC stands (TestAgentCollectsAtItsGCPercent).
		want = gogc
	}
	client := &http.Client{Timeout: 2 * time.Second}
	gogc := regexp.MustCompile(`(?m)^go_gc_gogc_percent (\S+)$`)
	rss := regexp.MustCompile(`(?m)^process_resident_memory_bytes (\S+)$`)
	for _, n := range site.Nodes {
		url := "http://" + n.MetricsAddr() + "/metrics"
		until(t, 30*time.Second, n.Name+"'s agent serves its collector's target and memory on "+url, func() (string, bool) {
			resp, err := client.Get(url)
			if err != nil {
				return err.Error(), false
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				return err.Error(), false
			}
			g, r := gogc.FindSubmatch(body), rss.FindSubmatch(body)
			if g == nil || r == nil {
				return fmt.Sprintf("no go_gc_gogc_percent or process_resident_memory_bytes in:\n%.1500s", body), false
			}
			return fmt.Sprintf("go_gc_gogc_percent %s, process_resident_memory_bytes %s", g[1], r[1]), string(g[1]) == want
		}, func(last string) string { return "want go_gc_gogc_percent " + want + "; last: " + last })
	}
}
