//go:build faults

package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/kube"
)

// waitOneStatsLeader waits until exactly one of agents leads the stats
// election and the Lease names it; it returns that node and how long it
// took.
func waitOneStatsLeader(t testing.TB, cs kubernetes.Interface, agents map[string]*siteAgent, what string, within time.Duration) (string, time.Duration) {
	t.Helper()
	from := time.Now()
	leader := until(t, within, "one stats leader "+what, func() (string, bool) {
		var leaders []string
		for n, a := range agents {
			if a.agent.LeaderState().IsLeader {
				leaders = append(leaders, n)
			}
		}
		slices.Sort(leaders)
		if len(leaders) != 1 {
			return fmt.Sprintf("agents leading: %v", leaders), false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		l, err := cs.CoordinationV1().Leases(kube.AppNamespace).Get(ctx, kube.StatsLeaderLeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != leaders[0] {
			return fmt.Sprintf("agents leading: %v; the Lease: %v", leaders, err), false
		}
		return leaders[0], true
	}, func(s string) string { return s })
	return leader, time.Since(from)
}
