package statusserver

import (
	"context"
	"net"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
)

// The probe finds a member of the same cluster among the addresses; empty
// answers, other clusters and silent addresses do not count.
func TestMemberProbe(t *testing.T) {
	answers := map[string]string{"10.244.244.2": "", "10.244.244.3": "cluster:other", "10.244.244.4": "cluster:mine"}
	servers := map[string]string{}
	for ip, answer := range answers {
		srv := httptest.NewServer(Handler(strings.TrimPrefix(answer, "cluster:"), func() bool { return answer != "" }))
		t.Cleanup(srv.Close)
		servers[ip] = srv.Listener.Addr().String()
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(addr)
		if to, ok := servers[host]; ok {
			return (&net.Dialer{}).DialContext(ctx, network, to)
		}
		return nil, &net.OpError{Op: "dial", Net: network, Err: context.DeadlineExceeded}
	}
	v := agenttest.Validated(t, func(c *config.Config) { c.ClusterIPPrefix = "10.244.244.1/28" })
	addrs := formation.ProbeAddresses(v)
	if len(addrs) != 13 || addrs[0].String() != "10.244.244.2" {
		t.Fatalf("a /28 probes its 13 other hosts, got %v", addrs)
	}
	p := formation.MemberProbe{ClusterID: "mine", Dial: dial}
	if got := p.Find(t.Context(), addrs); got.String() != "10.244.244.4" {
		t.Fatalf("found %v, want 10.244.244.4", got)
	}
	if got := p.Find(t.Context(), addrs[:2]); got.IsValid() {
		t.Fatalf("an empty answer or another cluster counted: %v", got)
	}
	big := agenttest.Validated(t, func(c *config.Config) { c.ClusterIPPrefix = "10.244.0.1/16"; c.JoinServerIP = "10.244.200.7" })
	if a := formation.ProbeAddresses(big); len(a) != 254 || a[len(a)-1] != netip.MustParseAddr("10.244.200.7") {
		t.Fatalf("a /16 probes the lowest addresses and the join address: %d, last %v", len(a), a[len(a)-1])
	}
}
